"""The text gate: rules' anchors (``LintRule.anchors`` each) checked on a module's bytes,
a superset of ``gate.keeps(source, anchors)``. The literal scan, the dearest check, runs last
and is imported only when an anchor requires a literal fact.
"""

from __future__ import annotations

from .names import _as_bytes, _check

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..anchors import Anchors

    # One rule's anchors (``LintRule.anchors``): one set, alternatives, or None (always kept).
    _RuleAnchors = Anchors | tuple[Anchors, ...] | None


def may_have(data: bytes, anchors: Anchors) -> bool:
    """A superset of ``gate.summarize(source).has_any(anchors)`` for a ``gate.Anchors``."""
    return text_gate((anchors,)).keeps(data)


def may_keep(data: bytes, anchors: Iterable[_RuleAnchors]) -> bool:
    """A superset of ``gate.keeps(source, anchors)``: False only when no rule's anchors can
    hold. (Where the gate keeps a module it cannot parse, this looks at the text alone: a
    syntax error in a module without any anchor is not looked for.)"""
    return text_gate(tuple(anchors)).keeps(data)


class _Alternative:
    """One ``gate.Anchors`` as checks: any of ``anchors`` (if there are any), then all of
    ``required``, then the literal facts."""

    def __init__(self, anchors: Anchors) -> None:
        self.anchors = (
            [_check("method", m) for m in _as_bytes(anchors.methods)]
            + ([_check("casts", frozenset(_as_bytes(anchors.casts)))] if anchors.casts else [])
            + ([_check("method_casts", frozenset(_as_bytes(anchors.method_casts)))] if anchors.method_casts else [])
            + ([_check("names", _as_bytes(anchors.names))] if anchors.names else [])
        )
        self.required = [_check("method", m) for m in _as_bytes(anchors.requires_methods)] + [
            _check("names", (n,)) for n in _as_bytes(anchors.requires_names)
        ]
        self.literals = frozenset(anchors.requires)

    def holds(self, data: bytes) -> bool:
        # The anchors first (rules share them, and each check is made once per module), then
        # what this alternative also requires; the literal scan, the dearest, last.
        if self.anchors and not any(check(data) for check in self.anchors):
            return False
        if not all(check(data) for check in self.required):
            return False
        if not self.literals:
            return True
        from .literals import literal_flags

        return literal_flags(data) >= self.literals


class TextGate:
    """The text-level gate for a set of rules' anchors (``LintRule.anchors`` each): build it
    once, then ``keeps(data)`` for each module: a superset of ``gate.keeps(source, anchors)``."""

    def __init__(self, anchors: Iterable[_RuleAnchors]) -> None:
        anchors = tuple(anchors)
        self.always = not anchors or any(a is None for a in anchors)
        alternatives = []
        for a in anchors:
            for alt in a if isinstance(a, tuple) else (a,):
                if alt is not None and alt not in alternatives:
                    alternatives.append(alt)
        self.alternatives = [_Alternative(alt) for alt in alternatives]

    def keeps(self, data: bytes) -> bool:
        if self.always:
            return True
        for alternative in self.alternatives:
            if alternative.holds(data):
                return True
        return False


_GATES: dict[tuple[_RuleAnchors, ...], TextGate] = {}


def text_gate(anchors: Iterable[_RuleAnchors]) -> TextGate:
    """The ``TextGate`` for these anchors (made once and remembered)."""
    anchors = tuple(anchors)
    gate = _GATES.get(anchors)
    if gate is None:
        if len(_GATES) > 64:
            _GATES.clear()
        gate = _GATES[anchors] = TextGate(anchors)
    return gate
