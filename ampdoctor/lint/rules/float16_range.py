"""AMP3xx: constants and training setups that float16's narrow range cannot represent.

float16 holds magnitudes up to 65504 and down to 2**-24 (the smallest subnormal). A fill value
beyond the top of the range raises or becomes inf; an epsilon below the bottom becomes zero.
bfloat16 has float32's exponent range, so none of this applies to it: every rule here needs
float16 somewhere in the module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator

from ...records import Record
from ..anchors import Anchors
from ..model import AmpFacts, CallSite, Frame, Region
from ..passes import downcast_dtype, is_optimizer_constructor
from ..syntax import call_args, dotted, is_float_literal, number_value, string_value
from ..vocabulary import AUTOCAST_NAMES, DTYPES, FLOAT16_MAX, FLOAT16_SMALLEST
from . import AUTOCAST, FLOAT16, FixPlan, LintRule, NodeEdit, Report, register
from .region_walker import (
    RegionWalker,
    cast_target,
    layer_instances,
    lowered_op,
    strip_views,
)

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from ...findings import Applicability


def _is_finite(value: float) -> bool:
    return value == value and abs(value) != float("inf")


def uses_float16(facts: AmpFacts) -> bool:
    """float16 autocast, a ``.half()``/``.to(torch.float16)`` cast, or a ``dtype=torch.float16`` argument."""
    if facts.uses_float16:
        return True
    for site in facts.calls:
        if site.method in ("half", "to", "type") and downcast_dtype(site, facts) == "float16":
            return True
        dtype = site.arg(None, "dtype")
        if dtype is not None and DTYPES.get(facts.qualify(dtype.value) or "") == "float16":
            return True
    return False


# --------------------------------------------------------------------------------------
# AMP301
# --------------------------------------------------------------------------------------

# method name → (position, keyword) of the values it writes into the receiver's dtype
_FILL_METHODS = {
    "masked_fill": ((1, "value"),),
    "masked_fill_": ((1, "value"),),
    "fill_": ((0, "value"),),
    "new_full": ((1, "fill_value"),),
    "clamp": ((0, "min"), (1, "max")),
    "clamp_": ((0, "min"), (1, "max")),
    "clip": ((0, "min"), (1, "max")),
    "clip_": ((0, "min"), (1, "max")),
    "clamp_min": ((0, "min"),),
    "clamp_max": ((0, "max"),),
}
_FILL_FUNCTIONS = {
    "torch.masked_fill": ((2, "value"),),
    "torch.full_like": ((1, "fill_value"),),
    "torch.full": ((1, "fill_value"),),
    "torch.where": ((1, "input"), (2, "other")),
    "torch.clamp": ((1, "min"), (2, "max")),
    "torch.clip": ((1, "min"), (2, "max")),
}
# Methods whose receiver is the tensor that receives the value: the fix can name its dtype.
_RECEIVER_FIX = {"masked_fill", "masked_fill_", "fill_", "clamp", "clamp_", "clip", "clip_", "clamp_min", "clamp_max"}


def overflowing_fills(site: CallSite, slots: Iterable[tuple[int, str]]) -> Iterator[tuple[ast.expr, float]]:
    """The fill values among a call's ``slots`` ((position, keyword) pairs) that float16 cannot
    hold, each with its value (none when every one fits or none is a literal)."""
    for position, keyword in slots:
        arg = site.arg(position, keyword)
        if arg is None:
            continue
        value = _overflows(arg.value)
        if value is not None:
            yield arg.value, value


def _overflows(expr: ast.expr) -> float | None:
    value = number_value(expr)
    if value is None or not _is_finite(value) or abs(value) <= FLOAT16_MAX:
        return None
    return value


def _explicit_non_half(site: CallSite, facts: AmpFacts) -> bool:
    """``torch.full(..., dtype=torch.float32)``: a dtype is named and it is not float16."""
    dtype = site.arg(None, "dtype")
    if dtype is None:
        return False
    named = DTYPES.get(facts.qualify(dtype.value) or "")
    if named is not None:
        return named != "float16"
    name = facts.qualify(dtype.value) or ""
    return name.startswith("torch.") and name[6:] in ("long", "int", "int64", "int32", "bool", "uint8", "int8", "int16")


_FACTORIES = {
    "torch.zeros",
    "torch.ones",
    "torch.empty",
    "torch.full",
    "torch.tensor",
    "torch.zeros_like",
    "torch.ones_like",
    "torch.empty_like",
    "torch.full_like",
    "torch.arange",
    "torch.rand",
    "torch.randn",
}


def _made_non_half(site: CallSite, facts: AmpFacts) -> bool:
    """``torch.zeros(n, dtype=torch.float).fill_(-1e5)``: the method's receiver is made right there
    by a torch factory that names a dtype other than float16."""
    func = site.node.func
    receiver = func.value if isinstance(func, ast.Attribute) else None
    if not isinstance(receiver, ast.Call) or facts.qualify(receiver.func) not in _FACTORIES:
        return False
    dtype = next((k.value for k in receiver.keywords if k.arg == "dtype"), None)
    named = DTYPES.get(facts.qualify(dtype) or "") if dtype is not None else None
    return named is not None and named != "float16"


# Calls whose result is float32 whatever autocast does (a plain factory, an explicit upcast).
_FLOAT32_METHODS = {"float", "double"}


def float32_receiver(facts: AmpFacts, site: CallSite) -> bool:
    """The tensor a method fills is not float16 for certain: ``x.float().masked_fill(...)``, or
    a name last bound in the function to such a value or to a torch factory without a float16
    dtype (``bias = torch.zeros(n)``: autocast leaves factories alone)."""
    func = site.node.func
    receiver = func.value if isinstance(func, ast.Attribute) else None
    if receiver is None:
        return False
    if _not_half(facts, receiver):
        return True
    name = dotted(receiver)
    if name is None:
        return False
    earlier = [a for a in facts.assigned(site.frame, name) if a.order < site.order]
    return bool(earlier) and _not_half(facts, earlier[-1].value)


def _not_half(facts: AmpFacts, expr: ast.expr) -> bool:
    if not isinstance(expr, ast.Call):
        return False
    func = expr.func
    if isinstance(func, ast.Attribute) and func.attr in _FLOAT32_METHODS and not (expr.args or expr.keywords):
        return True
    if isinstance(func, ast.Attribute) and func.attr == "to":
        target = expr.args[0] if expr.args else next((k.value for k in expr.keywords if k.arg == "dtype"), None)
        named = DTYPES.get(facts.qualify(target) or "") if target is not None else None
        return named is not None and named != "float16"
    factory = facts.qualify(func)
    if factory not in _FACTORIES:
        return False
    dtype = next((k.value for k in expr.keywords if k.arg == "dtype"), None)
    if dtype is None:
        return not factory.endswith("_like")  # float32 (or an integer type) by default
    named = DTYPES.get(facts.qualify(dtype) or "")
    return named is not None and named != "float16"


def _torch_name(facts: AmpFacts) -> str | None:
    names = [local for local, qname in facts.imports.items() if qname == "torch"]
    if "torch" in names:
        return "torch"
    return names[0] if names else None


class _AdditiveWalker(RegionWalker):
    """``x + c`` / ``x - c`` (``c`` or ``c * mask``) with a huge float literal inside a float16 region."""

    def __init__(self, facts: AmpFacts) -> None:
        super().__init__(facts)
        self.found: list[tuple[ast.expr, float]] = []

    def binary(self, node: ast.BinOp) -> None:
        if not isinstance(node.op, (ast.Add, ast.Sub)):
            return
        region = self.region
        if region is None or not region.is_float16:
            return
        for constant, other in ((node.right, node.left), (node.left, node.right)):
            literal = _additive_literal(constant)
            if literal is not None and _tensor_like(other):
                self.found.append(literal)
                return


def _additive_literal(expr: ast.expr) -> tuple[ast.expr, float] | None:
    """A float literal beyond float16's range, alone or as a factor of ``c * mask``."""
    candidates = [expr]
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mult):
        candidates = [expr.left, expr.right]
    for candidate in candidates:
        inner = candidate.operand if isinstance(candidate, ast.UnaryOp) else candidate
        if is_float_literal(inner):
            value = _overflows(candidate)
            if value is not None:
                return candidate, value
    return None


def _tensor_like(expr: ast.expr) -> bool:
    """Not a number and not an obvious Python scalar (``len(x)``, ``time.time()``)."""
    if number_value(expr) is not None:
        return False
    if isinstance(expr, ast.Call) and dotted(expr.func) in ("len", "float", "int", "time.time", "time.perf_counter"):
        return False
    return isinstance(expr, (ast.Name, ast.Attribute, ast.Subscript, ast.Call, ast.BinOp))


@register
class Float16OverflowConstant(LintRule):
    code = "AMP301"
    tokens = (".half", "float16", "HalfTensor", "autocast")
    anchors = (  # a fill value in a module that uses float16, or arithmetic inside autocast
        Anchors(FLOAT16.names, FLOAT16.methods, FLOAT16.casts, requires=("big-fill",)),
        Anchors(AUTOCAST.names, requires=("big-arith",)),
    )

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if not uses_float16(facts):
            return
        torch_name = _torch_name(facts)
        for site in facts.calls:
            slots = _FILL_FUNCTIONS.get(site.qname or "") if site.qname else _FILL_METHODS.get(site.method or "")
            if not slots:
                continue
            if site.qname in ("torch.full",) and site.arg(None, "dtype") is None:
                continue  # a float32 tensor by default: the value fits
            if site.qname in ("torch.full", "torch.full_like") and _explicit_non_half(site, facts):
                continue
            if site.method == "new_full" and _explicit_non_half(site, facts):
                continue
            if site.qname is None and (_made_non_half(site, facts) or float32_receiver(facts, site)):
                continue  # ``scores.float().masked_fill(mask, -1e18)``: a float32 tensor
            for fill, value in overflowing_fills(site, slots):
                label = site.qname or f".{site.method}()"
                yield self._report(facts, fill, value, label, site, torch_name)
        for target, stored in _stores_into_float16(facts):
            yield Report(
                self.code,
                stored,
                f"`{facts.text(stored)}` stored into `{target}`, which comes out of a float16 autocast region, does "
                "not fit in float16 (max 65504): it becomes ±inf, and a softmax over it makes NaN",
                help=f"Use `torch.finfo({target}.dtype).min` (or `.max`), which is right for every dtype",
            )
        if facts.uses_float16:
            walker = _AdditiveWalker(facts)
            walker.walk(site for site in facts.calls if site.in_autocast or site.qname in AUTOCAST_NAMES)
            for literal, _value in walker.found:
                yield Report(
                    self.code,
                    literal,
                    f"`{facts.text(literal)}` is beyond float16's range (±65504): added to a float16 tensor it "
                    "makes ±inf, and inf - inf in a softmax makes NaN",
                    help="Use `torch.finfo(x.dtype).min` (or `.max`) of the tensor, or mask with `masked_fill`",
                )

    def _report(
        self, facts: AmpFacts, literal: ast.expr, value: float, label: str, site: CallSite, torch_name: str | None
    ) -> Report:
        bound = "min" if value < 0 else "max"
        if label == "torch.where":
            effect = "selected into a float16 tensor it becomes ±inf, and a fully masked row turns into NaN"
        else:
            effect = "on a float16 tensor torch raises 'value cannot be converted to type at::Half without overflow'"
        fix = None
        receiver = site.receiver
        if site.qname is None and site.method in _RECEIVER_FIX and receiver is not None and torch_name is not None:
            text = f"{torch_name}.finfo({receiver}.dtype).{bound}"
            # ``literal`` excludes any parentheses around it, which then stay around the new text.
            fix = FixPlan(
                f"Replace `{facts.text(literal)}` with `{text}`", (NodeEdit("replace", literal, text),), _unsafe()
            )
        return Report(
            self.code,
            literal,
            f"`{facts.text(literal)}` passed to `{label}` does not fit in float16 (max 65504): {effect}",
            help=f"Use `torch.finfo(<tensor>.dtype).{bound}`, which is right for every dtype",
            fix=fix,
            statement=site.statement,
        )


def _stores_into_float16(facts: AmpFacts) -> Iterable[tuple[str, ast.expr]]:
    """``logits[idx] = -1e10`` where ``logits`` was last bound, in the same function, to the
    result of a call made inside a float16 autocast region."""
    if not facts.item_assignments or not facts.uses_float16:
        return
    made_in_float16 = {
        id(site.statement.value)
        for site in facts.calls
        if site.region is not None and site.region.is_float16 and type(site.statement) is ast.Assign
    }
    for target, assign, frame in facts.item_assignments:
        if _overflows(assign.value) is None:
            continue
        earlier = [a for a in facts.assigned(frame, target) if a.value.lineno < assign.lineno]
        if earlier and id(earlier[-1].value) in made_in_float16:
            yield target, assign.value


def _unsafe() -> Applicability:
    from ...findings import Applicability

    return Applicability.UNSAFE


# --------------------------------------------------------------------------------------
# Models made float16, and the optimizers over their parameters (AMP302, AMP303)
# --------------------------------------------------------------------------------------


class _HalfModel(Record):
    __slots__ = ("name", "frame", "order")

    def __init__(self, name: str, frame: Frame, order: int) -> None:
        self.name = name
        self.frame = frame
        self.order = order


HALF_METHODS = ("half", "to", "type", "convert_to_fp16")  # the calls that may make a model float16


def _half_models(facts: AmpFacts) -> list[_HalfModel]:
    """``model.half()`` as a statement, or ``model = <...>.half()`` / ``.to(torch.float16)``."""
    found = []
    for site in facts.calls:
        if site.method not in HALF_METHODS or downcast_dtype(site, facts) != "float16":
            continue
        statement = site.statement
        if isinstance(statement, ast.Expr) and statement.value is site.node and site.receiver:
            found.append(_HalfModel(site.receiver, site.frame, site.order))
        elif isinstance(statement, ast.Assign) and statement.value is site.node and len(statement.targets) == 1:
            name = dotted(statement.targets[0])
            if name is not None:
                found.append(_HalfModel(name, site.frame, site.order))
    return found


def model_of_params(expr: ast.expr) -> str | None:
    """``M.parameters()`` / ``list(M.parameters())`` / ``[{"params": M.parameters()}]`` /
    ``[p for p in M.parameters() if p.requires_grad]`` / ``filter(f, M.parameters())`` → ``M``."""
    if isinstance(expr, ast.Call):
        if isinstance(expr.func, ast.Attribute) and expr.func.attr == "parameters":
            return dotted(expr.func.value)
        args = call_args(expr)
        if dotted(expr.func) == "list" and len(args) == 1:
            return model_of_params(args[0].value)
        if dotted(expr.func) == "filter" and len(args) == 2:
            return model_of_params(args[1].value)
    if isinstance(expr, (ast.ListComp, ast.GeneratorExp)) and len(expr.generators) == 1:
        generator = expr.generators[0]
        if isinstance(generator.target, ast.Name) and dotted(expr.elt) == generator.target.id:
            return model_of_params(generator.iter)
    if isinstance(expr, (ast.List, ast.Tuple)):
        models = set()
        for element in expr.elts:
            value = element.value if isinstance(element, ast.Starred) else element
            if isinstance(value, ast.Dict):
                for key, item in zip(value.keys, value.values):
                    if string_value(key) == "params":
                        models.add(model_of_params(item))
            else:
                models.add(model_of_params(value))
        if len(models) == 1:
            return models.pop()
    return None


def _restored_to_float(facts: AmpFacts, model: _HalfModel, until: int) -> bool:
    for site in model.frame.calls:
        if model.order < site.order < until and site.receiver == model.name and site.method in ("float", "to"):
            if cast_target(site.node, facts) == "float32":
                return True
    return False


def _master_weight_wrapper(facts: AmpFacts, optimizer: CallSite) -> bool:
    """An optimizer handed to an fp16 wrapper that keeps float32 master weights (apex, fairseq, DeepSpeed)."""
    statement = optimizer.statement
    names: set[str] = set()
    if isinstance(statement, ast.Assign):
        if statement.value is not optimizer.node:
            return True  # nested in another call: a wrapper
        names.update(name for name in map(_spelled, statement.targets) if name is not None)
    for site in facts.calls:
        label = (dotted(site.node.func) or "").lower()
        if not any(word in label for word in ("fp16", "float16", "master", "mixedprecision", "deepspeed")):
            continue
        for arg in call_args(site.node):
            if arg.value is optimizer.node or _spelled(arg.value) in names:
                return True
    return False


def _spelled(expr: ast.expr) -> str | None:
    """How an optimizer is named where it is kept: a name chain, or an item (``opts[0]``)."""
    name = dotted(expr)
    if name is None and type(expr) is ast.Subscript:
        name = ast.unparse(expr)
    return name


def half_optimizers(facts: AmpFacts) -> Iterable[tuple[CallSite, _HalfModel]]:
    """Optimizers built over the parameters of a model made float16 earlier in the same function."""
    models = _half_models(facts)
    if not models:
        return
    for site in facts.calls:
        if not is_optimizer_constructor(site.node, facts):
            continue
        params = site.arg(0, "params")
        name = model_of_params(params.value) if params is not None else None
        if name is None:
            continue
        for model in models:
            if model.name == name and model.frame is site.frame and model.order < site.order:
                if not _restored_to_float(facts, model, site.order) and not _master_weight_wrapper(facts, site):
                    yield site, model
                break


# --------------------------------------------------------------------------------------
# AMP302
# --------------------------------------------------------------------------------------


def _tiny(expr: ast.expr) -> float | None:
    value = number_value(expr)
    if value is None or not 0 < value < FLOAT16_SMALLEST:
        return None
    return value


# Elementwise methods that keep a float16 tensor float16 under autocast too.
_SAME_DTYPE = {"abs", "neg", "relu", "detach", "clone"}


class _EpsilonWalker(RegionWalker):
    """``t + eps`` / ``t / eps`` where ``t`` is known to be float16."""

    def __init__(self, facts: AmpFacts) -> None:
        super().__init__(facts)
        self.layers = layer_instances(facts)
        self.half: list[dict[str, Region | None]] = [{}]  # name → region that made it (None: a cast)
        self.found: list[tuple[ast.expr, str]] = []

    def enter_frame(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.half.append({})

    def leave_frame(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.half.pop()

    def _origin(self, expr: ast.expr) -> str | None:
        """How ``expr`` is known to be float16 here: "cast", "autocast", or None."""
        expr = strip_views(expr)
        while (
            isinstance(expr, ast.Call)
            and isinstance(expr.func, ast.Attribute)
            and expr.func.attr in _SAME_DTYPE
            and not (expr.args or expr.keywords)
        ):
            expr = strip_views(expr.func.value)
        if cast_target(expr, self.facts) == "float16":
            return "cast"
        region = self.region
        in_half_region = region is not None and region.is_float16
        if in_half_region:
            if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.MatMult):
                return "autocast"
            if isinstance(expr, ast.Call) and lowered_op(expr, self.facts, self.layers) is not None:
                return "autocast"
        name = dotted(expr)
        if name is not None and name in self.half[-1]:
            made_in = self.half[-1][name]
            if made_in is None:
                return "cast"
            if made_in is region:
                return "autocast"
        return None

    def binary(self, node: ast.BinOp) -> None:
        pairs: tuple[tuple[ast.expr, ast.expr], ...]
        if isinstance(node.op, ast.Add):
            pairs = ((node.right, node.left), (node.left, node.right))
        elif isinstance(node.op, ast.Div):
            pairs = ((node.right, node.left),)
        else:
            return
        for constant, tensor in pairs:
            if _tiny(constant) is not None and self._origin(tensor) is not None:
                self.found.append((constant, "added to" if isinstance(node.op, ast.Add) else "dividing"))
                return

    def assigned(self, name: str, value: ast.expr | None) -> None:
        origin = self._origin(value) if value is not None else None
        if origin is None:
            self.half[-1].pop(name, None)
        else:
            self.half[-1][name] = None if origin == "cast" else self.region


@register
class Float16UnderflowEpsilon(LintRule):
    code = "AMP302"
    tokens = (".half", "float16", "HalfTensor", "autocast")
    anchors = (  # arithmetic on float16 tensors, or eps= for an optimizer over .half() parameters
        # The arithmetic check runs only in functions with an autocast region or a conversion
        # to float16 (``.half()``, ``.to(torch.float16)``): a ``dtype=`` in a factory call is not one.
        Anchors(FLOAT16.names, ("half()",), method_casts=FLOAT16.casts, requires=("tiny-arith",)),
        Anchors(methods=FLOAT16.methods, casts=FLOAT16.casts, requires=("tiny-eps",)),
    )

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if not uses_float16(facts):
            return
        for optimizer, model in half_optimizers(facts):
            eps = optimizer.arg(None, "eps")
            if eps is None or _tiny(eps.value) is None:
                continue
            yield Report(
                self.code,
                eps.value,
                f"`eps={facts.text(eps.value)}` is below float16's smallest value (2**-24 ≈ 6e-8) and the optimizer "
                f"state of `{model.name}` is float16: eps rounds to zero and the update divides by zero",
                help="Keep float32 master weights (autocast + GradScaler), or use an eps of at least 1e-4 in float16",
                statement=optimizer.statement,
            )
        walker = _EpsilonWalker(facts)
        walker.walk(
            site
            for site in facts.calls
            if site.in_autocast or site.qname in AUTOCAST_NAMES or downcast_dtype(site, facts) == "float16"
        )
        for constant, how in walker.found:
            yield Report(
                self.code,
                constant,
                f"`{facts.text(constant)}` {how} a float16 tensor is below float16's smallest value (2**-24 ≈ 6e-8): "
                "it rounds to zero and no longer guards against division by zero",
                help="Compute this step in float32 (`.float()` under `torch.autocast(..., enabled=False)`) "
                "or use an epsilon float16 can hold, such as 1e-4",
            )


# --------------------------------------------------------------------------------------
# AMP303
# --------------------------------------------------------------------------------------


@register
class HalfModelTraining(LintRule):
    code = "AMP303"
    tokens = (".half", "float16", "HalfTensor", "convert_to_fp16")
    needs = (rb"parameters\(",)  # the optimizer is built over the model's parameters
    anchors = Anchors(
        FLOAT16.names, (*FLOAT16.methods, "convert_to_fp16"), FLOAT16.casts, requires_methods=("parameters",)
    )

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        for optimizer, model in half_optimizers(facts):
            yield Report(
                self.code,
                optimizer.node,
                f"the optimizer updates the parameters of `{model.name}`, which was made float16: without float32 "
                "master weights, updates smaller than float16's resolution are lost",
                help='Keep the model in float32 and use `torch.autocast("cuda", dtype=torch.float16)` with '
                "`torch.amp.GradScaler`, or give the optimizer float32 master copies of the parameters",
                statement=optimizer.statement,
            )
