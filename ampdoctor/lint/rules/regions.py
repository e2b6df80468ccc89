"""AMP104–AMP107: what autocast does to the code inside its regions.

Two of these rules ask about values that are not calls (``q.float() @ k``, ``y = fc(x)``), so
this module has a small walker that follows one module's ``with`` blocks and knows, for any
expression, the innermost autocast region around it. It runs only when a rule's cheap
preconditions over AmpFacts hold. The numerics rules use it too.
"""

from __future__ import annotations

from typing import Iterable, Optional

import libcst as cst

from ..facts import (
    AUTOCAST_NAMES,
    CUSTOM_FWD_NAMES,
    DTYPES,
    AmpFacts,
    CallSite,
    Frame,
    Region,
    autocast_region,
    dotted,
    get_arg,
    string_value,
)
from . import AUTOCAST, FixPlan, LintRule, NodeEdit, Report, register

# --------------------------------------------------------------------------------------
# Ops that autocast runs in the lower precision (float16 / bfloat16) on every device
# --------------------------------------------------------------------------------------

_LOWERED_FUNCTIONS = {
    f"torch.{name}"
    for name in ("matmul", "mm", "bmm", "baddbmm", "addmm", "addbmm", "addmv", "mv", "conv1d", "conv2d", "conv3d",
                 "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "chain_matmul")
} | {
    f"torch.nn.functional.{name}"
    for name in ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
}
_LOWERED_METHODS = {"matmul", "mm", "bmm", "baddbmm", "addmm", "addbmm", "addmv", "mv"}
_LOWERED_LAYERS = {
    f"torch.nn.{name}"
    for name in ("Linear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d")
} | {"torch.nn.modules.linear.Linear", "torch.nn.modules.conv.Conv1d", "torch.nn.modules.conv.Conv2d",
     "torch.nn.modules.conv.Conv3d"}
# Methods and attributes that change a tensor's shape or layout but keep its dtype.
_VIEW_METHODS = {"t", "transpose", "permute", "view", "reshape", "contiguous", "unsqueeze", "squeeze", "flatten",
                 "expand", "view_as", "reshape_as", "swapaxes", "movedim"}
_VIEW_ATTRIBUTES = {"T", "mT", "H", "mH"}
_LOW_PRECISION = ("float16", "bfloat16")


def strip_views(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``x.float().t()`` → ``x.float()``: shape-only operations do not change the dtype."""
    while True:
        if isinstance(expr, cst.Attribute) and expr.attr.value in _VIEW_ATTRIBUTES:
            expr = expr.value
        elif (
            isinstance(expr, cst.Call)
            and isinstance(expr.func, cst.Attribute)
            and expr.func.attr.value in _VIEW_METHODS
            and not any(string_value(a.value) or DTYPES.get(dotted(a.value) or "") for a in expr.args)
        ):
            expr = expr.func.value
        else:
            return expr


def _cast_target(expr: cst.BaseExpression, facts: AmpFacts) -> Optional[str]:
    """The dtype of an explicit cast ``.float()``/``.half()``/``.to(dtype)``/``.type(dtype)``, else None."""
    if not (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute)):
        return None
    method = expr.func.attr.value
    simple = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64"}
    if method in simple:
        return simple[method] if not expr.args else None
    if method in ("to", "type"):
        for arg in expr.args:
            if arg.star or (arg.keyword is not None and arg.keyword.value != "dtype"):
                continue
            name = facts.qualify(arg.value) or string_value(arg.value) or ""
            dtype = DTYPES.get(name) or {"torch.FloatTensor": "float32", "torch.cuda.FloatTensor": "float32",
                                         "torch.HalfTensor": "float16", "torch.cuda.HalfTensor": "float16"}.get(name)
            if dtype is not None:
                return dtype
    return None


def layer_instances(facts: AmpFacts) -> set[str]:
    """Spellings (``self.proj``, ``fc``) assigned an ``nn.Linear``/``nn.Conv*`` instance in this module."""
    found = set()
    for assignment in facts.assignments:
        value = assignment.value
        if isinstance(value, cst.Call) and facts.qualify(value.func) in _LOWERED_LAYERS:
            found.add(assignment.target)
    return found


def lowered_op(call: cst.Call, facts: AmpFacts, layers: set[str]) -> Optional[tuple[str, list[cst.BaseExpression]]]:
    """(op label, tensor operands) when autocast runs ``call`` in the lower precision."""
    qname = facts.qualify(call.func)
    operands = [a.value for a in call.args if not a.star]
    if qname in _LOWERED_FUNCTIONS:
        return qname, operands
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value in _LOWERED_METHODS and qname is None:
        return f".{func.attr.value}()", [func.value, *operands]
    name = dotted(func)
    if name is not None and name in layers:
        return f"{name}(...)", operands
    return None


# --------------------------------------------------------------------------------------
# The walker: the autocast region around any node, and simple per-frame value tracking
# --------------------------------------------------------------------------------------


class RegionWalker(cst.CSTVisitor):
    """Visits a module knowing the innermost autocast region at every node.

    Subclasses override ``binary`` / ``call`` / ``assigned``. ``self.region`` is the innermost
    region (on, off or maybe) around the node being visited, or None.
    """

    def __init__(self, facts: AmpFacts) -> None:
        super().__init__()
        self.facts = facts
        self._by_item: dict[int, Optional[Region]] = {}
        for site in facts.calls:
            for ref in site.withs:
                self._by_item.setdefault(id(ref.expr), ref.region)
        self._stack: list[list[Optional[Region]]] = [[]]
        self._wanted: Optional[set[int]] = None

    def walk(self, wanted: Iterable[CallSite]) -> None:
        """Visit the module, entering only the functions that hold one of ``wanted`` (and their
        enclosing functions, and functions decorated with autocast): a full libcst visit of a
        large file costs seconds, and most functions have nothing to do with autocast."""
        frames: set[int] = set()
        for site in wanted:
            frame: Optional[Frame] = site.frame
            while frame is not None:
                frames.add(id(frame.node))
                frame = frame.parent
        for function, frame in self.facts.functions:
            if id(function) in frames:
                continue
            if any(isinstance(d.decorator, cst.Call) and autocast_region(d.decorator, self.facts.imports) for d in function.decorators):
                while frame is not None:
                    frames.add(id(frame.node))
                    frame = frame.parent
        self._wanted = frames
        self.facts.module.visit(self)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> Optional[bool]:
        return self._wanted is None or id(node) in self._wanted

    @property
    def region(self) -> Optional[Region]:
        for region in reversed(self._stack[-1]):
            if region is not None:
                return region
        return None

    def _region_of(self, expr: cst.BaseExpression) -> Optional[Region]:
        if id(expr) in self._by_item:
            return self._by_item[id(expr)]
        if isinstance(expr, cst.Call):
            return autocast_region(expr, self.facts.imports)
        name = dotted(expr)
        return self.facts.context_objects.get(name) if name else None

    # Frames: a function body starts with only its own decorators as regions.
    def visit_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        self._stack.append([self._region_of(d.decorator) for d in node.decorators])
        self.enter_frame(node)

    def leave_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        self.leave_frame(node)
        self._stack.pop()

    def visit_With_body(self, node: cst.With) -> None:
        self._stack[-1].extend(self._region_of(item.item) for item in node.items)

    def leave_With_body(self, node: cst.With) -> None:
        del self._stack[-1][-len(node.items):]

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def leave_BinaryOperation(self, original_node: cst.BinaryOperation) -> None:
        self.binary(original_node)

    def leave_Call(self, original_node: cst.Call) -> None:
        self.call(original_node)

    def leave_Assign(self, original_node: cst.Assign) -> None:
        for target in original_node.targets:
            name = dotted(target.target)
            if name is not None:
                self.assigned(name, original_node.value)
            else:
                self._forget_targets(target.target)

    def leave_AugAssign(self, original_node: cst.AugAssign) -> None:
        name = dotted(original_node.target)
        if name is not None:
            self.assigned(name, None)

    def leave_AnnAssign(self, original_node: cst.AnnAssign) -> None:
        name = dotted(original_node.target)
        if name is not None:
            self.assigned(name, original_node.value)

    def _forget_targets(self, target: cst.BaseExpression) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                name = dotted(element.value)
                if name is not None:
                    self.assigned(name, None)

    # Hooks
    def enter_frame(self, node: cst.FunctionDef) -> None: ...

    def leave_frame(self, node: cst.FunctionDef) -> None: ...

    def binary(self, node: cst.BinaryOperation) -> None: ...

    def call(self, node: cst.Call) -> None: ...

    def assigned(self, name: str, value: Optional[cst.BaseExpression]) -> None: ...


def lowers(region: Optional[Region]) -> bool:
    """The region is (or may be) on and runs lowered ops below float32."""
    if region is None or not region.enabled.counts_as_on:
        return False
    return region.effective_dtype in (None, *_LOW_PRECISION)


# --------------------------------------------------------------------------------------
# AMP104
# --------------------------------------------------------------------------------------


class _UpcastWalker(RegionWalker):
    def __init__(self, facts: AmpFacts) -> None:
        super().__init__(facts)
        self.layers = layer_instances(facts)
        self.upcast: list[dict[str, Region]] = [{}]  # per frame: name → region it was made float32 in
        self.found: list[tuple[cst.BaseExpression, str, Region]] = []

    def enter_frame(self, node: cst.FunctionDef) -> None:
        self.upcast.append({})

    def leave_frame(self, node: cst.FunctionDef) -> None:
        self.upcast.pop()

    def _is_float32(self, expr: cst.BaseExpression, region: Region) -> bool:
        expr = strip_views(expr)
        if _cast_target(expr, self.facts) == "float32":
            return True
        name = dotted(expr)
        return name is not None and self.upcast[-1].get(name) is region

    def _check(self, label: str, operands: Iterable[cst.BaseExpression]) -> None:
        region = self.region
        if not lowers(region):
            return
        assert region is not None
        for operand in operands:
            if self._is_float32(operand, region):
                self.found.append((operand, label, region))

    def binary(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.MatrixMultiply):
            self._check("@", (node.left, node.right))

    def call(self, node: cst.Call) -> None:
        op = lowered_op(node, self.facts, self.layers)
        if op is not None:
            self._check(*op)

    def assigned(self, name: str, value: Optional[cst.BaseExpression]) -> None:
        region = self.region
        if value is not None and lowers(region) and _cast_target(strip_views(value), self.facts) == "float32":
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
        losses = {
            a.target for a in facts.assignments if isinstance(a.value, cst.Call) and facts.qualify(a.value.func) in _BCE_MODULES
        }
        for site in facts.calls:
            region = site.region
            if region is None or not region.enabled.counts_as_on or region.device == "cpu":
                continue  # CPU autocast runs binary_cross_entropy in float32
            func = site.node.func
            if site.qname in _BCE_FUNCTIONS:
                what = "binary_cross_entropy"
            elif dotted(func) in losses or (isinstance(func, cst.Call) and facts.qualify(func.func) in _BCE_MODULES):
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


# --------------------------------------------------------------------------------------
# AMP106
# --------------------------------------------------------------------------------------

_DEVICE_LESS = {"torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast"}


def _device_of(site_node: cst.Call, qname: str) -> tuple[bool, Optional[str]]:
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
        missing, devices = [], []
        for site in facts.calls:
            if site.qname not in AUTOCAST_NAMES:
                continue
            if any(a.star for a in site.node.args):
                devices.append(None)  # ``autocast(*args)``: the device may well be there
                continue
            given, device = _device_of(site.node, site.qname)
            if given:
                devices.append(device)
            elif site.qname in _DEVICE_LESS:
                missing.append(site)
        fixable = bool(devices) and all(d == "cuda" for d in devices)
        for site in missing:
            yield Report(
                self.code,
                site.node,
                "`autocast()` without a device type raises TypeError: `device_type` is a required argument "
                "of `torch.autocast`",
                help='Pass the device first, e.g. `torch.autocast("cuda", dtype=torch.float16)`',
                fix=self._fix(site.node) if fixable else None,
                statement=site.statement,
            )

    def _fix(self, call: cst.Call) -> FixPlan:
        description = 'Add device type "cuda" (every other autocast in this file uses it)'
        if call.args:
            return FixPlan(description, (NodeEdit("insert_before", call.args[0], '"cuda", '),))
        return FixPlan(description, (NodeEdit("replace", call, f'{_code(call.func)}("cuda")'),))


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


# --------------------------------------------------------------------------------------
# AMP107
# --------------------------------------------------------------------------------------

_FUNCTION_BASES = {"torch.autograd.Function", "torch.autograd.function.Function"}
_CUSTOM_BWD_NAMES = {"torch.amp.custom_bwd", "torch.cuda.amp.custom_bwd", "torch.amp.autocast_mode.custom_bwd"}


def _decorated_with(function: cst.FunctionDef, names: set[str], facts: AmpFacts) -> bool:
    for decorator in function.decorators:
        expr = decorator.decorator
        target = expr.func if isinstance(expr, cst.Call) else expr
        qname = facts.qualify(target)
        if qname in names:
            return True
        if isinstance(expr, cst.Call) and autocast_region(expr, facts.imports) is not None:
            return True  # the method pins its own autocast state
    return False


# Calls in a forward that autocast leaves alone: bookkeeping, views and copies.
_NEUTRAL_METHODS = _VIEW_METHODS | {"clone", "detach", "save_for_backward", "mark_dirty", "mark_non_differentiable",
                                    "set_materialize_grads", "size", "dim", "numel", "requires_grad_", "new_empty",
                                    "new_zeros", "empty_like", "zeros_like", "ones_like", "item", "tolist"}
_NEUTRAL_NAMES = {"len", "isinstance", "tuple", "list", "super", "getattr", "setattr", "hasattr", "range", "print"}


def _computes(function: cst.FunctionDef, frame: Frame, facts: AmpFacts) -> bool:
    """Whether ``forward`` runs any op autocast could cast (a ``@`` or a non-bookkeeping call)."""
    for site in frame.calls:
        if site.method in _NEUTRAL_METHODS or dotted(site.node.func) in _NEUTRAL_NAMES:
            continue
        return True
    return "@" in facts.module.code_for_node(function.body).replace("@staticmethod", "")


def _opens_autocast(frame: Frame, facts: AmpFacts) -> bool:
    return any(site.qname in AUTOCAST_NAMES for site in frame.calls)


@register
class CustomFunctionWithoutCustomFwd(LintRule):
    code = "AMP107"
    tokens = ("autocast",)  # only modules that use autocast
    needs = (rb"Function",)
    anchors = AUTOCAST

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if not any(r.enabled.counts_as_on and r.kind != "custom_fwd" for r in facts.regions):
            return
        for cls, bases in facts.classes:
            if not any(b in _FUNCTION_BASES for b in bases):
                continue
            methods = {
                s.name.value: s
                for s in (cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ())
                if isinstance(s, cst.FunctionDef)
            }
            forward, backward = methods.get("forward"), methods.get("backward")
            if forward is None or backward is None:
                continue
            frames = {id(node): frame for node, frame in facts.functions}
            forward_frame, backward_frame = frames.get(id(forward)), frames.get(id(backward))
            if forward_frame is None or backward_frame is None or not _computes(forward, forward_frame, facts):
                continue  # ``return x.view_as(x)``: autocast has nothing to cast in forward
            if _opens_autocast(forward_frame, facts) or _opens_autocast(backward_frame, facts):
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
                cls.name,
                f"autograd Function `{cls.name.value}` in a module that uses autocast: {' and '.join(missing)}; "
                "its backward will not run under the autocast state its forward saw",
                help='Decorate `forward` with `@torch.amp.custom_fwd(device_type="cuda")` and `backward` with '
                '`@torch.amp.custom_bwd(device_type="cuda")`',
                statement=cls,
            )
