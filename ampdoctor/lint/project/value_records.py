"""What a function's flow records for the link step beside its values (the last part of
``values.py``'s walk, once the names hold their final values): its ``torch.save`` calls, the
library calls it hands a scaler or ``self``, the ``with`` items whose context another module
makes, and the scalers it trains with."""

from __future__ import annotations

import ast

from ..syntax import dotted, span
from .value_atoms import _UNKNOWN

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from typing import Any

    from ..model import AmpFacts
    from .value_atoms import _Params
    from .value_bindings import ModuleFlows, _Bindings


class FlowRecords:
    """The recording half of ``values._FunctionWalk``."""

    facts: AmpFacts
    params: _Params
    context: ModuleFlows
    bindings: _Bindings
    saves: list[list[Any]]
    escapes: list[list[Any]]
    _escaped: set[int]

    def ev(self, expr: Any) -> frozenset[str]:
        raise NotImplementedError

    def _element(self, value: frozenset[str], index: int) -> frozenset[str]:
        raise NotImplementedError

    def _roles(self, spelled: str) -> frozenset[str]:
        raise NotImplementedError

    def _held_contexts(self) -> list[list[Any]]:
        """The ``with`` items whose context the module does not show being made (``self.amp_cm``,
        ``self.engine.autocast()``, a factory's result): where each is, and its value, so that
        the link step can tell an autocast made elsewhere (``A@`` atoms), and the last line of
        the ``with`` statement (the calls made inside it, ``region_calls.py``)."""
        found = []
        for expr, last in self.bindings.withs:
            value = self.ev(expr)
            if any(atom[0] in "CDFGPQZI" for atom in value):
                found.append([span(expr), sorted(value), last])
        return found

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
        if not facts.scalers:
            return found
        for call in self.bindings.calls:
            func = call.func
            named: list[ast.expr] = []
            if type(func) is ast.Attribute and func.attr in ("scale", "step", "unscale_"):
                named.append(func.value)
            named.extend(arg for arg in call.args if type(arg) in (ast.Name, ast.Attribute))
            named.extend(k.value for k in call.keywords if type(k.value) in (ast.Name, ast.Attribute))
            for expr in named:
                spelled = dotted(expr)
                if spelled is not None and spelled in facts.scalers:
                    found.update(a for a in self.ev(expr) if a[0] in "SPFGC" or a.startswith("I"))
        return found
