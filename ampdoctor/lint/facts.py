"""AmpFacts: the mixed-precision semantic model of one module, built in one walk of its ``ast``.

Rules never walk the tree. They query what this module records:

* ``imports``: local names bound by imports (and simple module-level aliases), mapped to the
  dotted torch (or other library) path they stand for, so ``ac`` in
  ``from torch.cuda.amp import autocast as ac`` resolves to ``torch.cuda.amp.autocast``;
* ``calls``: every call, with its resolved qualified name (for plain functions), its receiver
  and method name (for method calls), the function frame, the loop/branch path inside that
  frame, the ``with`` items and decorators that enclose it, and its source order;
* ``regions``: autocast regions (device, dtype, enabled on/off/maybe), including context
  objects bound to a name and entered later (``ctx = torch.autocast(...)``; ``with ctx:``)
  and autocast decorators;
* ``scalers`` / ``optimizers``: receiver keys (``scaler``, ``self.scaler``) known to hold a
  GradScaler or an optimizer, by construction and by use;
* per frame (each function and the module body), the ordered training-step ``events``.

The tree is the interpreter's own (``ast``): it parses an order of magnitude faster than a
concrete syntax tree, carries positions, and needs no import of its own. Comments and
formatting live in the source text, which ``text()`` slices for messages and fixes.

Receivers are compared by their dotted spelling (``self.scaler``), which is what a reader
compares too. Anything the model cannot name precisely (subscripts, call results) is left
out, so rules stay silent rather than guess.
"""

from __future__ import annotations

import ast
import enum
import re
from collections import namedtuple
from collections.abc import Iterator, Sequence

# float16's largest finite value and its smallest subnormal (what is nonzero below it is lost).
from ..float16 import FLOAT16_MAX, FLOAT16_SMALLEST_SUBNORMAL as FLOAT16_SMALLEST  # noqa: F401
from ..records import Record, Value
from .fixes import SourceLines
from .held import constant_device, delegated_backward, held_region, module_strings
from .held import factories as held_factories

# --------------------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------------------

AUTOCAST_NAMES = {
    "torch.autocast": None,
    "torch.amp.autocast": None,
    "torch.amp.autocast_mode.autocast": None,
    "torch.cuda.amp.autocast": "cuda",
    "torch.cuda.amp.autocast_mode.autocast": "cuda",
    "torch.cpu.amp.autocast": "cpu",
    "torch.cpu.amp.autocast_mode.autocast": "cpu",
}
GRAD_SCALER_NAMES = {
    "torch.amp.GradScaler": None,
    "torch.amp.grad_scaler.GradScaler": None,
    "torch.cuda.amp.GradScaler": "cuda",
    "torch.cuda.amp.grad_scaler.GradScaler": "cuda",
    "torch.cpu.amp.GradScaler": "cpu",
    "torch.cpu.amp.grad_scaler.GradScaler": "cpu",
    "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler": None,
    "torch.distributed.fsdp.ShardedGradScaler": None,
}
CUSTOM_FWD_NAMES = {
    "torch.amp.custom_fwd",
    "torch.cuda.amp.custom_fwd",
    "torch.amp.autocast_mode.custom_fwd",
}
CLIP_NAMES = {
    "torch.nn.utils.clip_grad_norm_": "norm",
    "torch.nn.utils.clip_grad.clip_grad_norm_": "norm",
    "torch.nn.utils.clip_grad_norm": "norm",
    "torch.nn.utils.clip_grad_value_": "value",
    "torch.nn.utils.clip_grad.clip_grad_value_": "value",
}
AUTOGRAD_BACKWARD = {"torch.autograd.backward"}
DTYPES = {
    "torch.float16": "float16",
    "torch.half": "float16",
    "torch.bfloat16": "bfloat16",
    "torch.float32": "float32",
    "torch.float": "float32",
    "torch.float64": "float64",
    "torch.double": "float64",
}
# What a tensor is converted to float16 with: ``.to(X)``, ``.type(X)``, ``dtype=X``.
FLOAT16_CASTS = ("torch.float16", "torch.half", "torch.HalfTensor", "torch.cuda.HalfTensor")
HALF_TENSOR_TYPES = {
    "torch.HalfTensor": "float16",
    "torch.cuda.HalfTensor": "float16",
    "torch.BFloat16Tensor": "bfloat16",
    "torch.cuda.BFloat16Tensor": "bfloat16",
}
# Optimizer classes by their last name, whatever package they come from (torch.optim,
# apex.optimizers, bitsandbytes, timm.optim, transformers ...).
_OPTIMIZER_CLASS = frozenset({
    "Adam", "AdamW", "SGD", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "ASGD", "Rprop", "LBFGS",
    "SparseAdam", "Adafactor", "Lamb", "LAMB", "Lion", "Adan", "FusedAdam", "FusedLAMB", "FusedSGD", "LARS", "Shampoo",
    "Muon", "Sophia", "AdamW8bit", "Adam8bit", "PagedAdamW", "PagedAdamW8bit", "Lion8bit", "AdaBelief", "Novograd",
    "ZeroRedundancyOptimizer",
})
_OPTIMIZER_NAME = re.compile(r"(^|_)(opt|optim|optimizer|optimiser|optimizers)(_\w+)?$|^(g|d|gen|disc)_?opt\w*$")


class Enabled(str, enum.Enum):
    ON = "on"
    OFF = "off"
    MAYBE = "maybe"

    @property
    def counts_as_on(self) -> bool:
        return self is not Enabled.OFF


class EventKind(str, enum.Enum):
    BACKWARD = "backward"
    SCALED_BACKWARD = "scaled_backward"
    # ``optimizer.backward(loss)``, ``model_engine.backward(loss)``: a framework scales the loss.
    DELEGATED_BACKWARD = "delegated_backward"
    UNSCALE = "unscale"
    CLIP = "clip"
    SCALER_STEP = "scaler_step"
    OPTIMIZER_STEP = "optimizer_step"
    UPDATE = "update"
    ZERO_GRAD = "zero_grad"
    SCALER_NEW = "scaler_new"


# --------------------------------------------------------------------------------------
# Small expression helpers
# --------------------------------------------------------------------------------------

FUNCTION_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef)


def dotted(expr: ast.AST | None) -> str | None:
    """``a.b.c`` for Name/Attribute chains, else None."""
    parts = []
    while type(expr) is ast.Attribute:
        parts.append(expr.attr)
        expr = expr.value
    if type(expr) is ast.Name:
        parts.append(expr.id)
        return ".".join(reversed(parts))
    return None


def string_value(expr: ast.AST | None) -> str | None:
    if type(expr) is ast.Constant and type(expr.value) is str:
        return expr.value
    return None


def is_float_literal(expr: ast.AST | None) -> bool:
    return type(expr) is ast.Constant and type(expr.value) is float


def number_value(expr: ast.AST | None) -> float | None:
    """The value of a numeric literal, with unary minus/plus and ``2**-24``-style powers."""
    kind = type(expr)
    if kind is ast.Constant:
        if type(expr.value) in (int, float):
            try:
                return float(expr.value)
            except OverflowError:
                return None
        return None
    if kind is ast.UnaryOp and type(expr.op) in (ast.USub, ast.UAdd):
        inner = number_value(expr.operand)
        if inner is None:
            return None
        return -inner if type(expr.op) is ast.USub else inner
    if kind is ast.BinOp and type(expr.op) is ast.Pow:
        base, exp = number_value(expr.left), number_value(expr.right)
        if base is None or exp is None or abs(exp) > 1024:
            return None
        try:
            value = base**exp
        except (OverflowError, ZeroDivisionError, ValueError):
            return None
        return float(value) if not isinstance(value, complex) else None
    return None


class Arg(namedtuple("Arg", "value keyword star", defaults=(None, ""))):
    """One argument of a call, in the shape rules ask about.

    ``value``: the argument (``ast.expr``); ``keyword``: its keyword, or None; ``star``: "",
    "*" or "**".
    """

    __slots__ = ()


def call_args(call: ast.Call) -> list[Arg]:
    """Positional arguments in order (``*x`` with star "*"), then keywords (``**x``: star "**")."""
    args = [Arg(a.value, None, "*") if type(a) is ast.Starred else Arg(a) for a in call.args]
    args.extend(Arg(k.value, k.arg, "" if k.arg is not None else "**") for k in call.keywords)
    return args


def get_arg(call: ast.Call, position: int | None, keyword: str | None) -> Arg | None:
    """The argument passed at ``position`` (counting plain positional args) or by ``keyword``."""
    if position is not None:
        for index, arg in enumerate(call.args):
            if type(arg) is ast.Starred:
                break  # positions after ``*args`` are unknown
            if index == position:
                return Arg(arg)
    if keyword is not None:
        for kw in call.keywords:
            if kw.arg == keyword:
                return Arg(kw.value, keyword)
    return None


# --------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------


class Block(Value):
    """One step of a path inside a frame: a loop, or one arm of a branch."""

    __slots__ = ("kind", "node", "ident")
    _uncompared = ("node",)

    def __init__(self, kind: str, node: ast.AST, ident: int = 0) -> None:
        # kind: "loop", "if", "else", "try", "except", "finally", "match"
        self._set(kind, node, ident)

    @property
    def is_loop(self) -> bool:
        return self.kind == "loop"


class Region(Record):
    """An autocast region: a ``with`` item, a decorator, or a ``custom_fwd(cast_inputs=...)``."""

    __slots__ = ("node", "device", "dtype", "dtype_given", "enabled", "kind", "flag")

    def __init__(
        self,
        node: ast.AST,
        device: str | None,
        dtype: str | None,
        dtype_given: bool,
        enabled: Enabled,
        kind: str = "with",
        flag: ast.expr | None = None,
    ) -> None:
        self.node = node  # the autocast call (or the name of the context object)
        self.device = device  # "cuda", "cpu", ... or None when not literal
        self.dtype = dtype  # "float16", "bfloat16", or None when not given/literal
        self.dtype_given = dtype_given
        self.enabled = enabled
        self.kind = kind  # "with", "decorator", "custom_fwd"
        # For a "maybe" region: the expression that turns it on (``enabled=use_amp``, the test of
        # ``autocast if amp else suppress``), or None when unknown.
        self.flag = flag

    @property
    def effective_dtype(self) -> str | None:
        """The dtype autocast uses: the given one, or the device's default."""
        if self.dtype_given:
            return self.dtype
        if self.device == "cuda":
            return "float16"
        if self.device == "cpu":
            return "bfloat16"
        return None

    @property
    def is_float16(self) -> bool:
        return self.enabled.counts_as_on and self.effective_dtype == "float16"


class WithRef(Record):
    """A ``with`` item or decorator around a call; resolved to a Region after the walk."""

    __slots__ = ("expr", "decorator", "region")

    def __init__(self, expr: ast.expr, decorator: bool = False, region: Region | None = None) -> None:
        self.expr = expr
        self.decorator = decorator
        self.region = region


class CallSite(Record):
    __slots__ = ("node", "qname", "receiver", "method", "frame", "path", "withs", "order", "statement")

    def __init__(
        self,
        node: ast.Call,
        qname: str | None,
        receiver: str | None,
        method: str | None,
        frame: Frame,
        path: tuple[Block, ...],
        withs: tuple[WithRef, ...],
        order: int,
        statement: ast.AST,
    ) -> None:
        self.node = node
        self.qname = qname  # resolved dotted name of the callee, when it is a known import
        self.receiver = receiver  # dotted spelling of ``x`` in ``x.method(...)``
        self.method = method
        self.frame = frame
        self.path = path
        self.withs = withs
        self.order = order
        self.statement = statement  # the innermost statement that holds the call

    @property
    def region(self) -> Region | None:
        """The innermost autocast region around the call (on, off or maybe), or None."""
        for ref in reversed(self.withs):
            if ref.region is not None:
                return ref.region
        return None

    @property
    def in_autocast(self) -> bool:
        region = self.region
        return region is not None and region.enabled.counts_as_on

    @property
    def loop(self) -> Block | None:
        for block in reversed(self.path):
            if block.is_loop:
                return block
        return None

    def arg(self, position: int | None = None, keyword: str | None = None) -> Arg | None:
        return get_arg(self.node, position, keyword)


class Event(Record):
    __slots__ = ("kind", "call", "scaler", "optimizer", "norm_only")

    def __init__(
        self,
        kind: EventKind,
        call: CallSite,
        scaler: str | None = None,
        optimizer: str | None = None,
        norm_only: bool = False,
    ) -> None:
        self.kind = kind
        self.call = call
        self.scaler = scaler
        self.optimizer = optimizer
        # For CLIP events: a max_norm of inf (pure norm computation) or the result divided by
        # the scale (logging a norm of scaled gradients correctly).
        self.norm_only = norm_only

    @property
    def order(self) -> int:
        return self.call.order

    @property
    def path(self) -> tuple[Block, ...]:
        return self.call.path


class Frame(Record):
    __slots__ = ("node", "name", "class_name", "parent", "calls", "events")

    def __init__(
        self,
        node: ast.AST,
        name: str,
        class_name: str | None,
        parent: Frame | None,
        calls: list[CallSite] | None = None,
        events: list[Event] | None = None,
    ) -> None:
        self.node = node  # FunctionDef, AsyncFunctionDef or Module
        self.name = name
        self.class_name = class_name
        self.parent = parent
        self.calls = [] if calls is None else calls
        self.events = [] if events is None else events

    def events_of(self, *kinds: EventKind) -> list[Event]:
        return [e for e in self.events if e.kind in kinds]


class Assignment(Record):
    __slots__ = ("target", "value", "frame", "order")

    def __init__(self, target: str, value: ast.expr, frame: Frame, order: int) -> None:
        self.target = target  # dotted spelling of the target
        self.value = value
        self.frame = frame
        self.order = order


class ImportRef(Record):
    """One name bound by an import statement."""

    __slots__ = ("node", "alias", "local", "qname", "module", "fallback")

    def __init__(
        self,
        node: ast.Import | ast.ImportFrom,
        alias: ast.alias,
        local: str,
        qname: str,
        module: str | None,
        fallback: bool = False,
    ) -> None:
        self.node = node
        self.alias = alias
        self.local = local  # the name bound in this module
        self.qname = qname  # what it stands for
        self.module = module  # ``from X import ...``: X; plain ``import``: None
        # Inside an ``except`` handler: a fallback for older library versions.
        self.fallback = fallback


class AmpFacts(Record):
    __slots__ = (
        "module",
        "source",
        "imports",
        "import_refs",
        "frames",
        "calls",
        "regions",
        "assignments",
        "references",
        "classes",
        "functions",
        "scalers",
        "scaler_devices",
        "optimizers",
        "context_objects",
        "scaled_vars",
        "item_assignments",
        "_lines",
        "_paths",
    )

    def __init__(
        self,
        module: ast.Module,
        source: str,
        imports: dict[str, str],
        import_refs: list[ImportRef],
        frames: list[Frame],
        calls: list[CallSite],
        regions: list[Region],
        assignments: list[Assignment],
        references: list[tuple[ast.AST, str]],
        classes: list[tuple[ast.ClassDef, tuple[str, ...]]],
        functions: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, Frame]],
        scalers: set[str] | None = None,
        scaler_devices: dict[str, str | None] | None = None,
        optimizers: set[str] | None = None,
        context_objects: dict[str, Region] | None = None,
        scaled_vars: dict[str, str] | None = None,
        item_assignments: list[tuple[str, ast.Assign, Frame]] | None = None,
        _lines: SourceLines | None = None,
        _paths: object = None,
    ) -> None:
        self.module = module
        self.source = source
        self.imports = imports
        self.import_refs = import_refs
        self.frames = frames
        self.calls = calls
        self.regions = regions
        self.assignments = assignments
        self.references = references  # every Name/Attribute chain that resolves
        self.classes = classes  # class and its resolved bases
        self.functions = functions
        self.scalers = set() if scalers is None else scalers
        self.scaler_devices = {} if scaler_devices is None else scaler_devices
        self.optimizers = set() if optimizers is None else optimizers
        self.context_objects = {} if context_objects is None else context_objects
        # ``scaled = scaler.scale(loss)``: the variable → the scaler that scaled it.
        self.scaled_vars = {} if scaled_vars is None else scaled_vars
        # ``ckpt["scaler"] = ...``: (mapping spelling, the assignment, its frame), in source order.
        self.item_assignments = [] if item_assignments is None else item_assignments
        self._lines = _lines
        self._paths = _paths  # paths.PathIndex, made on the first question about paths

    # ---- queries --------------------------------------------------------------------

    @property
    def lines(self) -> SourceLines:
        if self._lines is None:
            self._lines = SourceLines(self.source)
        return self._lines

    def paths(self, frame: Frame, node: ast.AST) -> list | None:
        """The paths of one pass through ``node`` (a loop, or ``frame``'s function): see paths.py.
        None when there are too many to follow."""
        if self._paths is None:
            from .paths import PathIndex

            self._paths = PathIndex()
        return self._paths.of(frame, node)

    def text(self, node: ast.AST) -> str:
        """The node's exact source text (without surrounding parentheses)."""
        return self.lines.segment(node)

    def qualify(self, expr: ast.AST | None) -> str | None:
        return qualify(expr, self.imports)

    def events(self, *kinds: EventKind) -> Iterator[Event]:
        for frame in self.frames:
            for event in frame.events:
                if not kinds or event.kind in kinds:
                    yield event

    def calls_to(self, *qnames: str) -> Iterator[CallSite]:
        wanted = set(qnames)
        return (c for c in self.calls if c.qname in wanted)

    @property
    def uses_autocast(self) -> bool:
        return bool(self.regions)

    @property
    def uses_float16(self) -> bool:
        return any(r.is_float16 for r in self.regions)


def qualify(expr: ast.AST | None, imports: dict[str, str]) -> str | None:
    name = dotted(expr)
    if name is None:
        return None
    head, _, rest = name.partition(".")
    base = imports.get(head)
    if base is None:
        return None
    return f"{base}.{rest}" if rest else base


# --------------------------------------------------------------------------------------
# The walk
# --------------------------------------------------------------------------------------


def _import_bindings(node: ast.Import | ast.ImportFrom) -> Iterator[tuple[ast.alias, str, str, str | None]]:
    """(alias node, local name, qualified name, from-module) for each name an import binds."""
    if type(node) is ast.Import:
        for alias in node.names:
            if alias.asname:
                yield alias, alias.asname, alias.name, None
            else:
                head = alias.name.split(".", 1)[0]
                yield alias, head, head, None
        return
    if node.level or not node.module:
        return
    for alias in node.names:
        if alias.name == "*":
            continue
        yield alias, alias.asname or alias.name, f"{node.module}.{alias.name}", node.module


# Fields that hold no code a rule looks at: expression contexts and operator singletons.
_SKIPPED_FIELDS = frozenset({"ctx", "op", "ops", "type_comment", "kind"})
_FIELDS: dict[type, tuple[str, ...]] = {}


def _child_fields(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = tuple(name for name in cls._fields if name not in _SKIPPED_FIELDS)
        if cls is ast.IfExp:
            names = ("body", "test", "orelse")  # source order
        _FIELDS[cls] = names
    return names


def children(node: ast.AST) -> list[ast.AST]:
    """The child nodes of ``node``, in source order."""
    if type(node) is ast.Dict:
        found: list[ast.AST] = []
        for key, value in zip(node.keys, node.values):
            if key is not None:
                found.append(key)
            found.append(value)
        return found
    found = []
    for name in _child_fields(type(node)):
        value = getattr(node, name, None)
        if isinstance(value, ast.AST):
            found.append(value)
        elif type(value) is list:
            found.extend(item for item in value if isinstance(item, ast.AST))
    return found


def iter_nodes(root: ast.AST, prune: tuple[type, ...] = ()) -> Iterator[ast.AST]:
    """Every node under ``root`` (included), in source order, without recursion.

    Nodes of the ``prune`` types are yielded but not entered.
    """
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        if not (prune and isinstance(node, prune)):
            stack.extend(reversed(children(node)))


class _FactWalk:
    """The one traversal that builds AmpFacts; context is kept on explicit stacks.

    The work list holds nodes to visit and zero-argument callables (markers) that close a
    context — leave a loop, a branch, a ``with`` body, a function — once all nodes pushed
    before them have been visited.
    """

    def __init__(self, imports: dict[str, str], import_refs: list[ImportRef]) -> None:
        self.imports = imports
        self.import_refs = import_refs
        self.frames: list[Frame] = []
        self.calls: list[CallSite] = []
        self.assignments: list[Assignment] = []
        self.references: list[tuple[ast.AST, str]] = []
        self.classes: list[tuple[ast.ClassDef, tuple[str, ...]]] = []
        self.functions: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, Frame]] = []
        self.item_assignments: list[tuple[str, ast.Assign, Frame]] = []
        self._frame_stack: list[Frame] = []
        self._path_stack: list[list[Block]] = []
        self._with_stack: list[list[WithRef]] = []
        self._statements: list[ast.AST] = []
        self._class_stack: list[str] = []
        self._order = 0
        self._blocks = 0
        self._seen_imports: set[int] = {id(ref.node) for ref in import_refs}
        self._work: list = []

    def run(self, module: ast.Module) -> None:
        self._push_frame(module, "<module>")
        work = self._work
        work.extend(reversed(module.body))
        visit = self._visit
        while work:
            item = work.pop()
            if isinstance(item, ast.AST):
                visit(item)
            else:
                item()

    # ---- scheduling ---------------------------------------------------------------------

    def _schedule(self, items: list) -> None:
        """Visit ``items`` (nodes and markers) next, in the given order."""
        self._work.extend(reversed(items))

    def _block(self, kind: str, owner: ast.AST, body: Sequence[ast.AST]) -> list:
        if not body:
            return []
        return [lambda: self._enter(kind, owner), *body, self._exit]

    def _visit(self, node: ast.AST) -> None:
        handler = _HANDLERS.get(type(node))
        if handler is not None:
            if handler(self, node):
                return
        # Names and constants record nothing here: not visiting them saves half the work.
        inner = [child for child in children(node) if type(child) not in _LEAVES]
        if isinstance(node, ast.stmt):
            self._statements.append(node)
            self._schedule([*inner, self._statements.pop])
            return
        self._work.extend(reversed(inner))

    # ---- frames -------------------------------------------------------------------------

    def _push_frame(self, node: ast.AST, name: str) -> Frame:
        parent = self._frame_stack[-1] if self._frame_stack else None
        frame = Frame(node, name, self._class_stack[-1] if self._class_stack else None, parent)
        self.frames.append(frame)
        self._frame_stack.append(frame)
        self._path_stack.append([])
        self._with_stack.append([])
        return frame

    def _pop_frame(self) -> None:
        self._frame_stack.pop()
        self._path_stack.pop()
        self._with_stack.pop()

    def _enter(self, kind: str, node: ast.AST) -> None:
        self._blocks += 1
        self._path_stack[-1].append(Block(kind, node, self._blocks))

    def _exit(self) -> None:
        self._path_stack[-1].pop()

    # ---- handlers: return True when they scheduled the children themselves -----------------

    def _decorators(self, decorators: list[ast.expr]) -> None:
        for expr in decorators:
            if type(expr) is not ast.Attribute:  # attribute chains are recorded as they are visited
                name = qualify(expr, self.imports)
                if name is not None:
                    self.references.append((expr, name))

    def _class_def(self, node: ast.ClassDef) -> bool:
        bases = tuple(q for q in (qualify(b, self.imports) or dotted(b) for b in node.bases) if q)
        self.classes.append((node, bases))
        self._decorators(node.decorator_list)
        self._class_stack.append(node.name)
        self._statements.append(node)

        def leave() -> None:
            self._class_stack.pop()
            self._statements.pop()

        self._schedule([*node.decorator_list, *node.bases, *node.keywords, *node.body, leave])
        return True

    def _function_def(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        self._statements.append(node)
        self._decorators(node.decorator_list)

        def enter_body() -> None:
            # Decorators and default values belong to the enclosing frame; the body is new.
            frame = self._push_frame(node, node.name)
            self.functions.append((node, frame))
            # A decorated function runs its body inside the decorator's region, if it is one.
            self._with_stack[-1].extend(WithRef(d, decorator=True) for d in node.decorator_list)

        head: list = [*node.decorator_list, node.args]
        if node.returns is not None:
            head.append(node.returns)
        self._schedule([*head, enter_body, *node.body, self._pop_frame, self._statements.pop])
        return True

    def _loop(self, node: ast.For | ast.AsyncFor | ast.While) -> bool:
        self._statements.append(node)
        head = [node.test] if type(node) is ast.While else [node.target, node.iter]
        self._schedule([*head, *self._block("loop", node, node.body), *node.orelse, self._statements.pop])
        return True

    def _if(self, node: ast.If) -> bool:
        self._statements.append(node)
        self._schedule(
            [node.test, *self._block("if", node, node.body), *self._block("else", node, node.orelse), self._statements.pop]
        )
        return True

    def _try(self, node: ast.AST) -> bool:
        self._statements.append(node)
        items = [*self._block("try", node, node.body)]
        for handler in node.handlers:
            items.extend(self._block("except", handler, [*([handler.type] if handler.type else []), *handler.body]))
        items.extend(node.orelse)
        items.extend(self._block("finally", node, node.finalbody))
        self._schedule([*items, self._statements.pop])
        return True

    def _match(self, node: ast.AST) -> bool:
        self._statements.append(node)
        items: list = [node.subject]
        for case in node.cases:
            body = [case.pattern, *([case.guard] if case.guard is not None else []), *case.body]
            items.extend(self._block("match", case, body))
        self._schedule([*items, self._statements.pop])
        return True

    def _with(self, node: ast.With | ast.AsyncWith) -> bool:
        self._statements.append(node)
        refs = [WithRef(item.context_expr) for item in node.items]

        def enter_body() -> None:
            self._with_stack[-1].extend(refs)

        def leave_body() -> None:
            del self._with_stack[-1][-len(refs):]

        heads = [part for item in node.items for part in (item.context_expr, item.optional_vars) if part is not None]
        self._schedule([*heads, enter_body, *node.body, leave_body, self._statements.pop])
        return True

    def _import(self, node: ast.Import | ast.ImportFrom) -> bool:
        if id(node) not in self._seen_imports:
            self._seen_imports.add(id(node))
            fallback = any(block.kind == "except" for block in self._path_stack[-1])
            for alias, local, qname, module in _import_bindings(node):
                self.imports.setdefault(local, qname)
                self.import_refs.append(ImportRef(node, alias, local, qname, module, fallback))
        return True

    def _assign(self, node: ast.Assign | ast.AnnAssign) -> bool:
        if type(node) is ast.Assign:
            for target in node.targets:
                self._record_assignment(target, node.value)
                if type(target) is ast.Subscript:
                    mapping = dotted(target.value)
                    if mapping is not None:
                        self.item_assignments.append((mapping, node, self._frame_stack[-1]))
        elif node.value is not None:
            self._record_assignment(node.target, node.value)
        return False

    def _record_assignment(self, target: ast.expr, value: ast.expr) -> None:
        name = dotted(target)
        if name is None:
            if type(target) in (ast.Tuple, ast.List) and type(value) in (ast.Tuple, ast.List):
                for t, v in zip(target.elts, value.elts):
                    self._record_assignment(t, v)
            return
        frame = self._frame_stack[-1]
        self._order += 1
        self.assignments.append(Assignment(name, value, frame, self._order))
        # ``autocast = torch.autocast`` at module level is an alias like an import.
        if frame.parent is None and "." not in name:
            target_q = qualify(value, self.imports)
            if target_q and name not in self.imports:
                self.imports[name] = target_q

    def _call(self, node: ast.Call) -> bool:
        frame = self._frame_stack[-1]
        self._order += 1
        func = node.func
        receiver = method = None
        if type(func) is ast.Attribute:
            method = func.attr
            receiver = dotted(func.value)
        site = CallSite(
            node=node,
            qname=qualify(func, self.imports),
            receiver=receiver,
            method=method,
            frame=frame,
            path=tuple(self._path_stack[-1]),
            withs=tuple(self._with_stack[-1]),
            order=self._order,
            statement=self._statements[-1] if self._statements else node,
        )
        frame.calls.append(site)
        self.calls.append(site)
        return False

    def _attribute(self, node: ast.Attribute) -> bool:
        name = qualify(node, self.imports)
        if name is None:
            return False
        # A resolved chain holds only names: nothing further inside it to record.
        self.references.append((node, name))
        return True


_LEAVES = (ast.Name, ast.Constant)
_HANDLERS = {
    ast.ClassDef: _FactWalk._class_def,
    ast.FunctionDef: _FactWalk._function_def,
    ast.AsyncFunctionDef: _FactWalk._function_def,
    ast.For: _FactWalk._loop,
    ast.AsyncFor: _FactWalk._loop,
    ast.While: _FactWalk._loop,
    ast.If: _FactWalk._if,
    ast.Try: _FactWalk._try,
    ast.With: _FactWalk._with,
    ast.AsyncWith: _FactWalk._with,
    ast.Import: _FactWalk._import,
    ast.ImportFrom: _FactWalk._import,
    ast.Assign: _FactWalk._assign,
    ast.AnnAssign: _FactWalk._assign,
    ast.Call: _FactWalk._call,
    ast.Attribute: _FactWalk._attribute,
}
if hasattr(ast, "TryStar"):
    _HANDLERS[ast.TryStar] = _FactWalk._try
if hasattr(ast, "Match"):
    _HANDLERS[ast.Match] = _FactWalk._match


def _prescan_imports(module: ast.Module) -> tuple[dict[str, str], list[ImportRef]]:
    """Module-level imports first (also inside top-level if/try), so order of use is irrelevant."""
    imports: dict[str, str] = {}
    refs: list[ImportRef] = []

    def scan(body: Sequence[ast.stmt], fallback: bool = False) -> None:
        for stmt in body:
            kind = type(stmt)
            if kind is ast.Import or kind is ast.ImportFrom:
                for alias, local, qname, mod in _import_bindings(stmt):
                    imports.setdefault(local, qname)
                    refs.append(ImportRef(stmt, alias, local, qname, mod, fallback))
            elif kind is ast.If:
                scan(stmt.body, fallback)
                scan(stmt.orelse, fallback)
            elif kind is ast.Try or kind is getattr(ast, "TryStar", None):
                scan(stmt.body, fallback)
                for handler in stmt.handlers:
                    scan(handler.body, True)

    scan(module.body)
    return imports, refs


def build_facts(module: ast.Module, source: str) -> AmpFacts:
    imports, refs = _prescan_imports(module)
    visitor = _FactWalk(imports, refs)
    visitor.run(module)
    facts = AmpFacts(
        module=module,
        source=source,
        imports=visitor.imports,
        import_refs=visitor.import_refs,
        frames=visitor.frames,
        calls=visitor.calls,
        regions=[],
        assignments=visitor.assignments,
        references=visitor.references,
        classes=visitor.classes,
        functions=visitor.functions,
        item_assignments=visitor.item_assignments,
    )
    _resolve_regions(facts)
    _find_scalers_and_optimizers(facts)
    _classify_events(facts)
    return facts


# --------------------------------------------------------------------------------------
# After the walk: regions, roles, events
# --------------------------------------------------------------------------------------


def autocast_region(call: ast.Call, imports: dict[str, str], kind: str = "with") -> Region | None:
    """The Region made by an autocast call, or None when ``call`` is not one."""
    qname = qualify(call.func, imports)
    if qname not in AUTOCAST_NAMES:
        return None
    fixed_device = AUTOCAST_NAMES[qname]
    if fixed_device is not None:
        device = fixed_device
        # torch.cuda.amp.autocast(enabled=True, dtype=torch.float16, cache_enabled=True)
        enabled_arg = get_arg(call, 0, "enabled")
        dtype_arg = get_arg(call, 1, "dtype")
    else:
        device_arg = get_arg(call, 0, "device_type")
        device = string_value(device_arg.value) if device_arg else None
        dtype_arg = get_arg(call, 1, "dtype")
        enabled_arg = get_arg(call, 2, "enabled")
    dtype = DTYPES.get(qualify(dtype_arg.value, imports) or "") if dtype_arg else None
    if dtype_arg is not None and dtype is None:
        dtype = _dtype_from_string(dtype_arg.value)
    enabled = Enabled.ON
    flag = None
    if enabled_arg is not None:
        value = enabled_arg.value
        if type(value) is ast.Constant and type(value.value) is bool:
            enabled = Enabled.ON if value.value else Enabled.OFF
        else:
            enabled, flag = Enabled.MAYBE, value
    return Region(call, device, dtype, dtype_arg is not None, enabled, kind, flag)


def _dtype_from_string(expr: ast.expr) -> str | None:
    text = string_value(expr)
    aliases = {"float16": "float16", "half": "float16", "fp16": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16"}
    return aliases.get(text or "")


def _region_of_expression(expr: ast.expr, facts: AmpFacts, held: dict | None = None) -> Region | None:
    """Autocast region for a ``with`` item: a call, a context object, ``a if c else b``, or a
    call of a name that holds an autocast factory (held.py)."""
    if type(expr) is ast.Call:
        region = autocast_region(expr, facts.imports)
        if region is not None:
            return region
        name = qualify(expr.func, facts.imports)
        if name in CUSTOM_FWD_NAMES and get_arg(expr, None, "cast_inputs") is not None:
            # custom_fwd(cast_inputs=...) runs forward with autocast disabled.
            return Region(expr, None, None, False, Enabled.OFF, "custom_fwd")
        return held_region(expr, facts, held) if held else None
    if type(expr) is ast.IfExp:
        # ``ctx = nullcontext() if cpu else torch.autocast(...)``: on in one arm only.
        arms = [_region_of_expression(expr.body, facts, held), _region_of_expression(expr.orelse, facts, held)]
        found = [a for a in arms if a is not None]
        if not found:
            return None
        first = found[0]
        enabled = first.enabled if len(found) == 2 and first.enabled is Enabled.OFF else Enabled.MAYBE
        if len(found) == 2 and all(a.enabled is Enabled.ON for a in found):
            enabled = Enabled.ON
        flag = expr.test if enabled is Enabled.MAYBE and len(found) == 1 else None
        return Region(first.node, first.device, first.dtype, first.dtype_given, enabled, first.kind, flag)
    name = dotted(expr)
    if name is not None:
        return facts.context_objects.get(name)
    return None


def _resolve_regions(facts: AmpFacts) -> None:
    held = held_factories(facts, AUTOCAST_NAMES)
    # Context objects: ``ctx = torch.autocast(...)`` anywhere in the module, by spelling.
    for assignment in facts.assignments:
        region = _region_of_expression(assignment.value, facts, held)
        if region is not None:
            existing = facts.context_objects.get(assignment.target)
            if existing is not None and existing.enabled is not region.enabled:
                region = Region(region.node, region.device, region.dtype, region.dtype_given, Enabled.MAYBE)
            facts.context_objects[assignment.target] = region
    seen: dict[int, Region] = {}
    for site in facts.calls:
        for ref in site.withs:
            key = id(ref)
            if key in seen or ref.region is not None:
                continue
            region = _region_of_expression(ref.expr, facts, held)
            if region is not None and ref.decorator:
                region = Region(region.node, region.device, region.dtype, region.dtype_given, region.enabled,
                                "decorator" if region.kind == "with" else region.kind)
            ref.region = region
            seen[key] = region
    regions: dict[int, Region] = {}
    for region in list(facts.context_objects.values()) + [r for r in seen.values() if r is not None]:
        regions.setdefault(id(region.node), region)
    # Regions that enclose no call at all (``with autocast(): pass``) still count as uses.
    for site in facts.calls:
        if id(site.node) not in regions:
            region = autocast_region(site.node, facts.imports)
            if region is not None:
                regions[id(site.node)] = region
    _devices_from_constants(facts, [*facts.context_objects.values(), *seen.values(), *regions.values()])
    facts.regions = list(regions.values())


def _devices_from_constants(facts: AmpFacts, found: list[Region | None]) -> None:
    """``torch.autocast(device_type=DEVICE_TYPE)`` with ``DEVICE_TYPE = "cuda"`` in the module."""
    unknown = [r for r in found if r is not None and r.device is None]
    constants = module_strings(facts) if unknown else None
    if not constants:
        return
    frames = {id(site.node): site.frame for site in facts.calls}
    for region in unknown:
        if id(region.node) in frames:
            region.device = constant_device(region.node, frames[id(region.node)], facts, constants)


def _is_scale_call(expr: ast.expr) -> str | None:
    """``K.scale(x)`` → ``K``."""
    if type(expr) is ast.Call and type(expr.func) is ast.Attribute and expr.func.attr == "scale":
        return dotted(expr.func.value)
    return None


def _find_scalers_and_optimizers(facts: AmpFacts) -> None:
    for assignment in facts.assignments:
        value = assignment.value
        if type(value) is ast.IfExp:
            # ``scaler = GradScaler() if amp else None``: a scaler whenever one is used.
            value = next((arm for arm in (value.body, value.orelse) if type(arm) is ast.Call), value)
        if type(value) is ast.Call:
            qname = facts.qualify(value.func)
            if qname in GRAD_SCALER_NAMES:
                facts.scalers.add(assignment.target)
                device_arg = get_arg(value, 0, "device")
                device = GRAD_SCALER_NAMES[qname] or (string_value(device_arg.value) if device_arg else "cuda")
                facts.scaler_devices[assignment.target] = device
            elif is_optimizer_constructor(value, facts):
                facts.optimizers.add(assignment.target)
    # By use: whatever has ``.scale(x).backward()`` called on it is a scaler.
    scaled_vars: dict[str, str] = {}
    for assignment in facts.assignments:
        scaler = _is_scale_call(assignment.value)
        if scaler is not None:
            scaled_vars[assignment.target] = scaler
    for site in facts.calls:
        if site.method == "backward":
            scaler = _is_scale_call(site.node.func.value) if type(site.node.func) is ast.Attribute else None
            if scaler is not None:
                facts.scalers.add(scaler)
    for site in facts.calls:
        if site.receiver in facts.scalers and site.method in ("step", "unscale_"):
            opt = site.arg(0, "optimizer")
            name = dotted(opt.value) if opt else None
            if name:
                facts.optimizers.add(name)
    for site in facts.calls:
        if site.method == "zero_grad" and site.receiver and _OPTIMIZER_NAME.search(site.receiver.rsplit(".", 1)[-1]):
            facts.optimizers.add(site.receiver)
    facts.scaled_vars = scaled_vars


_NOT_OPTIMIZERS = ("torch.optim.lr_scheduler.", "torch.optim.swa_utils.")


def is_optimizer_constructor(call: ast.Call, facts: AmpFacts) -> bool:
    qname = facts.qualify(call.func) or dotted(call.func) or ""
    if qname.startswith(_NOT_OPTIMIZERS):
        return False  # schedulers and SWA helpers also have .step()
    last = qname.rsplit(".", 1)[-1]
    return last in _OPTIMIZER_CLASS or qname.startswith("torch.optim.") and last[:1].isupper()


# Objects with a ``step()`` whose names would otherwise look like optimizers.
_NOT_OPTIMIZER_NAME = re.compile(r"sched|ema|swa|warmup|lr_|pbar|progress", re.I)


def is_optimizer(name: str | None, facts: AmpFacts) -> bool:
    if not name:
        return False
    if name in facts.optimizers:
        return True
    last = name.rsplit(".", 1)[-1]
    return bool(_OPTIMIZER_NAME.search(last)) and not _NOT_OPTIMIZER_NAME.search(last)


def _classify_events(facts: AmpFacts) -> None:
    scaled_vars = facts.scaled_vars
    for frame in facts.frames:
        for site in frame.calls:
            event = _event_for(site, facts, scaled_vars)
            if event is not None:
                frame.events.append(event)


def _event_for(site: CallSite, facts: AmpFacts, scaled_vars: dict[str, str]) -> Event | None:
    method, receiver = site.method, site.receiver
    if site.qname in GRAD_SCALER_NAMES:
        return Event(EventKind.SCALER_NEW, site)
    if site.qname in CLIP_NAMES:
        return Event(EventKind.CLIP, site, norm_only=_is_norm_only(site, facts))
    if site.qname in AUTOGRAD_BACKWARD:
        tensors = site.arg(0, "tensors")
        scaler = _is_scale_call(tensors.value) if tensors else None
        if scaler is None and tensors is not None:
            scaler = scaled_vars.get(dotted(tensors.value) or "")
        if scaler is not None:
            return Event(EventKind.SCALED_BACKWARD, site, scaler=scaler)
        return Event(EventKind.BACKWARD, site)
    if delegated_backward(method, receiver, site.node):
        return Event(EventKind.DELEGATED_BACKWARD, site)
    if method == "backward" and type(site.node.func) is ast.Attribute:
        target = site.node.func.value
        scaler = _is_scale_call(target) or scaled_vars.get(dotted(target) or "")
        if scaler is not None:
            return Event(EventKind.SCALED_BACKWARD, site, scaler=scaler)
        if receiver is not None and ("accelerator" in receiver.lower() or receiver.endswith("fabric")):
            return None  # accelerate / Lightning Fabric objects scale inside backward()
        return Event(EventKind.BACKWARD, site)
    if receiver in facts.scalers:
        opt_arg = site.arg(0, "optimizer")
        optimizer = dotted(opt_arg.value) if opt_arg else None
        kind = {"step": EventKind.SCALER_STEP, "unscale_": EventKind.UNSCALE, "update": EventKind.UPDATE}.get(method or "")
        if kind is not None:
            return Event(kind, site, scaler=receiver, optimizer=optimizer if kind is not EventKind.UPDATE else None)
        return None
    if method == "step" and not site.node.args and not site.node.keywords and is_optimizer(receiver, facts):
        return Event(EventKind.OPTIMIZER_STEP, site, optimizer=receiver)
    if method == "zero_grad":
        return Event(EventKind.ZERO_GRAD, site, optimizer=receiver)
    return None


def downcast_dtype(site: CallSite, facts: AmpFacts) -> str | None:
    """float16/bfloat16 when the call is ``.half()``, ``.bfloat16()``, ``.to(<half>)`` or ``.type(<half>)``."""
    call = site.node
    if site.method == "half" and not call.args and not call.keywords:
        return "float16"
    if site.method == "bfloat16" and not call.args and not call.keywords:
        return "bfloat16"
    if site.method == "to":
        for arg in call_args(call):
            if arg.star or (arg.keyword is not None and arg.keyword != "dtype"):
                continue
            dtype = DTYPES.get(facts.qualify(arg.value) or "")
            if dtype in ("float16", "bfloat16"):
                return dtype
        return None
    if site.method == "type" and (call.args or call.keywords):
        arg = call_args(call)[0]
        name = facts.qualify(arg.value) or ""
        dtype = HALF_TENSOR_TYPES.get(name) or DTYPES.get(name)
        if dtype is None:
            text = string_value(arg.value) or ""
            dtype = HALF_TENSOR_TYPES.get(text)
        if dtype in ("float16", "bfloat16"):
            return dtype
    return None


def _is_norm_only(site: CallSite, facts: AmpFacts) -> bool:
    """``clip_grad_norm_(params, inf)`` only measures; a norm divided by the scale is logging."""
    if "get_scale" in facts.text(site.statement):
        return True
    max_norm = site.arg(1, "max_norm") or site.arg(1, "clip_value")
    if max_norm is not None:
        value = max_norm.value
        if type(value) is ast.Call and dotted(value.func) == "float":
            arg = get_arg(value, 0, None)
            if arg is not None and (string_value(arg.value) or "").lower() in ("inf", "+inf"):
                return True
        name = dotted(value) or ""
        if name in ("math.inf", "torch.inf", "np.inf", "numpy.inf", "inf", "float_inf"):
            return True
    return False

