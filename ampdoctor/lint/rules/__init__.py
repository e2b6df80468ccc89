"""Lint rules: small classes that query AmpFacts and yield Reports.

A rule declares its code (its name, severity and docs come from ``rules/<code>.md``) and the
text tokens a file must contain for the rule to possibly fire (and optionally a pattern it must
also match); the engine skips parsing files that no selected rule could fire on. ``check``
yields ``Report`` objects that point at ``ast`` nodes; the engine turns them into Findings
with positions and text edits.

Adding a rule: a class in a family module of this package (listed in ``FAMILIES``), decorated
with ``@register``, plus its page in ``rules/``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from ...findings import Applicability
from ...records import Record, Value
from ..facts import AUTOCAST_NAMES, FLOAT16_CASTS, GRAD_SCALER_NAMES, AmpFacts
from ..gate import Anchors


class NodeEdit(Value):
    """A text edit expressed against nodes; positions are resolved later.

    kind: ``replace`` (node's span ← text), ``insert_before`` / ``insert_after`` (at the
    node's start / end), ``line_before`` / ``line_after`` (a new line with the statement's
    indentation before its first / after its last line), ``replace_span`` (from ``node``'s
    start to ``end_node``'s end ← text), ``replace_range`` (``span`` ← text, no node).
    span: for ``replace_range``, (line, column, end line, end column), 1-based, in characters.
    """

    __slots__ = ("kind", "node", "text", "end_node", "span")

    def __init__(
        self,
        kind: str,
        node: ast.AST | None = None,
        text: str = "",
        end_node: ast.AST | None = None,
        span: tuple[int, int, int, int] | None = None,
    ) -> None:
        self._set(kind, node, text, end_node, span)


class FixPlan(Value):
    __slots__ = ("description", "edits", "applicability")

    def __init__(
        self, description: str, edits: tuple[NodeEdit, ...], applicability: Applicability = Applicability.SAFE
    ) -> None:
        self._set(description, edits, applicability)


class Report(Record):
    __slots__ = ("code", "node", "message", "help", "fix", "statement", "extra")

    def __init__(
        self,
        code: str,
        node: ast.AST,
        message: str = "",
        help: str | None = None,
        fix: FixPlan | None = None,
        statement: ast.AST | None = None,
        extra: dict | None = None,
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
AUTOCAST = Anchors(names=tuple(AUTOCAST_NAMES))
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
    if cls.code in _REGISTRY:
        raise ValueError(f"duplicate rule {cls.code}")
    _REGISTRY[cls.code] = cls()
    return cls


# The family modules of this package (a test checks that the list names every one of them).
FAMILIES = ("api", "autocast", "migration", "numerics", "protocol", "regions", "scaler")


def lint_rules() -> dict[str, LintRule]:
    """Every static rule, by code (importing the family modules registers them); do not mutate."""
    global _SORTED
    if _SORTED is None:
        import importlib

        for name in FAMILIES:
            importlib.import_module(f"{__name__}.{name}")
        _SORTED = dict(sorted(_REGISTRY.items()))
    return _SORTED
