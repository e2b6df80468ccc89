"""AMP104–AMP107: what autocast does to the code inside its regions.

Two of these rules ask about values that are not calls (``q.float() @ k``, ``y = fc(x)``), so
this module has a small walker that follows one module's ``with`` blocks and knows, for any
expression, the innermost autocast region around it. It runs only when a rule's cheap
preconditions over AmpFacts hold. The numerics rules use it too.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

from ..facts import (
    AUTOCAST_NAMES,
    CUSTOM_FWD_NAMES,
    DTYPES,
    FUNCTION_TYPES,
    AmpFacts,
    CallSite,
    Frame,
    Region,
    autocast_region,
    call_args,
    children,
    dotted,
    get_arg,
    iter_nodes,
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


def strip_views(expr: ast.expr) -> ast.expr:
    """``x.float().t()`` → ``x.float()``: shape-only operations do not change the dtype."""
    while True:
        if isinstance(expr, ast.Attribute) and expr.attr in _VIEW_ATTRIBUTES:
            expr = expr.value
        elif (
            isinstance(expr, ast.Call)
            and isinstance(expr.func, ast.Attribute)
            and expr.func.attr in _VIEW_METHODS
            and not any(string_value(a.value) or DTYPES.get(dotted(a.value) or "") for a in call_args(expr))
        ):
            expr = expr.func.value
        else:
            return expr


def _cast_target(expr: ast.expr, facts: AmpFacts) -> str | None:
    """The dtype of an explicit cast ``.float()``/``.half()``/``.to(dtype)``/``.type(dtype)``, else None."""
    if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)):
        return None
    method = expr.func.attr
    simple = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64"}
    if method in simple:
        return simple[method] if not (expr.args or expr.keywords) else None
    if method in ("to", "type"):
        for arg in call_args(expr):
            if arg.star or (arg.keyword is not None and arg.keyword != "dtype"):
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
        if isinstance(value, ast.Call) and facts.qualify(value.func) in _LOWERED_LAYERS:
            found.add(assignment.target)
    return found


def lowered_op(call: ast.Call, facts: AmpFacts, layers: set[str]) -> tuple[str, list[ast.expr]] | None:
    """(op label, tensor operands) when autocast runs ``call`` in the lower precision."""
    qname = facts.qualify(call.func)
    operands = [a.value for a in call_args(call) if not a.star]
    if qname in _LOWERED_FUNCTIONS:
        return qname, operands
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in _LOWERED_METHODS and qname is None:
        return f".{func.attr}()", [func.value, *operands]
    name = dotted(func)
    if name is not None and name in layers:
        return f"{name}(...)", operands
    return None


# --------------------------------------------------------------------------------------
# The walker: the autocast region around any node, and simple per-frame value tracking
# --------------------------------------------------------------------------------------


class RegionWalker:
    """Visits a module knowing the innermost autocast region at every node.

    Subclasses override ``binary`` / ``call`` / ``assigned`` (called once a node's children
    have been visited) and ``enter_frame`` / ``leave_frame``. ``self.region`` is the innermost
    region (on, off or maybe) around the node being visited, or None.

    The walk keeps its context on explicit stacks instead of recursing, so deeply nested
    expressions (long string concatenations) cannot exhaust the interpreter's stack. The
    work list holds nodes to visit and ``(hook, node)`` pairs to run once everything pushed
    before them has been visited.
    """

    def __init__(self, facts: AmpFacts) -> None:
        self.facts = facts
        self._by_item: dict[int, Region | None] = {}
        for site in facts.calls:
            for ref in site.withs:
                self._by_item.setdefault(id(ref.expr), ref.region)
        # Per frame, the regions of the enclosing ``with`` items and decorators (None: not autocast).
        self._stack: list[list[Region | None]] = [[]]
        self._wanted: set[int] | None = None
        self._work: list = []

    def walk(self, wanted: Iterable[CallSite]) -> None:
        """Visit the module, entering only the functions that hold one of ``wanted`` (and their
        enclosing functions, and functions decorated with autocast): most functions of a large
        file have nothing to do with autocast."""
        frames: set[int] = set()
        for site in wanted:
            _add_frames(frames, site.frame)
        for function, frame in self.facts.functions:
            if id(function) not in frames and any(
                isinstance(d, ast.Call) and autocast_region(d, self.facts.imports) for d in function.decorator_list
            ):
                _add_frames(frames, frame)
        self._wanted = frames
        self._run(self.facts.module)

    def _run(self, root: ast.AST) -> None:
        work = self._work
        work.append(root)
        while work:
            item = work.pop()
            if isinstance(item, ast.AST):
                self._visit(item)
            else:
                hook, node = item
                hook(node)

    def _schedule(self, items: list) -> None:
        """Visit ``items`` (nodes and hook pairs) next, in the given order."""
        self._work.extend(reversed(items))

    def _visit(self, node: ast.AST) -> None:
        kind = type(node)
        if kind in FUNCTION_TYPES:
            self._function(node)
        elif kind is ast.With or kind is ast.AsyncWith:
            self._with(node)
        elif kind is ast.Lambda:
            pass  # a lambda's body runs later, under whatever region its caller has
        elif kind is ast.BinOp:
            self._schedule([*children(node), (self.binary, node)])
        elif kind is ast.Call:
            self._schedule([*children(node), (self.call, node)])
        elif kind is ast.Assign or kind is ast.AugAssign or kind is ast.AnnAssign:
            self._schedule([*children(node), (self._assignment, node)])
        else:
            self._schedule(children(node))

    @property
    def region(self) -> Region | None:
        for region in reversed(self._stack[-1]):
            if region is not None:
                return region
        return None

    def _region_of(self, expr: ast.expr) -> Region | None:
        if id(expr) in self._by_item:
            return self._by_item[id(expr)]
        if isinstance(expr, ast.Call):
            return autocast_region(expr, self.facts.imports)
        name = dotted(expr)
        return self.facts.context_objects.get(name) if name else None

    # Frames: a function body starts with only its own decorators as regions; decorators,
    # defaults and annotations belong to the enclosing frame.
    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if self._wanted is not None and id(node) not in self._wanted:
            return
        head = [*node.decorator_list, node.args, *([node.returns] if node.returns is not None else [])]
        self._schedule([*head, (self._enter_function, node), *node.body, (self._leave_function, node)])

    def _enter_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._stack.append([self._region_of(d) for d in node.decorator_list])
        self.enter_frame(node)

    def _leave_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.leave_frame(node)
        self._stack.pop()

    def _with(self, node: ast.With | ast.AsyncWith) -> None:
        self._schedule([*node.items, (self._enter_with, node), *node.body, (self._leave_with, node)])

    def _enter_with(self, node: ast.With | ast.AsyncWith) -> None:
        self._stack[-1].extend(self._region_of(item.context_expr) for item in node.items)

    def _leave_with(self, node: ast.With | ast.AsyncWith) -> None:
        del self._stack[-1][-len(node.items):]

    def _assignment(self, node: ast.Assign | ast.AugAssign | ast.AnnAssign) -> None:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                name = dotted(target)
                if name is not None:
                    self.assigned(name, node.value)
                else:
                    self._forget_targets(target)
            return
        name = dotted(node.target)
        if name is not None:
            # ``x += y`` makes a new value the walker does not follow.
            self.assigned(name, node.value if isinstance(node, ast.AnnAssign) else None)

    def _forget_targets(self, target: ast.expr) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                name = dotted(element.value if isinstance(element, ast.Starred) else element)
                if name is not None:
                    self.assigned(name, None)

    # Hooks
    def enter_frame(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None: ...

    def leave_frame(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None: ...

    def binary(self, node: ast.BinOp) -> None: ...

    def call(self, node: ast.Call) -> None: ...

    def assigned(self, name: str, value: ast.expr | None) -> None: ...


def _add_frames(frames: set[int], frame: Frame | None) -> None:
    """Add a frame's function and every function enclosing it."""
    while frame is not None:
        frames.add(id(frame.node))
        frame = frame.parent


def lowers(region: Region | None) -> bool:
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
        self.found: list[tuple[ast.expr, str, Region]] = []

    def enter_frame(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.upcast.append({})

    def leave_frame(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.upcast.pop()

    def _is_float32(self, expr: ast.expr, region: Region) -> bool:
        expr = strip_views(expr)
        if _cast_target(expr, self.facts) == "float32":
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
            a.target for a in facts.assignments if isinstance(a.value, ast.Call) and facts.qualify(a.value.func) in _BCE_MODULES
        }
        for site in facts.calls:
            region = site.region
            if region is None or not region.enabled.counts_as_on or region.device == "cpu":
                continue  # CPU autocast runs binary_cross_entropy in float32
            func = site.node.func
            if site.qname in _BCE_FUNCTIONS:
                what = "binary_cross_entropy"
            elif dotted(func) in losses or (isinstance(func, ast.Call) and facts.qualify(func.func) in _BCE_MODULES):
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
        missing, devices = [], []
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
        fixable = bool(devices) and all(d == "cuda" for d in devices)
        for site in missing:
            yield Report(
                self.code,
                site.node,
                "`autocast()` without a device type raises TypeError: `device_type` is a required argument "
                "of `torch.autocast`",
                help='Pass the device first, e.g. `torch.autocast("cuda", dtype=torch.float16)`',
                fix=self._fix(site.node, facts) if fixable else None,
                statement=site.statement,
            )

    def _fix(self, call: ast.Call, facts: AmpFacts) -> FixPlan:
        description = 'Add device type "cuda" (every other autocast in this file uses it)'
        # The device is missing, so there is no positional argument: the first one is a keyword,
        # whose position starts at its name (never inside parentheses).
        first = call.args[0] if call.args else call.keywords[0] if call.keywords else None
        if first is not None:
            return FixPlan(description, (NodeEdit("insert_before", first, '"cuda", '),))
        return FixPlan(description, (NodeEdit("replace", call, f'{facts.text(call.func)}("cuda")'),))


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
_NEUTRAL_METHODS = _VIEW_METHODS | {"clone", "detach", "save_for_backward", "mark_dirty", "mark_non_differentiable",
                                    "set_materialize_grads", "size", "dim", "numel", "requires_grad_", "new_empty",
                                    "new_zeros", "empty_like", "zeros_like", "ones_like", "item", "tolist"}
_NEUTRAL_NAMES = {"len", "isinstance", "tuple", "list", "super", "getattr", "setattr", "hasattr", "range", "print"}


def _computes(function: ast.FunctionDef | ast.AsyncFunctionDef, frame: Frame) -> bool:
    """Whether ``forward`` runs any op autocast could cast (a ``@`` or a non-bookkeeping call)."""
    for site in frame.calls:
        if site.method in _NEUTRAL_METHODS or dotted(site.node.func) in _NEUTRAL_NAMES:
            continue
        return True
    return any(
        isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.MatMult)
        for statement in function.body
        for node in iter_nodes(statement)
    )


def _opens_autocast(frame: Frame) -> bool:
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
        frames = {id(node): frame for node, frame in facts.functions}
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
            if _opens_autocast(forward_frame) or _opens_autocast(backward_frame):
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


def _class_name(cls: ast.ClassDef, facts: AmpFacts) -> ast.AST:
    """A Name node over the class's name, where the finding points: ast keeps the name as a
    plain string, and the ClassDef itself spans the whole class body."""
    head = _CLASS_HEAD.match(facts.text(cls))
    if head is None:
        return cls  # ``class \`` continued on the next line: point at the statement
    start = cls.col_offset + head.end()  # ``class`` and blanks are ASCII: bytes = characters
    end = start + len(cls.name.encode("utf-8"))
    return ast.Name(cls.name, ast.Load(), lineno=cls.lineno, col_offset=start, end_lineno=cls.lineno, end_col_offset=end)


_CLASS_HEAD = re.compile(r"class[ \t\f]+")
