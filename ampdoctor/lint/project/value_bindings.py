"""Where each name of a function is bound, and to what (the first half of ``values.py``).

One pass over the nodes of a function that bind, return, call or enter a context (kept for it by
the fact model's walk, ``AmpFacts.flow_nodes``: nested functions included, as a closure shares the
names of the function around it; nested classes left out) records, before any value is computed:

* each local name's bindings, with how the value reaches it: plainly (``x = v``), as an element
  of an iterable (``for x in v``), as element ``i`` of a tuple (``a, b = v``), as a mutation that
  adds to a container (``d[k] = v``, ``d.update(v)``, ``lst.append(v)``), as what an object now
  holds (``obj.field = v``), or as an object of an annotated class (``task: BaseTask = ...``);
* its returns and yields, its calls, the ``with`` items it enters;
* its stores into ``self`` fields, other objects' fields and ``global`` names.

``ModuleFlows`` is what the walks of one module's functions share (its scaler constructions,
record classes, module-level names) and where their values are kept.

A call handed a scaler beside a container of the function's own may put the scaler's state into
it (``add_scaler_state(ckpt, scaler)``): the container is bound to the scaler's taint too.

The walks dispatch on ``type(node) is ...``, cheaper than a chain of ``isinstance`` in a pass
over every function of a project; the node being dispatched is typed ``Any`` there, as type
checkers do not narrow on ``type(x) is``.
"""

from __future__ import annotations

import ast

from ..model import AmpFacts
from ..syntax import dotted
from .fields import field_key
from .value_atoms import (
    _MUTATORS,
    _annotated_class,
    _holds_containers,
    _Params,
    _root_name,
    _scaler_constructions,
    plain_module,
    record_class,
)

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from typing import Any

    from .value_atoms import FunctionFlow


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
        self.records = {node.name for node, _bases in facts.classes if record_class(facts, node)}
        # ``torch.nn.Module`` subclasses that keep the module's own ``state_dict``: what
        # ``self.state_dict()`` returns there is the parameters and buffers, never a scaler's
        # state held in a plain field.
        self.plain_modules = {node.name for node, _bases in facts.classes if plain_module(facts, node)}
        # Functions and classes defined at module level: a name of one is code, not state.
        self.defined = {
            stmt.name
            for stmt in facts.module.body
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        }
        self.flows: dict[str, FunctionFlow] = {}


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
        self.withs: list[tuple[ast.expr, int]] = []  # (item, the ``with`` statement's last line)


class BindingWalk:
    """What fills a function's ``_Bindings`` (the evaluation in ``values.py`` builds on it)."""

    bindings: _Bindings
    params: _Params
    is_module: bool
    facts: AmpFacts
    context: ModuleFlows

    def _collect(self, nodes: list[Any]) -> None:
        """Record bindings, returns, stores and calls of a function (nested functions included: a
        closure shares the names of the function around it; nested classes are left out) from
        the nodes the fact model's walk kept for it (``AmpFacts.flow_nodes``), in source order.
        (Walking each function's body again for them took a quarter of the flows' time.)"""
        b = self.bindings
        for node in nodes:
            kind = type(node)
            if kind is ast.Call:
                b.calls.append(node)
                self._mutation(node)
            elif kind is ast.Assign:
                for target in node.targets:
                    self._bind_target(target, "=", None, node.value)
            elif kind is ast.AnnAssign:
                if node.value is not None:
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
                    b.withs.append((item.context_expr, node.end_lineno or node.lineno))
                    if item.optional_vars is not None:
                        self._bind_target(item.optional_vars, "=", None, item.context_expr)
            elif kind is ast.Return:
                if node.value is not None and not self.is_module:
                    b.returns.append(node.value)
            elif kind is ast.Yield or kind is ast.YieldFrom:
                if node.value is not None:
                    b.returns.append(node.value)
            elif kind is ast.Global:
                b.declared_global.update(node.names)
            elif kind is ast.NamedExpr:
                self._bind_target(node.target, "=", None, node.value)
            elif kind is ast.comprehension:
                self._bind_target(node.target, "in", None, node.iter)

    def _bind_target(self, target: Any, kind: str, detail: object, value: Any) -> None:
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
            self._bind_attribute(target, kind, detail, value)
        elif tkind is ast.Subscript:
            key = field_key(target, self.params.first)
            if key is not None:
                # ``self.env["optimizers"] = ...``: the field under that key (``flow.field``).
                self.bindings.stores.append((key, kind, detail, value))
            else:
                self._bind_into(target.value, kind, detail, value)
        elif tkind is ast.Starred:
            self._bind_target(target.value, kind, detail, value)

    def _bind_attribute(self, target: ast.Attribute, kind: str, detail: object, value: ast.expr) -> None:
        """``self.x = value`` is a field of the function's own object; ``obj.x = value`` a store
        into another object, which its root name now holds."""
        b = self.bindings
        owner = target.value
        if type(owner) is ast.Name and owner.id == self.params.first:
            b.stores.append((target.attr, kind, detail, value))
        else:
            b.xstores.append((target.attr, dotted(owner), value))
            root = _root_name(owner)
            if root is not None:
                b.names.setdefault(root, []).append(("holds-" + kind, detail, value))

    def _bind_into(self, container: Any, kind: str, detail: object, value: ast.expr) -> None:
        """``container[k] = value`` / ``container.update(value)``: the container now holds it."""
        b = self.bindings
        if type(container) is ast.Name:
            name = container.id
            if name in b.declared_global and not self.is_module:
                b.globals.append((name, kind, detail, value))
            else:
                b.names.setdefault(name, []).append((kind, detail, value))
        elif type(container) is ast.Attribute:
            self._bind_attribute(container, kind, detail, value)
        elif type(container) is ast.Subscript:
            self._bind_into(container.value, kind, detail, value)

    def _handovers(self) -> None:
        """A call handed a scaler beside a mapping, a list or a record object of the function's
        own may put the scaler's state into it (``add_scaler_state(ckpt, scaler)``): the
        container takes the scaler's taint."""
        scalers = self.facts.scalers
        if not scalers:
            return  # no scaler named in the module: nothing to hand over
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
