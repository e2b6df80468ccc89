"""AMP104–AMP107: what autocast does to the code inside its regions. The walker that knows the
region around any expression lives in region_walker.py (the numerics rules use it too).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

from ..model import AmpFacts, CallSite, Frame, Region, autocast_region
from ..syntax import (
    FUNCTION_TYPES,
    call_args,
    dotted,
    get_arg,
    iter_nodes,
    string_value,
)
from ..vocabulary import AUTOCAST_NAMES, CUSTOM_FWD_NAMES
from . import AUTOCAST, FixPlan, LintRule, NodeEdit, Report, register
from .region_walker import (
    VIEW_METHODS,
    RegionWalker,
    cast_target,
    layer_instances,
    lowered_op,
    lowers,
    strip_views,
)

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from ..model import Assignment

# --------------------------------------------------------------------------------------
# AMP104
# --------------------------------------------------------------------------------------


class _UpcastWalker(RegionWalker):
    def __init__(self, facts: AmpFacts) -> None:
        super().__init__(facts)
        self.layers = layer_instances(facts)
        self.upcast: list[dict[str, Region]] = [{}]  # per frame: name → region it was made float32 in
        self.found: list[tuple[ast.expr, str, Region]] = []

    def enter_frame(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.upcast.append({})

    def leave_frame(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.upcast.pop()

    def _is_float32(self, expr: ast.expr, region: Region) -> bool:
        expr = strip_views(expr)
        if cast_target(expr, self.facts) == "float32":
            return True
        name = dotted(expr)
        return name is not None and self.upcast[-1].get(name) is region

    def _check(self, label: str, operands: Iterable[ast.expr]) -> None:
        region = self.region
        if not lowers(region):
            return
        assert region is not None
        for operand in operands:
            if self._is_float32(operand, region):
                self.found.append((operand, label, region))

    def binary(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult):
            self._check("@", (node.left, node.right))

    def call(self, node: ast.Call) -> None:
        op = lowered_op(node, self.facts, self.layers)
        if op is not None:
            self._check(*op)

    def assigned(self, name: str, value: ast.expr | None) -> None:
        region = self.region
        if value is not None and lowers(region) and cast_target(strip_views(value), self.facts) == "float32":
            assert region is not None
            self.upcast[-1][name] = region
        else:
            self.upcast[-1].pop(name, None)


@register
class UpcastUndoneByAutocast(LintRule):
    code = "AMP104"
    tokens = ("autocast",)
    anchors = AUTOCAST

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if not any(site.in_autocast and site.method in ("float", "to", "type") for site in facts.calls):
            return
        walker = _UpcastWalker(facts)
        walker.walk(site for site in facts.calls if site.in_autocast or site.qname in AUTOCAST_NAMES)
        for operand, label, region in walker.found:
            dtype = region.effective_dtype or "the autocast dtype"
            op = "`@`" if label == "@" else f"`{label}`"
            yield Report(
                self.code,
                operand,
                f"the float32 upcast is undone: autocast runs {op} in {dtype}, so the operand is cast back down",
                help="Run the op in float32 inside `with torch.autocast(<device>, enabled=False):` "
                "(with float32 inputs) to keep the upcast",
            )


# --------------------------------------------------------------------------------------
# AMP105
# --------------------------------------------------------------------------------------

_BCE_FUNCTIONS = {
    "torch.nn.functional.binary_cross_entropy",
    "torch.binary_cross_entropy",
    "torch._C._nn.binary_cross_entropy",
}
_BCE_MODULES = {"torch.nn.BCELoss", "torch.nn.modules.loss.BCELoss"}


@register
class UnsafeUnderAutocast(LintRule):
    code = "AMP105"
    tokens = ("binary_cross_entropy", "BCELoss")
    anchors = AUTOCAST

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if not facts.uses_autocast:
            return
        losses = [
            a
            for a in facts.assignments
            if isinstance(a.value, ast.Call) and facts.qualify(a.value.func) in _BCE_MODULES
        ]
        names = {a.target for a in losses}
        for site in facts.calls:
            region = site.region
            if region is None or not region.enabled.counts_as_on or region.device == "cpu":
                continue  # CPU autocast runs binary_cross_entropy in float32
            func = site.node.func
            if site.qname in _BCE_FUNCTIONS:
                what = "binary_cross_entropy"
            elif ((spelled := dotted(func)) in names and _bound_to_bce(facts, spelled, site.frame, losses)) or (
                isinstance(func, ast.Call) and facts.qualify(func.func) in _BCE_MODULES
            ):
                what = "nn.BCELoss"
            else:
                continue
            yield Report(
                self.code,
                site.node,
                f"`{what}` inside an autocast region raises a RuntimeError on CUDA: "
                "torch bans it under autocast because float16 probabilities lose precision near 0 and 1",
                help="Drop the sigmoid and compute the loss on logits with `F.binary_cross_entropy_with_logits` / "
                "`nn.BCEWithLogitsLoss`, or call it under `torch.autocast(..., enabled=False)` with `.float()` inputs",
                statement=site.statement,
            )


def _bound_to_bce(facts: AmpFacts, name: str, frame: Frame, losses: list[Assignment]) -> bool:
    """Whether ``name`` called in ``frame`` is one of the BCELoss bindings ``losses``: ``self.x``
    bound to one in a method of the same class; a plain name bound to one in the nearest
    enclosing scope that binds it (a parameter of that name, or another function's
    ``loss_fn = nn.BCELoss()``, is a different object)."""
    if name.startswith("self."):
        return any(a.target == name and a.frame.class_name == frame.class_name for a in losses)
    scope: Frame | None = frame
    while scope is not None:
        node = scope.node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and name in {
            a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)
        }:
            return False
        bound = facts.assigned(scope, name)
        if bound:
            return any(a in losses for a in bound)
        scope = scope.parent
    return False


# --------------------------------------------------------------------------------------
# AMP106
# --------------------------------------------------------------------------------------

_DEVICE_LESS = {"torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast"}


def _device_of(site_node: ast.Call, qname: str) -> tuple[bool, str | None]:
    """(device given?, literal device) for an autocast call."""
    fixed = AUTOCAST_NAMES.get(qname)
    if fixed is not None:
        return True, fixed
    arg = get_arg(site_node, 0, "device_type")
    if arg is None:
        return False, None
    return True, string_value(arg.value)


@register
class AutocastMissingDeviceType(LintRule):
    code = "AMP106"
    tokens = ("autocast",)
    anchors = AUTOCAST

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        missing: list[CallSite] = []
        devices: list[str | None] = []
        for site in facts.calls:
            if site.qname not in AUTOCAST_NAMES:
                continue
            if any(a.star for a in call_args(site.node)):
                devices.append(None)  # ``autocast(*args)``: the device may well be there
                continue
            given, device = _device_of(site.node, site.qname)
            if given:
                devices.append(device)
            elif site.qname in _DEVICE_LESS:
                missing.append(site)
        # The device every other region of the file names, when they all name the same one.
        named = set(devices)
        device = named.pop() if len(named) == 1 else None
        fixable = device is not None and device.isidentifier()
        for site in missing:
            yield Report(
                self.code,
                site.node,
                "`autocast()` without a device type raises TypeError: `device_type` is a required argument "
                "of `torch.autocast`",
                help=f'Pass the device first, e.g. `torch.autocast("{device if fixable else "cuda"}", dtype=torch.float16)`',
                fix=self._fix(site.node, facts, device) if fixable and device else None,
                statement=site.statement,
            )

    def _fix(self, call: ast.Call, facts: AmpFacts, device: str) -> FixPlan:
        description = f'Add device type "{device}" (every other autocast in this file uses it)'
        # The device is missing, so there is no positional argument: the first one is a keyword,
        # whose position starts at its name (never inside parentheses).
        first = call.args[0] if call.args else call.keywords[0] if call.keywords else None
        if first is not None:
            return FixPlan(description, (NodeEdit("insert_before", first, f'"{device}", '),))
        return FixPlan(description, (NodeEdit("replace", call, f'{facts.text(call.func)}("{device}")'),))


# --------------------------------------------------------------------------------------
# AMP107
# --------------------------------------------------------------------------------------

_FUNCTION_BASES = {"torch.autograd.Function", "torch.autograd.function.Function"}
_CUSTOM_BWD_NAMES = {"torch.amp.custom_bwd", "torch.cuda.amp.custom_bwd", "torch.amp.autocast_mode.custom_bwd"}


def _decorated_with(function: ast.FunctionDef | ast.AsyncFunctionDef, names: set[str], facts: AmpFacts) -> bool:
    for expr in function.decorator_list:
        target = expr.func if isinstance(expr, ast.Call) else expr
        qname = facts.qualify(target)
        if qname in names:
            return True
        if isinstance(expr, ast.Call) and autocast_region(expr, facts.imports) is not None:
            return True  # the method pins its own autocast state
    return False


# Calls in a forward that autocast leaves alone: bookkeeping, views and copies.
_NEUTRAL_METHODS = VIEW_METHODS | {
    "clone",
    "detach",
    "save_for_backward",
    "mark_dirty",
    "mark_non_differentiable",
    "set_materialize_grads",
    "size",
    "dim",
    "numel",
    "requires_grad_",
    "new_empty",
    "new_zeros",
    "empty_like",
    "zeros_like",
    "ones_like",
    "item",
    "tolist",
}
_NEUTRAL_NAMES = {"len", "isinstance", "tuple", "list", "super", "getattr", "setattr", "hasattr", "range", "print"}


# Ops autocast leaves alone that a Function may be made of: moving and gathering tensors
# between processes, joining, splitting and allocating them.
_NEUTRAL_TORCH = ("torch.distributed.",)
_NEUTRAL_TORCH_NAMES = frozenset(
    {
        "torch.cat", "torch.concat", "torch.stack", "torch.split", "torch.chunk", "torch.narrow",
        "torch.empty", "torch.empty_like", "torch.zeros", "torch.zeros_like", "torch.ones", "torch.ones_like",
        "torch.flatten", "torch.unbind",
    }
)  # fmt: skip


def _computes(function: ast.FunctionDef | ast.AsyncFunctionDef, frame: Frame) -> bool:
    """Whether ``forward`` runs any op autocast could cast (a ``@`` or a non-bookkeeping call:
    not a view, a copy, a gather or a scatter between processes, a join or a split)."""
    for site in frame.calls:
        if site.method in _NEUTRAL_METHODS or dotted(site.node.func) in _NEUTRAL_NAMES:
            continue
        qname = site.qname or ""
        if qname.startswith(_NEUTRAL_TORCH) or qname in _NEUTRAL_TORCH_NAMES:
            continue
        return True
    return any(
        isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.MatMult)
        for statement in function.body
        for node in iter_nodes(statement)
    )


def _opens_autocast(frame: Frame, helpers: dict[str, Frame] | None = None) -> bool:
    """Whether the method opens an autocast region itself, or calls a function of the module
    that does (``afb1d(x, ..., use_amp)`` entering ``torch.autocast(enabled=use_amp)``)."""
    if any(site.qname in AUTOCAST_NAMES for site in frame.calls):
        return True
    if not helpers:
        return False
    return any(
        type(site.node.func) is ast.Name
        and site.node.func.id in helpers
        and any(inner.qname in AUTOCAST_NAMES for inner in helpers[site.node.func.id].calls)
        for site in frame.calls
    )


@register
class CustomFunctionWithoutCustomFwd(LintRule):
    code = "AMP107"
    tokens = ("autocast",)  # only modules that use autocast
    needs = (rb"Function",)
    anchors = AUTOCAST

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if not any(r.enabled.counts_as_on and r.kind != "custom_fwd" for r in facts.regions):
            return
        if _regions_run_only_torch(facts):
            return  # the module's autocast runs none of its code: its Functions run outside it
        frames = {id(node): frame for node, frame in facts.functions}
        # The module's own functions, by name: a Function may enter autocast through them.
        helpers = {node.name: frame for node, frame in facts.functions if frame.class_name is None}
        for cls, bases in facts.classes:
            if not any(b in _FUNCTION_BASES for b in bases):
                continue
            methods = {s.name: s for s in cls.body if isinstance(s, FUNCTION_TYPES)}
            forward, backward = methods.get("forward"), methods.get("backward")
            if forward is None or backward is None:
                continue
            forward_frame, backward_frame = frames.get(id(forward)), frames.get(id(backward))
            if forward_frame is None or backward_frame is None or not _computes(forward, forward_frame):
                continue  # ``return x.view_as(x)``: autocast has nothing to cast in forward
            if _opens_autocast(forward_frame, helpers) or _opens_autocast(backward_frame, helpers):
                continue  # the Function saves and restores the autocast state itself
            missing = []
            if not _decorated_with(forward, CUSTOM_FWD_NAMES, facts):
                missing.append("`forward` lacks `@torch.amp.custom_fwd`")
            if not _decorated_with(backward, _CUSTOM_BWD_NAMES, facts):
                missing.append("`backward` lacks `@torch.amp.custom_bwd`")
            if not missing:
                continue
            yield Report(
                self.code,
                _class_name(cls, facts),
                f"autograd Function `{cls.name}` in a module that uses autocast: {' and '.join(missing)}; "
                "its backward will not run under the autocast state its forward saw",
                help='Decorate `forward` with `@torch.amp.custom_fwd(device_type="cuda")` and `backward` with '
                '`@torch.amp.custom_bwd(device_type="cuda")`',
                statement=cls,
            )


def _regions_run_only_torch(facts: AmpFacts) -> bool:
    """Whether every call inside the module's autocast regions (that are or may be on) is one of
    torch's own functions (``F.normalize(x)``, ``F.linear(x, w)``): such regions run none of the
    module's code, its Functions included. A call of anything else (``self.head(x)``, a method of
    a local, ``Func.apply``) may."""
    for site in facts.calls:
        region = site.region
        if region is None or not region.enabled.counts_as_on or region.kind == "custom_fwd":
            continue
        if not (site.qname or "").startswith("torch."):
            return False
    return True


def _class_name(cls: ast.ClassDef, facts: AmpFacts) -> ast.AST:
    """A Name node over the class's name, where the finding points: ast keeps the name as a
    plain string, and the ClassDef itself spans the whole class body."""
    head = _CLASS_HEAD.match(facts.text(cls))
    if head is None:
        return cls  # ``class \`` continued on the next line: point at the statement
    start = cls.col_offset + head.end()  # ``class`` and blanks are ASCII: bytes = characters
    end = start + len(cls.name.encode("utf-8"))
    return ast.Name(
        cls.name, ast.Load(), lineno=cls.lineno, col_offset=start, end_lineno=cls.lineno, end_col_offset=end
    )


_CLASS_HEAD = re.compile(r"class[ \t\f]+")
