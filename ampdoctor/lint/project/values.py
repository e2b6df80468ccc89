"""Abstract values with provenance: what each function of a module does with the values that
matter to a training step, as plain data for the project summary.

Every expression a cross-module rule asks about gets an *abstract value*: a set of atoms (see
``value_atoms.py`` for their vocabulary), joined wherever a name is bound more than once. Where
the names are bound comes first (``value_bindings.py``); here each name's value is the join of
what it is bound to, repeated until it holds, and then each function's returns, ``torch.save``
calls, calls that may land in the project, field stores and ``with`` items are evaluated into its
``FunctionFlow`` (what it records beside values: ``value_records.py``). Nothing is resolved
here: the link step (``flow.py``) resolves the symbolic atoms against the project, for each
call site. The summary is built from the module's tree, in the lint worker that parsed it.
"""

from __future__ import annotations

import ast

from ..model import AmpFacts
from ..passes import is_optimizer, is_optimizer_constructor
from ..syntax import dotted, span
from ..vocabulary import GRAD_SCALER_NAMES
from .fields import field_key
from .flow_words import names_flow_word
from .value_atoms import (
    _BUILTIN_NAMES,
    _CHECKPOINTER,
    _LIBRARY_ROOTS,
    _LOWER,
    _MUTATORS,
    _OPTIMIZER,
    _OPTIMIZER_TYPES,
    _PASS_METHODS,
    _PASS_THROUGH,
    _PLAIN_BUILTINS,
    _RETURNS_SELF,
    _SCALER_PLAIN,
    _TAINT_BUILTINS,
    _UNKNOWN,
    EMPTY,
    _autocast_atom,
    _is_local_object,
    _is_project_receiver,
    _is_static,
    _module_level_names,
    _Params,
    _scaler_atom,
    identifier_arguments,
    lower,
    named_method,
    numbered,
)
from .value_bindings import BindingWalk, ModuleFlows, _Bindings
from .value_records import FlowRecords

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from typing import Any

    from .value_atoms import CallFlow, FunctionFlow

    Comprehension = ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp


def module_flows(facts: AmpFacts, functions: list[tuple[str, ast.AST, str | None]]) -> dict[str, FunctionFlow]:
    """``FunctionFlow`` per qualified name, for ``functions``: (qualname, node, class name) of
    each top-level function and method and the module body (node: the ``ast.Module``)."""
    make = FlowMaker(facts, functions)
    return flows_by_name(functions, [make(index) for index in range(len(functions))])


def flows_by_name(
    functions: list[tuple[str, ast.AST, str | None]], flows: list[FunctionFlow | None]
) -> dict[str, FunctionFlow]:
    """``module_flows``'s answer from ``FlowMaker``'s, made for each of ``functions`` in turn."""
    return {name: flow for (name, _node, _class), flow in zip(functions, flows) if flow}


class FlowMaker:
    """The flow of each of one module's ``functions`` (as ``module_flows`` takes them), by its
    index there: None where it has none. Each is made on its own (what the module's functions
    share is made first, and only read after), so that two processes may share the work
    (``summary.start_summary``)."""

    def __init__(self, facts: AmpFacts, functions: list[tuple[str, ast.AST, str | None]]) -> None:
        self.functions = functions
        self.context = ModuleFlows(facts, _module_level_names(facts.module))
        self.source = facts.source
        self.bounds = facts.lines.bounds

    def __call__(self, index: int) -> FunctionFlow | None:
        name, node, class_name = self.functions[index]
        if name != "<module>":
            # A long function whose text names nothing a value here is made of (a layer's
            # forward, a data transform) gets no flow: a call into it falls back on the taint of
            # what it is handed. Searched where the text lies: a module may hold thousands.
            start, end = self.bounds(node) or (0, len(self.source))
            short = getattr(node, "end_lineno", 0) - getattr(node, "lineno", 0) < 12  # an accessor, a factory
            if not short and not names_flow_word(self.source, start, end):
                return None
        return _FunctionWalk(self.context, node, class_name).run() or None


class _FunctionWalk(BindingWalk, FlowRecords):
    def __init__(self, context: ModuleFlows, node: Any, class_name: str | None) -> None:
        self.context = context
        self.facts = context.facts
        self.node = node
        self.is_module = isinstance(node, ast.Module)
        method = class_name is not None and not self.is_module and not _is_static(node)
        self.class_name = class_name if method else None
        self.params = _Params(None if self.is_module else node, method)
        self.bindings = _Bindings()
        self.env: dict[str, frozenset[str]] = {}
        self.tuples: list[list[frozenset[str]]] = []
        self._tuple_of: dict[int, int] = {}
        self.call_index: dict[int, int] = {}
        self.call_records: dict[int, CallFlow] = {}
        self.escapes: list[list[Any]] = []
        self.saves: list[list[Any]] = []
        self.dynamic: list[list[Any]] = []
        self.named: list[list[Any]] = []
        self._final = False
        self._final_values: dict[int, frozenset[str]] = {}  # each call's value, once final
        self._escaped: set[int] = set()
        # While the names join (``run``): what the evaluation under way read (names, and tuple
        # displays by index), and when each of them last changed (``_clock`` counts changes).
        self._reads: set[str | int] | None = None
        self._changed_at: dict[str | int, int] = {}
        self._clock = 0

    # ---- walk ------------------------------------------------------------------------------

    def run(self) -> FunctionFlow:
        self._collect(self.facts.flow_nodes[id(self.node)])
        b = self.bindings
        self._handovers()
        self.env = dict.fromkeys(b.names, EMPTY)
        # Each name's value is the join of what it is bound to; names feed each other, so the
        # join is repeated until it holds (three rounds reach it for all but contrived code). A
        # name none of whose inputs (the names and tuple displays its last evaluation read)
        # changed since is not evaluated again: it would join what it already holds. On the 397
        # modules the 31-repository tree's workers summarize, the rounds after the first took
        # 0.15 s of 1.04 s.
        changed_at = self._changed_at
        evaluated: dict[str, tuple[int, set[str | int]]] = {}
        for _ in range(4):
            changed = False
            for name, bound in b.names.items():
                last = evaluated.get(name)
                if last is not None and not any(changed_at.get(key, -1) > last[0] for key in last[1]):
                    continue
                reads: set[str | int] = set()
                self._reads = reads
                evaluated[name] = (self._clock, reads)
                value = self.env.get(name, EMPTY)
                new = value.union(*(self._bound(kind, detail, expr) for kind, detail, expr in bound))
                if new != value:
                    self.env[name] = new
                    self._clock += 1
                    changed_at[name] = self._clock
                    changed = True
            if not changed:
                break
        self._reads = None
        self._final = True
        flow: FunctionFlow = {}
        returns = EMPTY.union(*(self.ev(expr) for expr in b.returns)) if b.returns else EMPTY
        for call in b.calls:
            self.ev(call)  # records the calls, saves and escapes in source order
        stores: dict[str, set[str]] = {}
        for field, kind, detail, expr in b.stores:
            value = self._bound(kind, detail, expr)
            stores.setdefault(field, set()).update(value)
        gstores: dict[str, set[str]] = {}
        for name, kind, detail, expr in b.globals:
            gstores.setdefault(name, set()).update(self._bound(kind, detail, expr))
        if self.is_module:
            for name in sorted(self.context.module_names):  # (a set: the summary's text is the same in every run)
                held = self.env.get(name)
                if held:
                    gstores.setdefault(name, set()).update(held)
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
        if self.dynamic:
            flow["dynamic"] = self.dynamic
        if self.named:
            flow["named"] = self.named
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
                elements = self._tuple_elements(int(atom[1:]))
                out.update(elements[index] if index < len(elements) else EMPTY.union(*elements))
            elif head in "CPFG" and "|" not in atom:
                out.add(f"I{index}|{atom}")
            else:
                out.add(atom)
        return frozenset(out)

    def _tuple_elements(self, known: int) -> list[frozenset[str]]:
        """The elements of tuple display ``known``, read (while the names join: ``run``)."""
        if self._reads is not None:
            self._reads.add(known)
        return self.tuples[known]

    def _elements(self, value: frozenset[str]) -> frozenset[str]:
        """What iterating over a value yields: the union of a tuple's elements, else the value."""
        if not any(atom[0] == "T" for atom in value):
            return value
        out: set[str] = set()
        for atom in value:
            if atom[0] == "T":
                out.update(*self._tuple_elements(int(atom[1:])))
            else:
                out.add(atom)
        return frozenset(out)

    def ev(self, expr: Any) -> frozenset[str]:
        """The value of an expression (``Any``: dispatched on ``type(expr) is``, see
        ``value_bindings.py``)."""
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
            if self._final:
                # The names hold their final values: a call's value no longer changes, and
                # what evaluating it records is recorded once (a nested call is asked for by
                # the call around it and again on its own).
                value = self._final_values.get(id(expr))
                if value is None:
                    value = self._final_values[id(expr)] = self._call_value(expr)
                return value
            return self._call_value(expr)
        if kind is ast.Subscript:
            key = field_key(expr, self.params.first)
            if key is not None:
                # The entry of one key of a field: the ``F`` atom of the field under that key.
                field = "F" + key.partition("[")[0]
                return frozenset(("F" + key if atom == field else atom) for atom in self.ev(expr.value))
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
        elif self.tuples[known] != elements:
            self.tuples[known] = elements
            self._clock += 1
            self._changed_at[known] = self._clock
        return frozenset({f"T{known}"})

    def _comprehension(self, expr: Comprehension, element: ast.expr) -> frozenset[str]:
        subject = self._optimizers_only(expr, element)
        if subject is not None:
            # Only optimizers pass the filter; over ``vars(self)``, a field holding an object of
            # a project class derived from Optimizer passes too, whatever it keeps (``Y``).
            return _OPTIMIZER | ({"Y"} if "H" in subject else EMPTY)
        return self._elements(self.ev(element))

    def _optimizers_only(self, expr: Comprehension, element: ast.expr) -> frozenset[str] | None:
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
        if self._reads is not None:
            self._reads.add(name)
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
        if roles and name in self.params.optional and name not in self.env:
            # A parameter that defaults to None is what each call passes, or None: the optimizer
            # of the same name elsewhere in the module is not it (``save_model(model=m)`` leaves
            # ``optimizer=None``; a call that passes one binds it at the link step).
            roles = frozenset(atom for atom in roles if atom != "O")
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
            callee = self.ev(func)
            if self._final and (type(func) is ast.Call or type(func) is ast.Subscript):
                # ``self._step.get(stage)()``, ``self.hooks[name](...)``: a callable held in a
                # field, perhaps one of the object's own methods (``region_calls.py``)
                fields = sorted(atom for atom in callee if atom[0] == "F")
                if fields and id(call) not in self._escaped:
                    self._escaped.add(id(call))
                    self.dynamic.append([span(call), fields])
                named = named_method(func, self.params.index)
                if named is not None and id(call) not in self._escaped:
                    # ``getattr(callback, event)(self)``: an event dispatched by name
                    self._escaped.add(id(call))
                    self.named.append([span(call), named])
            return lower(self._arguments_union(call) | callee)
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
            callee = self.ev(func)
            if self._final and name not in self.params.index and _CHECKPOINTER.search(name):
                # ``checkpoint_saver(metric, epoch, model, optimizer)``: an object of a project
                # class called as a function, whose ``__call__`` the link step may find.
                self._project_call(call, spelled)
            return lower(self._arguments_union(call) | callee) | {a for a in callee if a[0] == "A"}
        return self._project_call(call, spelled)

    def _method_value(
        self, call: ast.Call, func: ast.Attribute, spelled: str | None, qname: str | None
    ) -> frozenset[str]:
        method = func.attr
        owner = func.value
        if qname is not None and not _is_local_object(owner, self):
            return self._library(call, qname, spelled)
        if method == "state_dict" and not call.args:
            if (
                self.class_name in self.context.plain_modules
                and type(owner) is ast.Name
                and owner.id == self.params.first
            ):
                return frozenset({"M"})  # a model's parameters and buffers, unless a subclass adds to them
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
        if method in _RETURNS_SELF:
            return receiver
        if spelled is not None and _is_project_receiver(owner, receiver, self, method):
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
            return frozenset({numbered("C", known)})
        args: list[list[Any]] = []
        star = False
        position = 0
        for arg in call.args:
            if type(arg) is ast.Starred:
                star = True
                args.append(["*", sorted(self.ev(arg.value))])
                continue
            entry: list[Any] = [position, sorted(self.ev(arg))]
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
        # A name handed over as a string (``self._run_event("on_batch_end")``): the callee may
        # dispatch on it (``getattr(callback, event)(self)``).
        names = identifier_arguments(call)
        receiver = self.ev(call.func.value) if type(call.func) is ast.Attribute else EMPTY
        # Where it lands nowhere the project shows, ``self.m()`` is a library base class's method
        # (``nn.Module.named_parameters``), which knows nothing of the object's own fields: the
        # result carries what it was given, and a scaler it was called on, not the whole object.
        receiver = frozenset(atom for atom in receiver if atom != "H")
        fallback = lower(receiver.union(*(frozenset(a[1]) for a in args)) if args else receiver)
        record: CallFlow = {"callee": spelled, "at": span(call)}
        if args:
            record["args"] = args
        if type(call.func) is ast.Attribute and not (
            type(call.func.value) is ast.Name and call.func.value.id == self.params.first
        ):
            objects = sorted(a for a in receiver if a[0] in "FCGDQZP")
            if objects:
                record["recv"] = objects  # the object the method is called on, for the link step
        called = sorted(a for a in self.ev(call.func) if a[0] in "FCGDQZ")
        if called:
            record["func"] = called  # an object called as a function (``self.clip_grad_norm(...)``)
        if star:
            record["star"] = True
        if names:
            record["names"] = names
        if fallback:
            record["fallback"] = sorted(fallback)
        self.call_records[known] = record
        return frozenset({numbered("C", known)})
