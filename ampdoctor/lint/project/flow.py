"""The link step for abstract values: what the atoms of ``values.py`` stand for in the project.

A value of a function's summary names parameters, calls, fields and globals; here each is
looked up, for one call site at a time (its arguments bound to the callee's parameters), in the
summaries of the modules the linker reaches:

* ``P3``: what the call site passed for that parameter (nothing, where none is bound: a default,
  or a caller the analysis does not start from);
* ``C5``: what the callee returns with the call's arguments bound, a project class's object
  (it holds what it was given, and a scaler if the class keeps one), or, where the call lands
  nowhere the project shows, the taint of what it was given;
* ``Fname``: what the class's methods (and its bases') store into ``self.name``;
* ``Gname``: what the module binds to ``name`` (at module level or through ``global``);
* ``H``: the scalers the method's class holds;
* ``Xname``: a scaler where an object's field of that name is given one in the module.

Resolved values hold concrete atoms only: ``S@module@L:C`` (a scaler made there), ``S@module@~``
(a scaler of unseen origin), ``S@-`` (a disabled one), ``O``, ``U``, and tuples as
``("T", (value, ...))``. The walk is bounded in depth; past it a value is ``U`` (anything).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from ..vocabulary import STATE_METHODS
from .fields import field_stores
from .link import Project, Target
from .packed_calls import call_heads, flow_call

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from typing import Any, TypeAlias

    from .link import ModuleGate
    from .value_atoms import CallFlow, FunctionFlow

    # A concrete atom, or a tuple ``("T", (value, ...))``.
    Atom: TypeAlias = "str | tuple[str, tuple[Value, ...]]"
    # A resolved value: its atoms.
    Value: TypeAlias = "frozenset[Atom]"
    # ((param atom, concrete value or Lazy), ...), sorted: hashable (``Any``: either of the two,
    # which ``_force`` tells apart at run time)
    Bound: TypeAlias = "tuple[tuple[str, Any], ...]"
    # What fills a lazy parameter: (module, function, atoms, bound, depth) of one argument.
    LazyPart: TypeAlias = "tuple[str, str, tuple[str, ...], Bound, int]"
else:
    Bound = tuple  # ((param atom, concrete value or Lazy), ...), sorted: hashable

MAX_DEPTH = 6
# What a module's text must name for a call into it to return a value that matters here (an
# optimizer or its state, a scaler, an autocast context, a checkpoint): a call into any other
# module is taken as its fallback (the taint of what it is given), without summarizing it.
VALUE_WORDS = re.compile(rb"optim|[Ss]caler|state_dict|autocast|save|Adam|SGD|Optimizer")
_U = frozenset({"U"})
EMPTY: Value = frozenset()


class Lazy:
    """A parameter's binding left for later: the (module, function, atoms, bound, depth) of each
    argument that fills it, resolved only when the callee's values ask for the parameter.

    Its hash is computed once. A binding holds its caller's binding, which holds its own
    caller's, and a tuple's hash is not kept: as plain tuples, every memo look-up hashed the
    whole chain again, each level as many times as it was shared (the installed torch tree:
    59 s in the seeded re-lint, 4.5 s with the hash kept). Equal bindings stay equal."""

    __slots__ = ("_hash", "parts")

    def __init__(self, parts: tuple[LazyPart, ...]) -> None:
        self.parts = parts
        self._hash = hash(parts)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (type(other) is Lazy and self._hash == other._hash and self.parts == other.parts)


def self_type(module: str, function: str, bound: Bound) -> tuple[str, str] | None:
    """The class of ``self`` in a method: the one a caller bound (a subclass's method calling an
    inherited one), else the method's own."""
    for name, value in bound:
        if name == "self":
            where, _, cls = next(iter(value)).partition("|")
            return where, cls
    return (module, function.split(".", 1)[0]) if "." in function else None


def flatten(value: Value) -> Value:
    """The atoms of a resolved value with tuples opened (their elements joined)."""
    if not any(type(a) is tuple for a in value):
        return value
    out: set[Atom] = set()
    stack = list(value)
    while stack:
        atom = stack.pop()
        if type(atom) is tuple:
            for element in atom[1]:
                stack.extend(element)
        else:
            out.add(atom)
    return frozenset(out)


def lower(value: Value) -> Value:
    """The taint channel of a resolved value (``O`` dropped, tuples opened)."""
    return frozenset(a for a in flatten(value) if a != "O")


def scalers_in(value: Value) -> Value:
    return frozenset(a for a in flatten(value) if type(a) is str and a.startswith("S@"))


class Values:
    """Resolves the abstract values of a project's summaries (see the module docstring)."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self._memo: dict[tuple[str, str, str, Bound], Value] = {}
        self._active: set[tuple[str, str, str, Bound]] = set()
        self._holders: dict[tuple[str, str], Value] = {}
        self._fields: dict[tuple[str, str, str], Value] = {}
        self._gates: dict[bytes, ModuleGate] = {}
        self._nesting: dict[tuple[str, str, str], int] = {}
        self._classes_by_base: dict[str, list[tuple[str, str]]] | None = None
        self._methods: dict[str, dict[str, list[tuple[str, FunctionFlow]]]] = {}
        # Other checks' answers for this run, by their own keys (``engine_calls.py``: the
        # protocol classes that define a method name; ``checkpoints.py``: a parameter's class).
        self.asked: dict[tuple[object, ...], object] = {}
        # Whether the checks may read what every module of the project holds (the modules that
        # may clip, those that may run an engine's protocol) to spare walks that summarize
        # modules: a whole tree's run, where those walks are dear. A run of a file or two (the
        # pre-commit hook) reads its summaries from the cache, and such a scan of a 4,559-file
        # project cost it 60 ms (``checks.SCANNED_TARGETS``). The findings are the same either way.
        self.scans = True

    def scalers(self, value: Value) -> Value:
        """The scalers a resolved value may be or hold: ``S@`` atoms, and the scalers held by
        the objects (``H@module|Class``) in it."""
        out: set[Atom] = set()
        for atom in flatten(value):
            if type(atom) is not str:
                continue
            if atom.startswith("S@"):
                out.add(atom)
            elif atom.startswith("H@"):
                where, _, cls = atom[2:].partition("|")
                out.update(self.held_scalers(where, cls, 1))
        return frozenset(out)

    # ---- summaries --------------------------------------------------------------------------

    def flows(self, module: str) -> dict[str, FunctionFlow]:
        summary = self.project.summary(module)
        return summary.get("flows", {}) if summary else {}

    def methods(self, module: str, cls: str) -> list[tuple[str, FunctionFlow]]:
        """The flows of the class's methods (``Class.name``, nested ones too) in its module: one
        index per module, so that a question about a class does not read every function."""
        index = self._methods.get(module)
        if index is None:
            index = self._methods[module] = {}
            for function, flow in self.flows(module).items():
                parts = function.split(".")
                for end in range(1, len(parts)):
                    index.setdefault(".".join(parts[:end]), []).append((function, flow))
        return index.get(cls, [])

    def flow(self, module: str, function: str) -> FunctionFlow:
        return self.flows(module).get(function, {})

    # ---- resolution -------------------------------------------------------------------------

    def resolve(self, module: str, function: str, atoms: Iterable[str], bound: Bound = (), depth: int = 0) -> Value:
        out: set[Atom] = set()
        for atom in atoms:
            out.update(self.atom(module, function, atom, bound, depth))
        return frozenset(out)

    def atom(self, module: str, function: str, atom: str, bound: Bound, depth: int) -> Value:
        head = atom[0]
        if head == "O" or head == "U" or head == "A":
            return frozenset({atom})
        if head == "S" or head == "s":  # ``s@``: a value made from a scaler, which may hold its state
            return frozenset({"S@-" if atom[1:] == "@-" else f"S@{module}@{atom[2:]}"})
        if depth > MAX_DEPTH:
            return _U
        key = (module, function, atom, bound)
        known = self._memo.get(key)
        if known is not None:
            return known
        if key in self._active:
            return EMPTY  # a recursive definition adds nothing new
        # A function that calls itself binds its parameters anew on each level (the bindings
        # nest and never repeat): past two levels of the same atom, the recursion adds nothing.
        site = (module, function, atom)
        nesting = self._nesting.get(site, 0)
        if nesting >= 2:
            return EMPTY
        self._active.add(key)
        self._nesting[site] = nesting + 1
        try:
            value = self._atom(module, function, atom, bound, depth)
        finally:
            self._active.discard(key)
            self._nesting[site] = nesting
        self._memo[key] = value
        return value

    def _atom(self, module: str, function: str, atom: str, bound: Bound, depth: int) -> Value:
        head = atom[0]
        low = head.islower()
        if head in "Pp":
            wanted = "P" + atom[1:]
            for name, value in bound:
                if name == wanted:
                    value = self._force(value)
                    return lower(value) if low else value
            return EMPTY
        if head == "I":
            index_text, _, inner = atom[1:].partition("|")
            index = int(index_text)
            value = self.atom(module, function, inner, bound, depth)
            out: set[Atom] = set()
            for element in value:
                if type(element) is tuple:
                    items = element[1]
                    out.update(items[index] if index < len(items) else flatten(frozenset({element})))
                else:
                    out.add(element)
            return frozenset(out)
        if head == "T":
            tuples = self.flow(module, function).get("tuples", [])
            index = int(atom[1:])
            if index >= len(tuples):
                return _U
            return frozenset({("T", tuple(self.resolve(module, function, e, bound, depth) for e in tuples[index]))})
        if head in "Cc":
            value = self._call(module, function, int(atom[1:]), bound, depth)
            return lower(value) if low else value
        if head in "Ff":
            owner = self_type(module, function, bound)
            value = self.field(owner[0], owner[1], atom[1:], depth) if owner else EMPTY
            return lower(value) if low else value
        if head in "Gg":
            value = self.global_value(module, atom[1:], depth)
            return lower(value) if low else value
        if head == "H":
            owner = self_type(module, function, bound)
            return frozenset({f"H@{owner[0]}|{owner[1]}"}) if owner else EMPTY
        if head == "M":
            # ``self.state_dict()`` of a plain ``torch.nn.Module`` subclass: its parameters and
            # buffers, unless the object may be of a subclass that decides what it holds.
            owner = self_type(module, function, bound)
            if owner is None:
                return _U
            classes = [owner, *self.subclasses(*owner)]
            if any(self.project.method(m, c, name) is not None for m, c in classes for name in STATE_METHODS):
                return frozenset({f"H@{owner[0]}|{owner[1]}"})
            return EMPTY
        if head in "Dd":
            # Field ``name`` of the objects another atom resolves to.
            name, _, base = atom[1:].partition("#")
            out_d: set[Atom] = set()
            for element in flatten(self.atom(module, function, base, bound, depth + 1)):
                if type(element) is not str:
                    continue
                if element.startswith("H@"):
                    where, _, cls = element[2:].partition("|")
                    out_d.update(self.field(where, cls, name, depth + 1))
                elif element.startswith("S@"):
                    out_d.add(element)  # an attribute of a scaler (``scaler._scale``) is the scaler's
                # (a field of an object of unseen class is what the ``X`` atom of its name says)
            value = frozenset(out_d)
            return lower(value) if low else value
        if head in "Qq":
            # Field ``name`` of what parameter ``i`` is bound to: a project object's field, a
            # scaler's (a scaler), nothing of anything else (an attribute of a value is not it).
            position, _, name = atom[1:].partition("|")
            wanted = "P" + position
            fields: set[Atom] = set()
            for param, value in bound:
                if param != wanted:
                    continue
                for element in flatten(self._force(value)):
                    if type(element) is not str:
                        continue
                    if element.startswith("H@"):
                        where, _, cls = element[2:].partition("|")
                        fields.update(self.field(where, cls, name, depth + 1))
                    elif element.startswith("S@"):
                        fields.add(element)
            value = frozenset(fields)
            return lower(value) if low else value
        if head == "Y":
            owner = self_type(module, function, bound)
            return self.optimizer_fields(owner[0], owner[1], depth) if owner else EMPTY
        if head in "Kk" or head in "Zz":
            # An object of a class a parameter's annotation names: the scalers it holds (``K``),
            # or one of its fields (``Zfield|Class``).
            name, _, spelled = atom[1:].partition("|") if head in "Zz" else ("", "", atom[1:])
            built = self.construction(module, spelled)
            if built is None:
                return EMPTY
            if head in "Kk":
                return frozenset({f"H@{built[0]}|{built[1]}"})
            value = self.field(built[0], built[1], name, depth + 1)
            return lower(value) if low else value
        if head == "X":
            name = atom[1:]
            if "scaler" in name.lower():
                return frozenset({f"S@{module}@~"})
            held: set[Atom] = set()
            for other, flow in self.flows(module).items():
                stored = flow.get("xstores", {}).get(name)
                if stored:
                    held.update(self.scalers(self.resolve(module, other, stored, (), depth + 1)))
            return frozenset(held)
        return _U

    # ---- calls -----------------------------------------------------------------------------

    def target(
        self,
        module: str,
        function: str,
        call: CallFlow,
        without: re.Pattern[bytes] | None = None,
        words: re.Pattern[bytes] | None = None,
        defined: Callable[[str], bool] | None = None,
    ) -> Target | None:
        """The project function ``call`` (made in ``function``) lands in; ``without``: only
        where the function's text may match this pattern; ``words``: only in a module whose text
        matches it, or one already summarized (see ``Project.resolve_call``); ``defined``:
        whether a function of a name may answer what the caller asks: a method is found by the
        object's value, or in the bases for ``super().name(...)``, only where it says so of the
        method's name."""
        callee = call.get("callee")
        if not callee:
            return None
        if callee.startswith("super."):
            owner = function.split(".", 1)[0] if "." in function else None
            if owner is None or (defined is not None and not defined(callee[6:])):
                return None  # (no function of that name answers: the bases are not walked for it)
            return self._super_method(module, owner, callee[6:])
        gate = self._gate_for(words) if words is not None else None
        found = self.project.resolve_call(module, {"callee": callee, "frame": function}, without=without, gate=gate)
        name = call["callee"].rsplit(".", 1)[-1]
        # By the object's value: only where the method's name may answer what the caller asks
        # (a ``save_state`` for a checkpoint): that walk reads the modules of the object's class.
        if found is None and call.get("recv") and (without is None or without.search(name.encode())):
            if defined is None or defined(name):
                found = self._method_of_value(module, function, call, call["recv"], name)
        # An object called as a function: its class's ``__call__``, where nothing narrows the
        # callees or the object's own name may answer (``checkpoint_saver(metric, epoch, ...)``).
        if found is None and call.get("func") and (without is None or without.search(name.encode())):
            if defined is None or defined("__call__"):
                found = self._method_of_value(module, function, call, call["func"], "__call__")
        return found

    def _gate_for(self, words: re.Pattern[bytes]) -> ModuleGate:
        gates = self._gates
        gate = gates.get(words.pattern)
        if gate is None:
            text = self.project.text
            answers: dict[str, bool] = {}  # a module's text searched once per pattern

            def gate(rel: str) -> bool:
                known = answers.get(rel)
                if known is None:
                    data = text(rel) if text is not None else None
                    known = answers[rel] = data is None or words.search(data) is not None
                return known

            gates[words.pattern] = gate
        return gate

    def _method_of_value(
        self, module: str, function: str, call: CallFlow, atoms: list[str], name: str
    ) -> Target | None:
        """``engine.autocast()`` where ``engine`` is an object of one project class (a factory's
        result, a field set in a base class): that class's method (``__call__`` for an object
        called as a function)."""
        classes = {
            atom[2:]
            for atom in flatten(self.resolve(module, function, atoms, (), 1))
            if type(atom) is str and atom.startswith("H@")
        }
        # Of the classes the object may be of, those that have the method (a wrapper such as a
        # DistributedDataParallel subclass does not): one definition, or no answer.
        methods = set()
        for held in sorted(classes)[:8]:
            where, _, cls = held.partition("|")
            found = self.project.method(where, cls, name)
            if found is not None:
                methods.add(found)
        if len(methods) != 1:
            return None
        method = next(iter(methods))
        function_summary = (self.project.summary(method[0]) or {}).get("functions", {}).get(method[1])
        return None if function_summary is None else Target(method[0], method[1], function_summary, 1)

    def _super_method(self, module: str, owner: str, name: str) -> Target | None:
        summary = self.project.summary(module)
        info = summary.get("classes", {}).get(owner) if summary else None
        if info is None:
            return None
        for base in info.get("bases", []):
            found = self.project.resolve_spelled(module, base.split("."))
            if found is not None and found[2] == "class":
                method = self.project.method(found[0], found[1], name)
                if method is not None:
                    target_summary = self.project.summary(method[0])
                    function = (target_summary or {}).get("functions", {}).get(method[1])
                    if function is not None:
                        return Target(method[0], method[1], function, 1)
        return None

    def construction(
        self, module: str, callee: str, words: re.Pattern[bytes] | None = VALUE_WORDS
    ) -> tuple[str, str] | None:
        """The project class a call constructs, when it names one (and, with ``words``, when its
        module's text names what a value here may be: an object of any other class holds what it
        is given and nothing of its own, which its call's fallback says as well). Found on the
        modules' outlines first, so that a class's module whose text names no value is not
        summarized only to find the class (79 of the 215 modules the 31-repository tree's checks
        summarized on demand in the main process)."""
        found = self.project.resolve_class_on_text_first(module, callee.split("."))
        if found is None:
            return None
        if words is not None and found[0] not in self.project._summaries and not self._gate_for(words)(found[0]):
            return None
        return found[0], found[1]

    def bind(self, module: str, function: str, call: CallFlow, target: Target, bound: Bound, depth: int) -> Bound:
        """The callee's parameters bound to what ``call`` (made in ``function``) passes."""
        params: list[str] = target.function.get("params", [])
        callee_flow = self.flow(target.module, target.name)
        positional = callee_flow.get("npos", len(params))
        pairs: dict[str, set[Atom]] = {}
        lazy: dict[str, list[LazyPart]] = {}  # resolved only when the callee's values ask for the parameter
        extra: list[Value] = []
        spread: set[Atom] = set()
        for key, atoms, *_ in call.get("args", []):
            if key == "*" or key == "**":
                spread.update(self.resolve(module, function, atoms, bound, depth))
                continue
            part = (module, function, tuple(atoms), bound, depth)
            if isinstance(key, int):
                index = key + target.skip
                if index < positional:
                    lazy.setdefault(f"P{index}", []).append(part)
                else:
                    extra.append(self.resolve(module, function, atoms, bound, depth))
            elif key in params:
                lazy.setdefault(f"P{params.index(key)}", []).append(part)
            else:
                lazy.setdefault("P**", []).append(part)
        if extra:
            pairs["P*"] = {("T", tuple(extra))}
        callee = call.get("callee", "")
        if target.skip and (callee.startswith(("self.", "super."))) and callee.count(".") == 1:
            owner = self_type(module, function, bound)
            if owner is not None:
                pairs["self"] = {f"{owner[0]}|{owner[1]}"}  # the object is of the caller's class
        if spread:
            # A ``*args``/``**kwargs`` spread may fill any parameter not given otherwise.
            for index in range(target.skip, len(params)):
                pairs.setdefault(f"P{index}", set()).update(spread)
            pairs.setdefault("P*", set()).update(spread)
            pairs.setdefault("P**", set()).update(spread)
        bound_pairs: dict[str, Any] = {name: frozenset(value) for name, value in pairs.items()}
        for name, parts in lazy.items():
            if name in bound_pairs:  # a spread too: resolve now and join
                bound_pairs[name] = bound_pairs[name] | self._force(Lazy(tuple(parts)))
            else:
                bound_pairs[name] = Lazy(tuple(parts))
        return tuple(sorted(bound_pairs.items()))

    def bound_value(self, value: Any) -> Value:
        """A parameter's value as a binding holds it, resolved (``bind`` leaves most for later)."""
        return flatten(self._force(value))

    def _force(self, value: Any) -> Value:
        """A bound parameter's value: resolved now when the binding left it for later."""
        if type(value) is Lazy:
            out: set[Atom] = set()
            for where, function, atoms, bound, depth in value.parts:
                out.update(self.resolve(where, function, atoms, bound, depth))
            return frozenset(out)
        resolved: Value = value  # a concrete value already
        return resolved

    def _call(self, module: str, function: str, index: int, bound: Bound, depth: int) -> Value:
        # (a copy let go: the atoms' values are memoized, and a call read again costs less than
        # keeping every call a resolution passes through)
        call = flow_call(self.flow(module, function), index, keep=False)
        if call is None:
            return _U
        target = self.target(module, function, call, words=VALUE_WORDS)
        if target is not None:
            callee_flow = self.flow(target.module, target.name)
            returned = callee_flow.get("ret")
            if not returned:
                return EMPTY
            binding = self.bind(module, function, call, target, bound, depth)
            return self.resolve(target.module, target.name, returned, binding, depth + 1)
        callee = call.get("callee", "")
        built = self.construction(module, callee) if callee and callee[-1:] != "." else None
        if built is not None:
            given = EMPTY.union(
                *(self.resolve(module, function, atoms, bound, depth) for _k, atoms, *_ in call.get("args", []))
            )
            return given | {f"H@{built[0]}|{built[1]}"}  # the object: what it holds, its fields
        return self.resolve(module, function, call.get("fallback", []), bound, depth)

    # ---- fields, globals, holders ------------------------------------------------------------

    def hierarchy(self, module: str, owner: str) -> list[tuple[str, str]]:
        """The class and its project bases, nearest first."""
        out: list[tuple[str, str]] = []
        stack = [(module, owner)]
        while stack and len(out) < 12:
            current = stack.pop(0)
            if current in out:
                continue
            out.append(current)
            summary = self.project.summary(current[0])
            info = summary.get("classes", {}).get(current[1]) if summary else None
            for base in (info or {}).get("bases", []):
                found = self.project.resolve_spelled(current[0], base.split("."))
                if found is not None and found[2] == "class":
                    stack.append((found[0], found[1]))
        return out

    def field(self, module: str, owner: str, name: str, depth: int) -> Value:
        key = (module, owner, name)
        known = self._fields.get(key)
        if known is not None:
            return known
        self._fields[key] = EMPTY  # a field defined through itself
        out: set[Atom] = set()
        for where, cls in self.hierarchy(module, owner):
            for function, flow in self.methods(where, cls):
                stores = flow.get("stores")
                if not stores:
                    continue
                for stored in field_stores(stores, name):
                    out.update(self.resolve(where, function, stored, (), depth + 1))
        value = frozenset(out)
        self._fields[key] = value
        return value

    def held_scalers(self, module: str, owner: str, depth: int) -> Value:
        """The scalers an object of the class trains with: those its fields' objects hold, and
        those built into its fields where a method of the class (or a base) uses a scaler (a
        scaler built and never used holds no state worth saving)."""
        key = (module, owner)
        known = self._holders.get(key)
        if known is not None:
            return known
        self._holders[key] = EMPTY
        out: set[Atom] = set()
        built: set[Atom] = set()  # scalers built into a field, which count only where the class uses one
        uses = False
        for where, cls in self.hierarchy(module, owner):
            for function, flow in self.methods(where, cls):
                uses = uses or bool(flow.get("scalers"))
                for stored in flow.get("stores", {}).values():
                    direct = [atom for atom in stored if atom.startswith("S@")]
                    if direct:
                        built.update(self.resolve(where, function, direct, (), depth + 1))
                    rest = [atom for atom in stored if not atom.startswith("S@")]
                    if rest:
                        out.update(self.scalers(self.resolve(where, function, rest, (), depth + 1)))
        if uses:
            out.update(built)
        value = frozenset(out)
        self._holders[key] = value
        return value

    def optimizer_fields(self, module: str, owner: str, depth: int) -> Value:
        """The scalers held by objects in the class's fields whose class derives from an
        Optimizer (a filter ``isinstance(v, torch.optim.Optimizer)`` keeps them)."""
        out: set[Atom] = set()
        for where, cls in self.hierarchy(module, owner):
            for _function, flow in self.methods(where, cls):
                heads = call_heads(flow)
                for stored in flow.get("stores", {}).values():
                    for atom in stored:
                        if atom[0] != "C" or int(atom[1:]) >= len(heads):
                            continue
                        built = self.construction(where, heads[int(atom[1:])][0])
                        if built is not None and any(
                            base.rsplit(".", 1)[-1] == "Optimizer"
                            for m, c in self.hierarchy(*built)
                            for base in ((self.project.summary(m) or {}).get("classes", {}).get(c, {}).get("bases", []))
                        ):
                            out.update(self.held_scalers(built[0], built[1], depth + 1))
        return frozenset(out)

    def subclasses(self, module: str, owner: str) -> list[tuple[str, str]]:
        """The project's classes derived from the class (directly or not), found through an
        index of every class statement's base names read once from the modules' texts."""
        index = self._class_index()
        out: list[tuple[str, str]] = []
        todo = [(module, owner)]
        seen = {(module, owner)}
        while todo and len(out) < 24:
            base = todo.pop()
            short = base[1].rsplit(".", 1)[-1]
            for rel, name in index.get(short, ()):
                if (rel, name) in seen:
                    continue
                bases = self.project.class_bases_on_text_first(rel, name)
                for spelled in bases or ():
                    if self.project.resolve_class_on_text_first(rel, spelled.split(".")) == base:
                        seen.add((rel, name))
                        out.append((rel, name))
                        todo.append((rel, name))
                        break
        return out

    def _class_index(self) -> dict[str, list[tuple[str, str]]]:
        """Base name (its last part) → the (module, class) statements that name it, for every
        module of the project with a ``class`` statement."""
        if self._classes_by_base is None:
            index: dict[str, list[tuple[str, str]]] = {}
            statements = self.project.class_statements
            for rel in sorted(self.project.files):
                for name, bases in statements(rel):
                    for short in bases:
                        index.setdefault(short, []).append((rel, name))
            self._classes_by_base = index
        return self._classes_by_base

    def global_value(self, module: str, name: str, depth: int) -> Value:
        out: set[Atom] = set()
        for function, flow in self.flows(module).items():
            stored = flow.get("gstores", {}).get(name)
            if stored:
                out.update(self.resolve(module, function, stored, (), depth + 1))
        return frozenset(out)
