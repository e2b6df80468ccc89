"""The records of the fact model (``AmpFacts`` and the calls, regions, frames and events it
holds), and ``autocast_region``, which makes a Region from an autocast call.

``facts.py`` builds them in one walk of a module; ``passes.py`` completes them after the walk.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ..records import Record, Value
from .fixes import SourceLines
from .syntax import Arg, get_arg, qualify, string_value
from .vocabulary import AUTOCAST_NAMES, DTYPES, Enabled, EventKind

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any


class Block(Value):
    """One step of a path inside a frame: a loop, or one arm of a branch."""

    __slots__ = ("kind", "node", "ident")
    _uncompared = ("node",)
    kind: str
    node: ast.AST
    ident: int

    def __init__(self, kind: str, node: ast.AST, ident: int = 0) -> None:
        # kind: "loop", "if", "else", "try", "except", "finally", "match". Set one by one, not
        # through ``_set``: a module makes one of these per branch and loop body.
        setattr_ = object.__setattr__
        setattr_(self, "kind", kind)
        setattr_(self, "node", node)
        setattr_(self, "ident", ident)

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


_UNSET = object()


class CallSite(Record):
    __slots__ = (
        "node",
        "qname",
        "receiver",
        "method",
        "frame",
        "path",
        "withs",
        "order",
        "statement",
        "spelled",
        "_region",
    )

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
        statement: ast.stmt | ast.expr,
        spelled: str | None = None,
    ) -> None:
        self.node = node
        self.qname = qname  # resolved dotted name of the callee, when it is a known import
        self.spelled = spelled  # the callee as written, when it is a dotted name (``dotted(node.func)``)
        self._region: Region | object | None = _UNSET  # ``region``, once asked (the model is complete then)
        self.receiver = receiver  # dotted spelling of ``x`` in ``x.method(...)``
        self.method = method
        self.frame = frame
        self.path = path
        self.withs = withs
        self.order = order
        self.statement = statement  # the innermost statement that holds the call

    @property
    def region(self) -> Region | None:
        """The innermost autocast region around the call (on, off or maybe), or None. Asked
        only of a finished model (``passes.resolve_regions`` has given each ``with`` its region)."""
        found = self._region
        if found is _UNSET:
            found = None
            for ref in reversed(self.withs):
                if ref.region is not None:
                    found = ref.region
                    break
            self._region = found
        return found  # type: ignore[return-value]

    @property
    def in_autocast(self) -> bool:
        region = self.region
        if region is None or not region.enabled.counts_as_on:
            return False
        return region.flag is None or not _path_denies(self.path, region.flag)

    @property
    def loop(self) -> Block | None:
        for block in reversed(self.path):
            if block.is_loop:
                return block
        return None

    def arg(self, position: int | None = None, keyword: str | None = None) -> Arg | None:
        return get_arg(self.node, position, keyword)


def _path_denies(path: tuple[Block, ...], flag: ast.expr) -> bool:
    """Whether the path runs only where ``flag`` (what turns a region on) is false: the ``else``
    of ``if flag:``, or the body of ``if not flag:`` (``if fp16: scaled ... else: loss.backward()``
    inside ``with ctx:`` where ``ctx`` is autocast only when ``fp16``)."""
    wanted = ast.dump(flag)
    for block in path:
        node = block.node
        if type(node) is not ast.If:
            continue
        test = node.test
        if block.kind == "else" and ast.dump(test) == wanted:
            return True
        if (
            block.kind == "if"
            and type(test) is ast.UnaryOp
            and type(test.op) is ast.Not
            and ast.dump(test.operand) == wanted
        ):
            return True
    return False


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
    __slots__ = ("node", "name", "class_name", "parent", "calls", "events", "declared", "_kinds")

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
        # The names its ``global`` (True) and ``nonlocal`` (False) statements declare, if any.
        self.declared: dict[str, bool] | None = None
        # The events by kind, made on the first question (a module-level script is one frame
        # that rules ask about once per loop); made again when events were added since.
        self._kinds: tuple[int, dict[EventKind, list[Event]]] | None = None

    def events_of(self, *kinds: EventKind) -> list[Event]:
        events = self.events
        if not events:  # most frames: asked of every function, often
            return []
        index = self._kinds
        if index is None or index[0] != len(events):
            by_kind: dict[EventKind, list[Event]] = {}
            for event in events:
                by_kind.setdefault(event.kind, []).append(event)
            index = self._kinds = (len(events), by_kind)
        if len(kinds) == 1:
            return list(index[1].get(kinds[0], ()))
        return [e for e in events if e.kind in kinds]


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
        "constructors",
        "seeds",
        "path",
        "_assigned",
        "_by_name",
        "_by_value",
        "_module_once",
        "flow_nodes",
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
        references: list[tuple[ast.expr, str]],
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
        self._paths = _paths  # paths.PathIndex, made on the first question about paths (paths_of)
        # Whether a call node builds an optimizer (``passes.is_optimizer_constructor``), by the
        # node's id: the rules and the summary ask it of every call, several times.
        self.constructors: dict[int, bool] = {}
        # What the project analysis knows of this module's calls and ``with`` items that its own
        # code does not show (``project/seeds.py``): None in a file-local run.
        self.seeds: dict[str, Any] | None = None
        # The module's path as the run names it (``""`` for a source text): a rule may ask what
        # the module is for (a test, a benchmark of apex).
        self.path = ""
        self._assigned: dict[tuple[int, str], list[Assignment]] | None = None
        self._by_name: dict[str, list[CallSite]] | None = None
        self._by_value: dict[int, Assignment] | None = None
        self._module_once: dict[str, ast.expr] | None = None
        # Per top-level function or method (and the module body), by its node's id: the nodes its
        # value flow starts from (``facts.py``).
        self.flow_nodes: dict[int, list[ast.AST]] = {}

    def release(self) -> None:
        """Break the reference cycles of the model (a frame and its calls and events), once the
        module is checked and summarized, so that reference counting frees its tree and records
        at once: the cyclic collector would otherwise walk all of them (a file of 50,000 lines
        holds a million objects; see ``gc_budget.py``)."""
        for frame in self.frames:
            frame.calls = []
            frame.events = []
            frame._kinds = None

    # ---- queries --------------------------------------------------------------------

    @property
    def lines(self) -> SourceLines:
        if self._lines is None:
            self._lines = SourceLines(self.source)
        return self._lines

    def text(self, node: ast.AST) -> str:
        """The node's exact source text (without surrounding parentheses)."""
        return self.lines.segment(node)

    def qualify(self, expr: ast.AST | None) -> str | None:
        return qualify(expr, self.imports)

    def assigned(self, frame: Frame, target: str) -> list[Assignment]:
        """The assignments to ``target`` (a dotted spelling) made in ``frame``, in source order:
        one index for the module, made on the first question (a rule asks it per call)."""
        index = self._assigned
        if index is None:
            index = self._assigned = {}
            for assignment in self.assignments:
                index.setdefault((id(assignment.frame), assignment.target), []).append(assignment)
        return index.get((id(frame), target), [])

    def bound_once_at_module(self) -> dict[str, ast.expr]:
        """The names (dotted spellings too) that the module's top level binds exactly once, with
        the value each is bound to (``N_CLASSES = 10``, ``save = utils.save_checkpoint``)."""
        found = self._module_once
        if found is None:
            values: dict[str, list[ast.expr]] = {}
            for assignment in self.assignments:
                if assignment.frame.parent is None:
                    values.setdefault(assignment.target, []).append(assignment.value)
            found = self._module_once = {name: bound[0] for name, bound in values.items() if len(bound) == 1}
        return found

    def assignment_of(self, value: ast.expr) -> Assignment | None:
        """The first assignment whose value is this node (one index for the module)."""
        index = self._by_value
        if index is None:
            index = self._by_value = {}
            for assignment in self.assignments:
                index.setdefault(id(assignment.value), assignment)
        found = index.get(id(value))
        return found if found is not None and found.value is value else None

    def calls_named(self, name: str) -> list[CallSite]:
        """The calls ``name(...)`` and ``x.name(...)``, in source order (one index for the module,
        made on the first question)."""
        index = self._by_name
        if index is None:
            index = self._by_name = {}
            for site in self.calls:
                func = site.node.func
                called = func.id if type(func) is ast.Name else site.method
                if called is not None:
                    index.setdefault(called, []).append(site)
        return index.get(name, [])

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


def autocast_region(call: ast.Call, imports: dict[str, str], kind: str = "with") -> Region | None:
    """The Region made by an autocast call, or None when ``call`` is not one."""
    qname = qualify(call.func, imports)
    if qname not in AUTOCAST_NAMES:
        return None
    fixed_device = AUTOCAST_NAMES[qname]
    device: str | None
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
