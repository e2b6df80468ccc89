"""Lint rules: small classes that query AmpFacts and yield Reports.

A rule declares its code (its name, severity and docs come from ``rules/<code>.md``) and the
text tokens a file must contain for the rule to possibly fire (and optionally a pattern it must
also match); the engine skips parsing files that no selected rule could fire on. ``check``
yields ``Report`` objects that point at ``ast`` nodes; the engine turns them into Findings
with positions and text edits.

A rule goes in the family module of what it checks: AMP205 (a scaler built anew inside the
training loop) is in ``scaler_use.py``, beside the other rules about what goes through the
GradScaler; ``ampdoctor rule CODE`` names the modules that implement a code. ``region_walker.py``
and ``scaler_queries.py`` hold helpers that several families share, and no rule.

Adding a rule: its page in ``rules/``, its row in ``ampdoctor/codes.py`` naming the family module
of what it checks (a new concern gets a new module, named for it), and there a class decorated
with ``@register`` (which refuses a module the row does not name).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from ...codes import check_registration, modules_under
from ...findings import Fix
from ...records import Record
from ..anchors import Anchors
from ..fixes import FixPlan, NodeEdit
from ..model import AmpFacts
from ..vocabulary import AUTOCAST_NAMES, FLOAT16_CASTS, GRAD_SCALER_NAMES

__all__ = [
    "AUTOCAST",
    "FLOAT16",
    "SCALED_BACKWARD",
    "SCALER",
    "FixPlan",
    "LintRule",
    "NodeEdit",
    "Report",
    "lint_rules",
    "register",
]


class Report(Record):
    __slots__ = ("code", "node", "message", "help", "fix", "statement", "extra")

    def __init__(
        self,
        code: str,
        node: ast.AST,
        message: str = "",
        help: str | None = None,
        fix: FixPlan | Fix | None = None,
        statement: ast.AST | None = None,
        extra: dict[str, object] | None = None,
    ) -> None:
        self.code = code
        self.node = node
        self.message = message
        self.help = help
        self.fix = fix
        # The statement whose first line also accepts a noqa comment for this report.
        self.statement = statement
        self.extra = {} if extra is None else extra


class LintRule:
    code: str  # set by every rule class
    # The file must contain one of these substrings for the rule to be able to fire...
    tokens: tuple[str, ...] = ()
    # ...and also match every one of these regular expressions (on the file's bytes).
    needs: tuple[bytes, ...] = ()
    # What the module must reference (see gate.py): one set of anchors, a tuple of
    # alternatives, or None for no such condition.
    anchors: Anchors | tuple[Anchors, ...] | None = None

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        raise NotImplementedError


# Anchors shared by the rule families.
AUTOCAST = Anchors(names=tuple(AUTOCAST_NAMES), methods=("autocast",))  # ``accelerator.autocast()`` too
SCALED_BACKWARD = Anchors(methods=("scale",))
SCALER = Anchors(names=tuple(GRAD_SCALER_NAMES), methods=("scale",))
# float16 autocast, ``.half()``, or a cast / ``dtype=`` to float16 (a dtype table is not a use).
FLOAT16 = Anchors(
    names=tuple(AUTOCAST_NAMES),
    methods=("half",),
    casts=FLOAT16_CASTS,
)

_REGISTRY: dict[str, LintRule] = {}
_SORTED: dict[str, LintRule] | None = None  # built once: asked for on every file


def register(cls: type[LintRule]) -> type[LintRule]:
    check_registration(cls.code, cls.__module__, "lint.rules.")
    if cls.code in _REGISTRY:
        raise ValueError(f"duplicate rule {cls.code}")
    _REGISTRY[cls.code] = cls()
    return cls


# The family modules of this package, the ones that hold rules: those ``codes.py`` names (a test
# checks that every other module of the package holds none).
FAMILIES = tuple(module.rsplit(".", 1)[1] for module in modules_under("lint.rules."))


def lint_rules() -> dict[str, LintRule]:
    """Every static rule, by code (importing the family modules registers them); do not mutate."""
    global _SORTED
    if _SORTED is None:
        import importlib

        for name in FAMILIES:
            importlib.import_module(f"{__name__}.{name}")
        _SORTED = dict(sorted(_REGISTRY.items()))
    return _SORTED
