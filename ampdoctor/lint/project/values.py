"""Abstract values with provenance: what each function of a module does with the values that
matter to a training step, as plain data for the project summary.

Every expression a cross-module rule asks about gets an *abstract value*: a set of atoms, each
a short string, joined (set union) wherever a name is bound more than once (branches, loops,
rebinding). An atom says where part of the value may come from:

``S@L:C``  a GradScaler made here (line:column of its construction), or its state;
           ``S@~`` a scaler of unseen origin (a parameter or field used as one), ``S@-`` one
           built with ``enabled=False``
``O``      an optimizer, or its ``state_dict()``
``P3``     the function's fourth parameter (``P*``/``P**``: ``*args``/``**kwargs``)
``C5``     what the function's sixth recorded call returns (a call that may land in the project)
``Fname``  ``self.name``: a field of the method's class (and its bases)
``Gname``  a name bound at module level
``T2``     the tuple display ``tuples[2]`` (its elements are values of their own)
``I1|C5``  element 1 of what ``C5`` is (``a, b = f()``)
``Xname``  ``obj.name`` on an object that is not ``self``: taint only (see below)
``Qi|name`` field ``name`` of what parameter ``i`` is bound to; ``Zname|Class`` of an object of
           the class a parameter's annotation names, ``KClass`` that object itself;
           ``Dname#atom`` field ``name`` of the object another atom is (``self.engine.scaler``)
``A@dtype@state@device`` an autocast context (``A@-@off@-``: a null one)
``H``      ``self`` itself (``vars(self)``, ``self.state_dict()`` of an unseen method)
``U``      anything at all (``**spread`` into a value the analysis cannot split)

A value has two channels. *Taint* asks "may it hold the scaler's state?" and follows a value
everywhere, through any call, attribute or arithmetic; *content* (``O``, the optimizer's state,
which a checkpoint must hold to be one) is positive evidence and passes only through what keeps
it whole: names, containers, ``state_dict()``, copies. A lower-case variant of a symbolic atom
(``p3``, ``c5``, ``fname``, ``gname``, ``s@L:C``) carries the taint channel only: ``optimizer.param_groups``
is not the optimizer's state, but ``scaler._scale`` is still the scaler's.

Nothing here is resolved: ``P``, ``C``, ``F``, ``G``, ``X`` and ``H`` atoms name what the link
step (``flow.py``) resolves against the project, for each call site. The summary is built from
the module's tree in one walk per function, in the lint worker that parsed it.
"""

from __future__ import annotations

import ast
import builtins

from ..held import NULL_CONTEXTS
from ..model import AmpFacts, autocast_region
from ..passes import is_optimizer, is_optimizer_constructor
from ..rules.scaler_queries import scaler_enabled
from ..syntax import dotted, span
from ..vocabulary import AUTOCAST_NAMES, GRAD_SCALER_NAMES
from .snapshots import record_class

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TypedDict

    class CallFlow(TypedDict, total=False):
        """A call that may land in the project: its callee as spelled, where it is, its
        arguments' values (``[position or keyword, atoms]``), whether it spreads ``*``/``**``,
        and what it is worth when it lands nowhere the project shows (``fallback``)."""

        callee: str
        at: list[int]
        args: list[list]
        star: bool
        fallback: list[str]

    class FunctionFlow(TypedDict, total=False):
        """One function's values (see the module docstring): its returns, ``torch.save``s, the
        calls that may land in the project, its stores into ``self`` fields, module globals and
        other objects' fields, library calls handed a scaler, and the scalers it trains with."""

        ret: list[str]
        saves: list[list]
        calls: list[CallFlow]
        stores: dict[str, list[str]]
        gstores: dict[str, list[str]]
        xstores: dict[str, list[str]]
        escapes: list[list]
        scalers: list[str]
        tuples: list[list[list[str]]]
        npos: int


Atoms = frozenset  # of str
EMPTY: frozenset[str] = frozenset()
_UNKNOWN: frozenset[str] = frozenset({"U"})
_OPTIMIZER: frozenset[str] = frozenset({"O"})

# Content channel → taint channel.
_LOWER = {"P": "p", "C": "c", "F": "f", "G": "g", "Q": "q", "Z": "z", "K": "k", "S": "s", "D": "d"}

# Calls that return (a copy of, a view of, a container of) their arguments: both channels pass.
_PASS_THROUGH = frozenset(
    {
        "dict", "list", "tuple", "set", "frozenset", "sorted", "reversed", "iter", "next",
        "copy.copy", "copy.deepcopy", "deepcopy", "collections.OrderedDict", "OrderedDict",
        "dataclasses.asdict", "asdict", "dataclasses.astuple", "astuple", "dataclasses.replace",
        "types.SimpleNamespace", "SimpleNamespace", "collections.ChainMap", "ChainMap",
    }
)  # fmt: skip
# Methods that return their receiver's contents (or part of them).
_PASS_METHODS = frozenset(
    {"items", "values", "keys", "copy", "get", "pop", "popitem", "_asdict", "__getitem__", "setdefault", "to_dict"}
)
# Methods that put their arguments into their receiver.
_MUTATORS = frozenset({"update", "setdefault", "append", "extend", "insert", "add", "__setitem__"})
# A GradScaler's methods that return plain numbers or flags (``scaler.get_scale()`` for logging).
_SCALER_PLAIN = frozenset(
    {
        "get_scale", "is_enabled", "get_growth_factor", "get_backoff_factor", "get_growth_interval",
        "scale", "step", "update", "unscale_", "load_state_dict", "set_growth_factor",
        "set_backoff_factor", "set_growth_interval",
    }
)  # fmt: skip
# Builtins whose results carry nothing of their arguments' state (a number, a string, a flag).
_PLAIN_BUILTINS = frozenset(dir(builtins)) - {"dict", "list", "tuple", "set", "frozenset", "sorted", "reversed",
                                              "iter", "next", "vars", "getattr", "super", "map", "filter", "zip",
                                              "enumerate", "max", "min"}  # fmt: skip
# Builtins that return some of their arguments (``getattr(obj, name)``, ``max(a, b)``): taint passes.
_BUILTIN_NAMES = frozenset(dir(builtins)) | {"__file__", "__name__", "__doc__", "__spec__", "__path__"}
_PARTIAL = frozenset({"functools.partial"})
_TAINT_BUILTINS = frozenset({"getattr", "map", "filter", "zip", "enumerate", "max", "min"})
_LIBRARY_ROOTS = ("torch", "numpy", "np", "math", "os", "sys", "json", "time", "logging", "re", "random", "shutil")
_OPTIMIZER_TYPES = frozenset({"torch.optim.Optimizer", "torch.optim.optimizer.Optimizer"})


def lower(atoms: frozenset[str]) -> frozenset[str]:
    """The taint channel of a value: content atoms dropped, symbolic ones made taint-only."""
    if not atoms:
        return atoms
    out = set()
    for atom in atoms:
        head = atom[0]
        if head == "O" or head == "A":
            continue
        low = _LOWER.get(head)
        out.add(low + atom[1:] if low is not None else atom)
    return frozenset(out)


class _Params:
    __slots__ = ("index", "first", "vararg", "kwarg", "positional", "classes")

    def __init__(self, node: ast.FunctionDef | ast.AsyncFunctionDef | None, method: bool) -> None:
        self.index: dict[str, str] = {}
        self.classes = {}
        self.first: str | None = None
        self.vararg = self.kwarg = None
        self.positional = 0
        if node is None:
            return
        args = node.args
        self.positional = len(args.posonlyargs) + len(args.args)
        named = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
        self.classes: dict[str, str] = {}
        for i, name in enumerate(named):
            self.index[name] = f"P{i}"
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs):
            spelled = _annotated_class(arg.annotation)
            if spelled is not None:
                self.classes[arg.arg] = spelled
        if args.vararg is not None:
            self.vararg = args.vararg.arg
            self.index[self.vararg] = "P*"
        if args.kwarg is not None:
            self.kwarg = args.kwarg.arg
            self.index[self.kwarg] = "P**"
        if method and named:
            self.first = named[0]


class _Bindings:
    """What one function's walk collects before any value is computed: each name's bound
    expressions (``kind`` says how: plain, an element of an iterable, element ``i`` of a tuple,
    a mutation that adds to it), its returns, its calls, its field and global stores."""

    __slots__ = ("names", "returns", "calls", "stores", "xstores", "globals", "declared_global", "withs")

    def __init__(self) -> None:
        self.names: dict[str, list[tuple[str, object, ast.expr]]] = {}
        self.returns: list[ast.expr] = []
        self.calls: list[ast.Call] = []
        self.stores: list[tuple[str, str, object, ast.expr]] = []  # (field, kind, detail, expr)
        self.xstores: list[tuple[str, str | None, ast.expr]] = []  # (field, object name, expr)
        self.globals: list[tuple[str, str, object, ast.expr]] = []
        self.declared_global: set[str] = set()
        self.withs: list[ast.expr] = []


class ModuleFlows:
    """The values of every function of one module (``flows``: qualname → ``FunctionFlow``) and
    the module's own bindings (``"<module>"``)."""

    def __init__(self, facts: AmpFacts, module_names: set[str]) -> None:
        self.facts = facts
        self.module_names = module_names
        self.scaler_made = _scaler_constructions(facts)
        self.star_import = any(
            isinstance(stmt, ast.ImportFrom) and any(alias.name == "*" for alias in stmt.names)
            for stmt in facts.module.body
        )
        self.records = {node.name for node, _bases in facts.classes if record_class(facts, node) is not None}
        # Functions and classes defined at module level: a name of one is code, not state.
        self.defined = {
            stmt.name
            for stmt in facts.module.body
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        }
        self.flows: dict[str, dict] = {}


def module_flows(facts: AmpFacts, functions: list[tuple[str, ast.AST, str | None]]) -> dict[str, dict]:
    """``FunctionFlow`` per qualified name, for ``functions``: (qualname, node, class name) of
    each top-level function and method and the module body (node: the ``ast.Module``)."""
    module_names = _module_level_names(facts.module)
    context = ModuleFlows(facts, module_names)
    out = {}
    for name, node, class_name in functions:
        flow = _FunctionWalk(context, node, class_name).run()
        if flow:
            out[name] = flow
    return out


def _module_level_names(module: ast.Module) -> set[str]:
    names: set[str] = set()
    for stmt in module.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


def _scaler_constructions(facts: AmpFacts) -> dict[str, str]:
    """Spelled name → the atom of the GradScaler bound to it in this module (its first one)."""
    made: dict[str, str] = {}
    for assignment in facts.assignments:
        value = assignment.value
        if type(value) is ast.IfExp:
            value = next((arm for arm in (value.body, value.orelse) if type(arm) is ast.Call), value)
        if type(value) is ast.Call and assignment.target not in made:
            atom = _scaler_atom(facts, value)
            if atom is not None:
                made[assignment.target] = atom
    return made


def _scaler_atom(facts: AmpFacts, call: ast.Call) -> str | None:
    qname = facts.qualify(call.func)
    if qname not in GRAD_SCALER_NAMES:
        return None
    if scaler_enabled(call, qname or "") is False:
        return "S@-"
    return f"S@{call.lineno}:{call.col_offset + 1}"


class _FunctionWalk:
    def __init__(self, context: ModuleFlows, node: ast.AST, class_name: str | None) -> None:
        self.context = context
        self.facts = context.facts
        self.node = node
        self.is_module = isinstance(node, ast.Module)
        method = class_name is not None and not self.is_module and not _is_static(node)
        self.params = _Params(None if self.is_module else node, method)  # type: ignore[arg-type]
        self.bindings = _Bindings()
        self.env: dict[str, frozenset[str]] = {}
        self.tuples: list[list[frozenset[str]]] = []
        self._tuple_of: dict[int, int] = {}
        self.call_index: dict[int, int] = {}
        self.call_records: dict[int, dict] = {}
        self.escapes: list[list] = []
        self.saves: list[list] = []
        self._final = False
        self._escaped: set[int] = set()

    # ---- walk ------------------------------------------------------------------------------

    def run(self) -> dict:
        body = self.node.body
        self._collect(body)
        b = self.bindings
        self._handovers()
        self.env = dict.fromkeys(b.names, EMPTY)
        # Each name's value is the join of what it is bound to; names feed each other, so the
        # join is repeated until it holds (three rounds reach it for all but contrived code).
        for _ in range(4):
            changed = False
            for name, bound in b.names.items():
                value = self.env.get(name, EMPTY)
                new = value.union(*(self._bound(kind, detail, expr) for kind, detail, expr in bound))
                if new != value:
                    self.env[name] = new
                    changed = True
            if not changed:
                break
        self._final = True
        flow: dict = {}
        returns = EMPTY.union(*(self.ev(expr) for expr in b.returns)) if b.returns else EMPTY
        for call in b.calls:
            self._call_value(call)  # records the calls, saves and escapes in source order
        stores: dict[str, set[str]] = {}
        for field, kind, detail, expr in b.stores:
            value = self._bound(kind, detail, expr)
            stores.setdefault(field, set()).update(value)
        gstores: dict[str, set[str]] = {}
        for name, kind, detail, expr in b.globals:
            gstores.setdefault(name, set()).update(self._bound(kind, detail, expr))
        if self.is_module:
            for name in self.context.module_names:
                value = self.env.get(name)
                if value:
                    gstores.setdefault(name, set()).update(value)
        xstores: dict[str, set[str]] = {}
        for field, _obj, expr in b.xstores:
            value = lower(self.ev(expr))
            if value:
                xstores.setdefault(field, set()).update(value)
        if returns:
            flow["ret"] = sorted(returns)
        if self.saves:
            flow["saves"] = self.saves
        if self.call_records:
            flow["calls"] = [
                self.call_records.get(k, {"callee": "", "at": [0, 0, 0, 0]}) for k in range(len(self.call_index))
            ]
        if stores:
            flow["stores"] = {k: sorted(v) for k, v in stores.items() if v}
        if gstores:
            flow["gstores"] = {k: sorted(v) for k, v in gstores.items() if v}
        if xstores:
            flow["xstores"] = {k: sorted(v) for k, v in xstores.items()}
        if self.escapes:
            flow["escapes"] = self.escapes
        withs = self._held_contexts()
        if withs:
            flow["withs"] = withs
        scalers = self._scalers_used()
        if scalers:
            flow["scalers"] = sorted(scalers)
        if self.tuples:
            flow["tuples"] = [[sorted(v) for v in t] for t in self.tuples]
        if flow and not self.is_module:
            flow["npos"] = self.params.positional
        return flow

    def _collect(self, body: list[ast.stmt]) -> None:
        """Record bindings, returns, stores and calls of a body (nested functions included: a
        closure shares the names of the function around it; nested classes are left out)."""
        b = self.bindings
        stack: list[ast.AST] = list(reversed(body))
        while stack:
            node = stack.pop()
            kind = type(node)
            if kind is ast.ClassDef:
                continue
            if kind is ast.Assign:
                for target in node.targets:
                    self._bind_target(target, "=", None, node.value)
            elif kind is ast.AnnAssign and node.value is not None:
                self._bind_target(node.target, "=", None, node.value)
                spelled = _annotated_class(node.annotation)
                if spelled is not None and type(node.target) is ast.Name:
                    b.names.setdefault(node.target.id, []).append(("class", spelled, node.value))
            elif kind is ast.AugAssign:
                self._bind_target(node.target, "=", None, node.value)
            elif kind is ast.For or kind is ast.AsyncFor:
                self._bind_target(node.target, "in", None, node.iter)
            elif kind is ast.With or kind is ast.AsyncWith:
                for item in node.items:
                    b.withs.append(item.context_expr)
                    if item.optional_vars is not None:
                        self._bind_target(item.optional_vars, "=", None, item.context_expr)
            elif kind is ast.Return and node.value is not None and not self.is_module:
                b.returns.append(node.value)
            elif (kind is ast.Yield or kind is ast.YieldFrom) and node.value is not None:
                b.returns.append(node.value)
            elif kind is ast.Global:
                b.declared_global.update(node.names)
            elif kind is ast.NamedExpr:
                self._bind_target(node.target, "=", None, node.value)
            elif kind is ast.comprehension:
                self._bind_target(node.target, "in", None, node.iter)
            elif kind is ast.Call:
                b.calls.append(node)
                self._mutation(node)
            elif kind is ast.Lambda:
                stack.append(node.body)
                continue
            if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                if not self.is_module:
                    stack.extend(reversed(node.body))
                continue
            stack.extend(reversed(_children(node)))

    def _bind_target(self, target: ast.expr, kind: str, detail: object, value: ast.expr) -> None:
        b = self.bindings
        tkind = type(target)
        if tkind is ast.Name:
            name = target.id
            if name in b.declared_global and not self.is_module:
                b.globals.append((name, kind, detail, value))
            else:
                b.names.setdefault(name, []).append((kind, detail, value))
        elif tkind is ast.Tuple or tkind is ast.List:
            if kind == "=" and type(value) in (ast.Tuple, ast.List) and len(value.elts) == len(target.elts):
                for t, v in zip(target.elts, value.elts):
                    self._bind_target(t, "=", None, v)
                return
            for index, element in enumerate(target.elts):
                if type(element) is ast.Starred:
                    self._bind_target(element.value, kind, detail, value)
                    continue
                self._bind_target(element, "at" if kind == "=" else "in-at", index, value)
        elif tkind is ast.Attribute:
            owner = target.value
            if type(owner) is ast.Name and owner.id == self.params.first:
                b.stores.append((target.attr, kind, detail, value))
            else:
                b.xstores.append((target.attr, dotted(owner), value))
                root = _root_name(owner)
                if root is not None:
                    b.names.setdefault(root, []).append(("holds-" + kind, detail, value))
        elif tkind is ast.Subscript:
            self._bind_into(target.value, kind, detail, value)
        elif tkind is ast.Starred:
            self._bind_target(target.value, kind, detail, value)

    def _bind_into(self, container: ast.expr, kind: str, detail: object, value: ast.expr) -> None:
        """``container[k] = value`` / ``container.update(value)``: the container now holds it."""
        b = self.bindings
        if type(container) is ast.Name:
            name = container.id
            if name in b.declared_global and not self.is_module:
                b.globals.append((name, kind, detail, value))
            else:
                b.names.setdefault(name, []).append((kind, detail, value))
        elif type(container) is ast.Attribute:
            owner = container.value
            if type(owner) is ast.Name and owner.id == self.params.first:
                b.stores.append((container.attr, kind, detail, value))
            else:
                b.xstores.append((container.attr, dotted(owner), value))
                root = _root_name(owner)
                if root is not None:
                    b.names.setdefault(root, []).append(("holds-" + kind, detail, value))
        elif type(container) is ast.Subscript:
            self._bind_into(container.value, kind, detail, value)

    def _held_contexts(self) -> list[list]:
        """The ``with`` items whose context the module does not show being made (``self.amp_cm``,
        ``self.engine.autocast()``, a factory's result): where each is, and its value, so that
        the link step can tell an autocast made elsewhere (``A@`` atoms)."""
        found = []
        for expr in self.bindings.withs:
            value = self.ev(expr)
            if any(atom[0] in "CFGPQZI" for atom in value):
                found.append([span(expr), sorted(value)])
        return found

    def _handovers(self) -> None:
        """A call handed a scaler beside a mapping, a list or a record object of the function's
        own may put the scaler's state into it (``add_scaler_state(ckpt, scaler)``): the
        container takes the scaler's taint."""
        scalers = self.facts.scalers
        names = self.bindings.names
        for call in self.bindings.calls:
            func = call.func
            if type(func) is ast.Attribute and dotted(func.value) in scalers:
                continue  # a scaler's own method: ``scaler.step(optimizer)`` keeps nothing there
            args = [a.value if type(a) is ast.Starred else a for a in call.args]
            args.extend(k.value for k in call.keywords)
            if type(func) is ast.Attribute:
                args.append(func.value)
            given = [a for a in args if dotted(a) in scalers]
            if not given:
                continue
            records = self.context.records
            for arg in args:
                if type(arg) is ast.Name and arg.id in names and _holds_containers(names[arg.id], records):
                    for source in given:
                        names[arg.id].append(("taint-=", None, source))

    def _mutation(self, call: ast.Call) -> None:
        func = call.func
        if type(func) is not ast.Attribute or func.attr not in _MUTATORS:
            return
        values = [arg.value if type(arg) is ast.Starred else arg for arg in call.args]
        values.extend(k.value for k in call.keywords)
        for value in values:
            self._bind_into(func.value, "=", None, value)

    # ---- values ----------------------------------------------------------------------------

    def _bound(self, kind: str, detail: object, expr: ast.expr) -> frozenset[str]:
        if kind == "class":
            return frozenset({f"K{detail}"})  # ``task: BaseTask = ...``: an object of that class
        taint = kind.startswith("taint-")
        if taint:
            kind = kind[6:]
        if kind.startswith("holds-"):
            # ``obj.field = value``: the object now holds the value; it becomes a holder of the
            # scalers stored by name (``args.scaler = scaler``), not of everything the value is
            # (``task.trainer = self``, a back-reference, does not make the task its trainer).
            value = self._bound(kind[6:], detail, expr)
            return frozenset(atom for atom in value if atom.startswith("S@"))
        value = self.ev(expr)
        if kind == "in":
            value = self._elements(value)
        elif kind == "at":
            value = self._element(value, detail)  # type: ignore[arg-type]
        elif kind == "in-at":
            value = self._elements(value)
        return lower(value) if taint else value

    def _element(self, value: frozenset[str], index: int) -> frozenset[str]:
        out: set[str] = set()
        for atom in value:
            head = atom[0]
            if head == "T":
                elements = self.tuples[int(atom[1:])]
                out.update(elements[index] if index < len(elements) else EMPTY.union(*elements))
            elif head in "CPFG" and "|" not in atom:
                out.add(f"I{index}|{atom}")
            else:
                out.add(atom)
        return frozenset(out)

    def _elements(self, value: frozenset[str]) -> frozenset[str]:
        """What iterating over a value yields: the union of a tuple's elements, else the value."""
        if not any(atom[0] == "T" for atom in value):
            return value
        out: set[str] = set()
        for atom in value:
            if atom[0] == "T":
                out.update(*self.tuples[int(atom[1:])])
            else:
                out.add(atom)
        return frozenset(out)

    def ev(self, expr: ast.expr | None) -> frozenset[str]:
        if expr is None:
            return EMPTY
        kind = type(expr)
        if kind is ast.Constant or kind is ast.JoinedStr or kind is ast.Lambda or kind is ast.Compare:
            return EMPTY
        if kind is ast.Name:
            return self._name(expr.id)
        if kind is ast.Attribute:
            return self._attribute(expr)
        if kind is ast.Call:
            return self._call_value(expr)
        if kind is ast.Subscript:
            inner = self.ev(expr.value)
            index = expr.slice
            if type(index) is ast.Constant and type(index.value) is int and index.value >= 0:
                return self._element(inner, index.value)
            return self._elements(inner)
        if kind is ast.Dict:
            return EMPTY.union(*(self.ev(v) for v in expr.values))
        if kind is ast.List or kind is ast.Set:
            return self._elements(EMPTY.union(*(self.ev(e) for e in expr.elts)))
        if kind is ast.Tuple:
            return self._tuple(expr)
        if kind is ast.IfExp:
            return self.ev(expr.body) | self.ev(expr.orelse)
        if kind is ast.BoolOp:
            return EMPTY.union(*(self.ev(v) for v in expr.values))
        if kind is ast.BinOp:
            return lower(self.ev(expr.left) | self.ev(expr.right))
        if kind is ast.UnaryOp:
            return lower(self.ev(expr.operand))
        if kind is ast.Starred or kind is ast.Await or kind is ast.NamedExpr:
            return self.ev(expr.value)
        if kind in (ast.ListComp, ast.SetComp, ast.GeneratorExp):
            return self._comprehension(expr, expr.elt)
        if kind is ast.DictComp:
            return self._comprehension(expr, expr.value)
        return EMPTY

    def _tuple(self, expr: ast.Tuple) -> frozenset[str]:
        elements = [self.ev(e) for e in expr.elts]
        if any(type(e) is ast.Starred for e in expr.elts):
            return self._elements(EMPTY.union(*elements))
        # One atom per display; its elements are evaluated again while names still join.
        known = self._tuple_of.get(id(expr))
        if known is None:
            known = self._tuple_of[id(expr)] = len(self.tuples)
            self.tuples.append(elements)
        else:
            self.tuples[known] = elements
        return frozenset({f"T{known}"})

    def _comprehension(self, expr: ast.expr, element: ast.expr) -> frozenset[str]:
        subject = self._optimizers_only(expr, element)
        if subject is not None:
            # Only optimizers pass the filter; over ``vars(self)``, a field holding an object of
            # a project class derived from Optimizer passes too, whatever it keeps (``Y``).
            return _OPTIMIZER | ({"Y"} if "H" in subject else EMPTY)
        return self._elements(self.ev(element))

    def _optimizers_only(self, expr, element: ast.expr) -> frozenset[str] | None:
        """``{k: v.state_dict() for k, v in vars(self).items() if isinstance(v, Optimizer)}``:
        a filter by type admits optimizers only. The value of the iterated object, or None."""
        for generator in expr.generators:
            for test in generator.ifs:
                if not (type(test) is ast.Call and dotted(test.func) == "isinstance" and len(test.args) == 2):
                    continue
                subject = dotted(test.args[0])
                kinds = test.args[1].elts if type(test.args[1]) is ast.Tuple else [test.args[1]]
                if subject is None or not all(self.facts.qualify(k) in _OPTIMIZER_TYPES for k in kinds):
                    continue
                admitted = dotted(element) == subject or (
                    type(element) is ast.Call
                    and type(element.func) is ast.Attribute
                    and element.func.attr == "state_dict"
                    and dotted(element.func.value) == subject
                )
                if admitted:
                    return self.ev(generator.iter)
        return None

    def _roles(self, spelled: str) -> frozenset[str]:
        facts = self.facts
        out = EMPTY
        if spelled in facts.scalers:
            out = frozenset({self.context.scaler_made.get(spelled, "S@~")})

        if spelled in facts.optimizers:
            out = out | _OPTIMIZER
        return out

    def _name(self, name: str) -> frozenset[str]:
        value = self.env.get(name)
        if value is None:
            param = self.params.index.get(name)
            if param is not None:
                value = frozenset({param})
            elif name in self.bindings.declared_global or (not self.is_module and name in self.context.module_names):
                value = frozenset({f"G{name}"})
            elif self.context.star_import and not (
                name in self.facts.imports or name in _BUILTIN_NAMES or name in self.context.defined
            ):
                value = _UNKNOWN  # bound by ``from x import *``, for all the module shows
            else:
                value = EMPTY  # a module, a function or class, a library's constant
        elif name in self.params.index:
            value = value | {self.params.index[name]}
        if name == self.params.first:
            value = value | {"H"}  # the object itself: whatever its fields hold
        elif name in self.params.classes:
            value = value | {"K" + self.params.classes[name]}  # an object of the annotated class
        roles = self._roles(name) if (self.facts.scalers or self.facts.optimizers) else EMPTY
        return value | roles if roles else value

    def _attribute(self, expr: ast.Attribute) -> frozenset[str]:
        owner = expr.value
        name = expr.attr
        spelled = dotted(expr)
        roles = self._roles(spelled) if spelled is not None and (self.facts.scalers or self.facts.optimizers) else EMPTY
        if type(owner) is ast.Name and owner.id == self.params.first:
            return frozenset({f"F{name}"}) | roles
        # A field of an object whose class the link step may know (a parameter, bound per call
        # site; an annotated one), else the taint of the object (``scaler._scale`` is the scaler's).
        out = {f"X{name}"}
        for atom in self.ev(owner):
            head = atom[0]
            if head == "P":
                out.add(f"Q{atom[1:]}|{name}")
            elif head == "K":
                out.add(f"Z{name}|{atom[1:]}")
            elif atom == "H":
                out.add(f"F{name}")
            elif head == "S":
                out.add(atom)
            elif head in "FCGDQZ":
                out.add(f"D{name}#{atom}")  # the field of whatever object that atom is
            elif head != "O" and head != "A":
                out.add(_LOWER.get(head, head) + atom[1:] if head in _LOWER else atom)
        return frozenset(out) | roles

    # ---- calls -----------------------------------------------------------------------------

    def _call_value(self, call: ast.Call) -> frozenset[str]:
        facts = self.facts
        func = call.func
        spelled = dotted(func)
        qname = facts.qualify(func) if spelled is not None else None
        if qname in GRAD_SCALER_NAMES:
            return frozenset({_scaler_atom(facts, call) or "S@~"})
        held = _autocast_atom(facts, call, qname)
        if held is not None:
            return frozenset({held})
        if qname == "torch.save":
            if self._final:
                self._record_save(call)
            return EMPTY
        if spelled is not None and is_optimizer_constructor(call, facts):
            return _OPTIMIZER
        if type(func) is ast.Attribute:
            return self._method_value(call, func, spelled, qname)
        if type(func) is not ast.Name:
            return lower(self._arguments_union(call) | self.ev(func))
        name = func.id
        if qname is not None:
            return self._library(call, qname, spelled)
        if name == "vars" and len(call.args) == 1 and dotted(call.args[0]) == self.params.first:
            return frozenset({"H"})
        if name in _PASS_THROUGH:
            return self._arguments_union(call)
        if name in _TAINT_BUILTINS or name == "vars":
            return lower(self._arguments_union(call))
        if name in _PLAIN_BUILTINS and name not in self.context.module_names and name not in self.env:
            return EMPTY
        if name in self.env or name in self.params.index:
            # A callable held in a local or a parameter: what it returns may be anything it got
            # (and an autocast factory held there makes an autocast context).
            held = self.ev(func)
            return lower(self._arguments_union(call) | held) | {a for a in held if a[0] == "A"}
        return self._project_call(call, spelled)

    def _method_value(
        self, call: ast.Call, func: ast.Attribute, spelled: str | None, qname: str | None
    ) -> frozenset[str]:
        method = func.attr
        owner = func.value
        if qname is not None and not _is_local_object(owner, self):
            return self._library(call, qname, spelled)
        if method == "state_dict" and not call.args:
            receiver = self.ev(owner)
            # Named like an optimizer: its state, unless a caller binds it (``optimizer=None``).
            if not any(atom[0] == "P" for atom in receiver) and is_optimizer(dotted(owner), self.facts):
                receiver = receiver | _OPTIMIZER
            return receiver
        if type(owner) is ast.Call and type(owner.func) is ast.Name and owner.func.id == "super":
            return self._project_call(call, f"super.{method}")
        receiver = self.ev(owner)
        if any(atom.startswith("S@") for atom in receiver) and method in _SCALER_PLAIN:
            return EMPTY
        if method in _PASS_METHODS:
            return receiver | self._arguments_union(call) if method in ("get", "setdefault", "pop") else receiver
        if method in _MUTATORS:
            return EMPTY
        if spelled is not None and _is_project_receiver(owner, receiver, self):
            return self._project_call(call, spelled)
        result = lower(receiver | self._arguments_union(call))
        if self._final:
            self._record_escape(call, spelled or method)
        return result

    def _library(self, call: ast.Call, qname: str, spelled: str | None) -> frozenset[str]:
        """A call into a library (torch, numpy, an installed package): nothing of the project's
        runs, so what it returns carries at most what it was given (taint only); a copy carries
        its argument whole."""
        if qname in _PASS_THROUGH:
            return self._arguments_union(call)
        head = qname.split(".", 1)[0]
        if head in _LIBRARY_ROOTS or qname.split(".")[-1] in ("info", "warning", "debug", "error", "print"):
            if self._final and head != "torch":
                self._record_escape(call, spelled or qname)
            return EMPTY if head == "torch" else lower(self._arguments_union(call))
        return self._project_call(call, spelled or qname)

    def _arguments_union(self, call: ast.Call) -> frozenset[str]:
        values = [self.ev(arg) for arg in call.args]
        values.extend(self.ev(k.value) for k in call.keywords)
        return self._elements(EMPTY.union(*values)) if values else EMPTY

    def _project_call(self, call: ast.Call, spelled: str | None) -> frozenset[str]:
        """A call that may land in the project: its result is the atom ``C<k>``; the link step
        looks it up (and falls back on ``fallback`` where it lands nowhere the project shows)."""
        if spelled is None:
            receiver = self.ev(call.func.value) if type(call.func) is ast.Attribute else EMPTY
            return lower(self._arguments_union(call) | receiver)
        known = self.call_index.get(id(call))
        if known is None:
            known = self.call_index[id(call)] = len(self.call_index)
        if not self._final or known in self.call_records:
            return frozenset({f"C{known}"})
        args: list[list] = []
        star = False
        position = 0
        for arg in call.args:
            if type(arg) is ast.Starred:
                star = True
                args.append(["*", sorted(self.ev(arg.value))])
                continue
            entry: list = [position, sorted(self.ev(arg))]
            spelled_arg = dotted(arg)
            if (
                spelled_arg is not None
                and self.facts.scalers
                and (spelled_arg in self.facts.scalers or spelled_arg in self.facts.optimizers)
            ):
                entry.append(spelled_arg)  # a scaler or an optimizer by name, for the seeds
            args.append(entry)
            position += 1
        for keyword in call.keywords:
            if keyword.arg is None:
                star = True
                args.append(["**", sorted(self.ev(keyword.value))])
            else:
                args.append([keyword.arg, sorted(self.ev(keyword.value))])
        receiver = self.ev(call.func.value) if type(call.func) is ast.Attribute else EMPTY
        # Where it lands nowhere the project shows, ``self.m()`` is a library base class's method
        # (``nn.Module.named_parameters``), which knows nothing of the object's own fields: the
        # result carries what it was given, and a scaler it was called on, not the whole object.
        receiver = frozenset(atom for atom in receiver if atom != "H")
        fallback = lower(receiver.union(*(frozenset(a[1]) for a in args)) if args else receiver)
        record: dict = {"callee": spelled, "at": span(call)}
        if args:
            record["args"] = args
        if type(call.func) is ast.Attribute and not (
            type(call.func.value) is ast.Name and call.func.value.id == self.params.first
        ):
            objects = sorted(a for a in receiver if a[0] in "FCGDQZ")
            if objects:
                record["recv"] = objects  # the object the method is called on, for the link step
        called = sorted(a for a in self.ev(call.func) if a[0] in "FCGDQZ")
        if called:
            record["func"] = called  # an object called as a function (``self.clip_grad_norm(...)``)
        if star:
            record["star"] = True
        if fallback:
            record["fallback"] = sorted(fallback)
        self.call_records[known] = record
        return frozenset({f"C{known}"})

    def _record_save(self, call: ast.Call) -> None:
        if id(call) in self._escaped:
            return
        self._escaped.add(id(call))
        arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "obj"), None)
        if arg is None:
            value = _UNKNOWN
        elif type(arg) is ast.Starred:
            inner = self.ev(arg.value)
            value = self._element(inner, 0)
        else:
            value = self.ev(arg)
        self.saves.append([span(call), sorted(value)])

    def _record_escape(self, call: ast.Call, callee: str) -> None:
        """A library call handed a scaler by name, or ``self`` (which may hold one): what it does
        with it the project does not show."""
        if id(call) in self._escaped:
            return
        facts = self.facts
        args = [a.value if type(a) is ast.Starred else a for a in call.args]
        args.extend(k.value for k in call.keywords)
        handed: set[str] = set()
        for arg in args:
            spelled = dotted(arg)
            if spelled is None:
                continue
            if spelled == self.params.first:
                handed.add("H")
            elif spelled in facts.scalers:
                handed.update(a for a in self._roles(spelled) if a.startswith("S@"))
        if handed:
            self._escaped.add(id(call))
            self.escapes.append([span(call), callee, sorted(handed)])

    def _scalers_used(self) -> set[str]:
        """The scalers the function trains with or hands on: the receivers of its ``scale``,
        ``step``, ``unscale_`` and ``update`` calls on scalers, the scalers it passes to a call,
        and its parameters used as scalers. A scaler only built and stored is not one."""
        facts = self.facts
        found: set[str] = set()
        for name in self.params.index:
            if name in facts.scalers:  # handed in by the caller, which made it
                found.add(self.context.scaler_made.get(name, "S@~"))
        # An object of an annotated class (``trainer: Trainer``): the scalers it holds.
        found.update("K" + spelled for spelled in self.params.classes.values())
        for call in self.bindings.calls:
            func = call.func
            named: list[ast.expr] = []
            if type(func) is ast.Attribute and func.attr in ("scale", "step", "unscale_"):
                named.append(func.value)
            named.extend(arg for arg in call.args if type(arg) in (ast.Name, ast.Attribute))
            named.extend(k.value for k in call.keywords if type(k.value) in (ast.Name, ast.Attribute))
            if not facts.scalers:
                continue
            for expr in named:
                spelled = dotted(expr)
                if spelled is not None and spelled in facts.scalers:
                    found.update(a for a in self.ev(expr) if a[0] in "SPFGC" or a.startswith("I"))
        return found


_NOT_CLASSES = frozenset({"Any", "Optional", "Union", "Callable", "Dict", "List", "Tuple", "Type", "Sequence",
                          "Mapping", "Iterable", "Iterator", "Tensor", "Module", "Path", "Namespace", "DictConfig"})  # fmt: skip


def _annotated_class(annotation: ast.expr | None) -> str | None:
    """The class a parameter's annotation names (``Trainer``, ``"Trainer"``, ``Optional[Trainer]``,
    ``Trainer | None``), when it names one that may be the project's."""
    if annotation is None:
        return None
    if type(annotation) is ast.Constant and type(annotation.value) is str:
        text = annotation.value.strip()
        return (
            text
            if text.replace(".", "").replace("_", "").isalnum()
            and text.rsplit(".", 1)[-1][:1].isupper()
            and text.rsplit(".", 1)[-1] not in _NOT_CLASSES
            else None
        )
    if type(annotation) is ast.Subscript and dotted(annotation.value) in ("Optional", "typing.Optional"):
        return _annotated_class(annotation.slice)
    if type(annotation) is ast.BinOp and type(annotation.op) is ast.BitOr:
        left, right = annotation.left, annotation.right
        if type(right) is ast.Constant and right.value is None:
            return _annotated_class(left)
        if type(left) is ast.Constant and left.value is None:
            return _annotated_class(right)
        return None
    spelled = dotted(annotation)
    if spelled is None or spelled.startswith(("torch.", "nn.", "np.", "typing.")):
        return None
    last = spelled.rsplit(".", 1)[-1]
    return spelled if last[:1].isupper() and last not in _NOT_CLASSES and not last.isupper() else None


def _autocast_atom(facts: AmpFacts, call: ast.Call, qname: str | None) -> str | None:
    """``A@dtype@state`` for a call that makes an autocast context (or a factory of one, bound
    by ``partial``), ``A@-@off`` for a null context: what a ``with`` of it opens."""
    if qname in NULL_CONTEXTS:
        return "A@-@off@-"
    if qname in _PARTIAL and call.args and facts.qualify(call.args[0]) in AUTOCAST_NAMES:
        inner = ast.Call(func=call.args[0], args=list(call.args[1:]), keywords=list(call.keywords))
        region = autocast_region(inner, facts.imports)
    elif qname in AUTOCAST_NAMES:
        region = autocast_region(call, facts.imports)
    else:
        return None
    if region is None:
        return None
    return f"A@{region.effective_dtype or '-'}@{region.enabled.value}@{region.device or '-'}"


def _holds_containers(bound: list[tuple[str, object, ast.expr]], records: set[str]) -> bool:
    """Whether a name is bound to a mapping, a list or set, or an object of one of the module's
    dataclasses or named tuples (``records``): something a callee can put state into. (Not any
    object: a model handed to ``train(model, scaler)`` does not keep the scaler.)"""
    for kind, _detail, expr in bound:
        if kind != "=":
            continue
        if type(expr) in (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp):
            return True
        if type(expr) is ast.Call:
            spelled = dotted(expr.func) or ""
            last = spelled.rsplit(".", 1)[-1]
            if last in ("dict", "list", "OrderedDict", "defaultdict", "asdict") or last in records:
                return True
    return False


def _holds_scaler(value: frozenset[str]) -> bool:
    return any(atom.startswith("S@") or atom == "H" for atom in value)


def _is_static(node: ast.AST) -> bool:
    return any(dotted(d) in ("staticmethod",) for d in getattr(node, "decorator_list", ()))


def _root_name(expr: ast.expr) -> str | None:
    while type(expr) in (ast.Attribute, ast.Subscript):
        expr = expr.value  # type: ignore[attr-defined]
    return expr.id if type(expr) is ast.Name else None


def _is_local_object(owner: ast.expr, walk: _FunctionWalk) -> bool:
    """Whether a method's receiver is a local, a parameter or ``self``-rooted (its qualified
    name through the imports is then a coincidence of spelling, not a library's function)."""
    root = _root_name(owner)
    return root is not None and (root in walk.env or root in walk.params.index)


def _is_project_receiver(owner: ast.expr, value: frozenset[str], walk: _FunctionWalk) -> bool:
    """A method called on ``self`` (or one of its fields), or on an object made by a call that
    may build a project class or bound at module level: it may be a method of a project class.
    The linker resolves nothing else (a parameter's class is unknown)."""
    root = _root_name(owner)
    if root is None:
        return False
    if root == walk.params.first:
        return True
    return any(atom[0] == "C" or atom[0] == "G" for atom in value)


_CHILD_CACHE: dict[type, tuple[str, ...]] = {}


def _children(node: ast.AST) -> list[ast.AST]:
    fields = _CHILD_CACHE.get(type(node))
    if fields is None:
        fields = _CHILD_CACHE[type(node)] = tuple(f for f in node._fields if f not in ("ctx", "op", "ops"))
    out: list[ast.AST] = []
    for field in fields:
        value = getattr(node, field, None)
        if isinstance(value, ast.AST):
            out.append(value)
        elif type(value) is list:
            out.extend(v for v in value if isinstance(v, ast.AST))
    return out
