"""The sizes of ``nn.Linear(...)`` calls, where the code spells them: an int literal, or a name
the module binds once to one (``N_CLASSES = 10``). The float8 rules that judge a converted
layer's sizes read them here (AMP602, AMP609)."""

from __future__ import annotations

import ast

from ..model import AmpFacts, CallSite


def int_constants(facts: AmpFacts) -> dict[str, int]:
    """Module-level names bound once, to an int literal."""
    return {
        name: value.value
        for name, value in facts.bound_once_at_module().items()
        if type(value) is ast.Constant and type(value.value) is int
    }


def _literal_size(expr: ast.expr | None, constants: dict[str, int]) -> int | None:
    if type(expr) is ast.Constant and type(expr.value) is int and not isinstance(expr.value, bool):
        return expr.value
    if type(expr) is ast.Name:
        return constants.get(expr.id)
    return None


def linear_sizes(linear: CallSite, constants: dict[str, int]) -> tuple[int | None, int | None]:
    """An ``nn.Linear(...)`` call's (in_features, out_features), each where it is a literal or a
    module-level constant (``int_constants``), else None."""
    found = []
    for position, keyword in ((0, "in_features"), (1, "out_features")):
        arg = linear.arg(position, keyword)
        found.append(_literal_size(arg.value if arg is not None else None, constants))
    return found[0], found[1]
