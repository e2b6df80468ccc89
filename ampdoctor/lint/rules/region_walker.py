"""The autocast region around any expression, for rules that ask about values that are not
calls (``q.float() @ k``, ``y = fc(x)``): a small walker that follows one module's ``with``
blocks and knows, for any expression, the innermost autocast region around it, with simple
per-frame value tracking; and the ops that autocast runs in the lower precision. It runs only
when a rule's cheap preconditions over AmpFacts hold. AMP104, AMP105 and AMP301–AMP302 use it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence

from ..model import AmpFacts, CallSite, Frame, Region, autocast_region
from ..syntax import call_args, children, dotted, string_value
from ..vocabulary import DTYPES

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    # What the walk does next: visit a node, or call a hook with its node.
    _Work = ast.AST | tuple[Callable[[Any], None], ast.AST]

# --------------------------------------------------------------------------------------
# Ops that autocast runs in the lower precision (float16 / bfloat16) on every device
# --------------------------------------------------------------------------------------

_LOWERED_FUNCTIONS = {
    f"torch.{name}"
    for name in (
        "matmul",
        "mm",
        "bmm",
        "baddbmm",
        "addmm",
        "addbmm",
        "addmv",
        "mv",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "chain_matmul",
    )
} | {
    f"torch.nn.functional.{name}"
    for name in ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
}
_LOWERED_METHODS = {"matmul", "mm", "bmm", "baddbmm", "addmm", "addbmm", "addmv", "mv"}
_LOWERED_LAYERS = {
    f"torch.nn.{name}"
    for name in ("Linear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d")
} | {
    "torch.nn.modules.linear.Linear",
    "torch.nn.modules.conv.Conv1d",
    "torch.nn.modules.conv.Conv2d",
    "torch.nn.modules.conv.Conv3d",
}
# Methods and attributes that change a tensor's shape or layout but keep its dtype.
VIEW_METHODS = {
    "t",
    "transpose",
    "permute",
    "view",
    "reshape",
    "contiguous",
    "unsqueeze",
    "squeeze",
    "flatten",
    "expand",
    "view_as",
    "reshape_as",
    "swapaxes",
    "movedim",
}
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
            and expr.func.attr in VIEW_METHODS
            and not any(string_value(a.value) or DTYPES.get(dotted(a.value) or "") for a in call_args(expr))
        ):
            expr = expr.func.value
        else:
            return expr


def cast_target(expr: ast.expr, facts: AmpFacts) -> str | None:
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
            dtype = DTYPES.get(name) or {
                "torch.FloatTensor": "float32",
                "torch.cuda.FloatTensor": "float32",
                "torch.HalfTensor": "float16",
                "torch.cuda.HalfTensor": "float16",
            }.get(name)
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
        self._work: list[_Work] = []

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

    def _schedule(self, items: Sequence[_Work]) -> None:
        """Visit ``items`` (nodes and hook pairs) next, in the given order."""
        self._work.extend(reversed(items))

    def _visit(self, node: ast.AST) -> None:
        kind = type(node)
        if type(node) is ast.FunctionDef or type(node) is ast.AsyncFunctionDef:
            self._function(node)
        elif type(node) is ast.With or type(node) is ast.AsyncWith:
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
        del self._stack[-1][-len(node.items) :]

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
