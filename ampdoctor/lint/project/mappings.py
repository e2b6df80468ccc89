"""Checkpoint mappings in a module's code: the dict a ``torch.save`` (or a save helper's
argument) writes, whether the frame builds it in one piece, and what it holds (an optimizer's
state, a scaler, state built elsewhere). Shared by the module summary's functions and calls.
"""

from __future__ import annotations

import ast
import re

from ..model import AmpFacts, Assignment, Frame
from ..passes import is_optimizer
from ..syntax import call_args, dotted, iter_nodes

_SCALER_TEXT = re.compile(r"scaler", re.IGNORECASE)

# Saved values that are plain bookkeeping, never a container of training state.
_SCALAR_NAME = re.compile(
    r"(^|_)(epoch|epochs|step|steps|iter|iters|iteration|global_step|loss|best\w*|acc\w*|metric\w*|score|lr|"
    r"args|config|cfg|hparams|path|name|arch|version|seed)$",
    re.IGNORECASE,
)


class AssignmentIndex:
    """Assignments by (frame, target), in order: the summary's questions about one name must
    not scan the whole module each time (a generated module has a hundred thousand of them)."""

    def __init__(self, facts: AmpFacts) -> None:
        self.by_target: dict[tuple[int, str], list] = {}
        self.scalers_made: dict[str, Assignment] = {}
        self.module_scaler: ast.AST | None = None
        # (frame, target) pairs bound to a dict literal somewhere: only those can name a mapping.
        self.mappings: set[tuple[int, str]] = set()
        dict_type, call_type = ast.Dict, ast.Call
        for assignment in facts.assignments:
            key = (id(assignment.frame), assignment.target)
            self.by_target.setdefault(key, []).append(assignment)
            value = assignment.value
            kind = type(value)
            # ``is_mapping_literal`` called only for calls: a module may hold a hundred thousand.
            if kind is dict_type or (kind is call_type and is_mapping_literal(value)):
                self.mappings.add(key)
            if assignment.target in facts.scalers:
                self.scalers_made.setdefault(assignment.target, assignment)
                if assignment.frame.parent is None and self.module_scaler is None:
                    self.module_scaler = assignment.value

    def of(self, frame: Frame, target: str) -> list:
        return self.by_target.get((id(frame), target), [])

    def may_name_mapping(self, frame: Frame, name: str) -> bool:
        """False when ``mapping_of`` is certainly None for ``name`` in ``frame``."""
        return (id(frame), name) in self.mappings


def mapping_of(
    facts: AmpFacts, frame: Frame, expr: ast.expr, order: int, index: AssignmentIndex | None = None
) -> ast.expr | None:
    """The dict literal (or ``dict(...)`` call) that ``expr`` is or names, when the frame builds
    it in one piece before ``order`` and completes it nowhere else; otherwise None."""
    if is_mapping_literal(expr):
        return expr
    name = dotted(expr)
    if name is None:
        return None
    candidates = (
        index.of(frame, name)
        if index is not None
        else [a for a in facts.assignments if a.frame is frame and a.target == name]
    )
    earlier = [a for a in candidates if a.order < order]
    if len(earlier) != 1 or not is_mapping_literal(earlier[0].value):
        return None
    built = earlier[0].order
    for site in frame.calls:
        if built < site.order < order and (
            site.receiver == name or any(dotted(a.value) == name for a in call_args(site.node))
        ):
            return None  # completed elsewhere: ``state.update(...)``, ``add_extra(state)``
    if any(where is frame and target == name for target, _node, where in facts.item_assignments):
        return None
    return earlier[0].value


def is_mapping_literal(expr: ast.expr) -> bool:
    """A dict display or a ``dict(...)`` call (the name ``dict`` alone: ``dotted`` gives "dict")."""
    if isinstance(expr, ast.Dict):
        return True
    if not isinstance(expr, ast.Call):
        return False
    func = expr.func
    return type(func) is ast.Name and func.id == "dict"


def state_of(facts: AmpFacts, mapping: ast.expr, params: list[str] | None = None) -> dict:
    """What a checkpoint mapping holds: ``optim`` (an optimizer's ``state_dict()``), ``scaler``
    (anything that mentions a scaler), ``opaque`` (a ``**spread``, or a value that may carry
    state built elsewhere: a parameter or a name that is not plain bookkeeping)."""
    text = facts.text(mapping)
    optim = False
    opaque = False
    for node in iter_nodes(mapping):
        if isinstance(node, ast.Dict):
            if any(key is None for key in node.keys):
                opaque = True
            for value in node.values:
                opaque = opaque or _may_carry_state(value, params)
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "state_dict":
                receiver = dotted(func.value)
                if is_optimizer(receiver, facts) or "optim" in (receiver or "").lower():
                    optim = True
            if dotted(func) == "dict":
                if any(a.star for a in call_args(node)):
                    opaque = True
                opaque = opaque or any(_may_carry_state(k.value, params) for k in node.keywords if k.arg)
    return {"optim": optim, "scaler": bool(_SCALER_TEXT.search(text)), "opaque": opaque}


def _may_carry_state(value: ast.expr, params: list[str] | None) -> bool:
    """A bare name or attribute as a saved value: a container built elsewhere, unless its name
    says it is bookkeeping (``epoch``, ``best_acc``, ``args``)."""
    if type(value) not in (ast.Name, ast.Attribute):
        return False
    last = (dotted(value) or "").rsplit(".", 1)[-1]
    return not _SCALAR_NAME.search(last)
