"""``Anchors``: what a module must reference for a rule to be able to fire, as each rule declares
it (``LintRule.anchors``). gate.py evaluates anchors exactly on a parsed module; the text gate
(textscan) checks a superset of them on the bytes before any parse.
"""

from __future__ import annotations

from ..records import Value


class Anchors(Value):
    """What a module must reference for a rule to be able to fire (either kind suffices).

    * ``names``: qualified names or prefixes, matched at dot boundaries.
    * ``methods``: method names called anywhere (``x.scale(...)``); ``"half()"`` means called
      without arguments.
    * ``casts``: qualified names used as a cast target: ``.to(X)``, ``.type(X)`` or ``dtype=X``
      in a call; a string argument of ``.type(...)`` counts as the name it spells
      (``.type("torch.HalfTensor")``).
    * ``method_casts``: the same, but only as the target of ``.to(...)`` / ``.type(...)``
      (positional or dtype=): a tensor converted, not one created with a dtype.
    * ``requires``: facts about literals that must *also* hold: "big-fill" (a number beyond
      float16's 65504 as a fill value or clamp bound), "big-arith" (added or subtracted),
      "tiny-arith" (a number below float16's smallest subnormal, 2**-24, added, subtracted or
      divided by), "tiny-eps" (passed as ``eps=``).
    * ``requires_methods``: methods that must *also* be called somewhere (all of them).
    * ``requires_names``: names (or prefixes) that must *also* be referenced (all of them).
    """

    __slots__ = ("names", "methods", "casts", "method_casts", "requires", "requires_methods", "requires_names")
    names: tuple[str, ...]
    methods: tuple[str, ...]
    casts: tuple[str, ...]
    method_casts: tuple[str, ...]
    requires: tuple[str, ...]
    requires_methods: tuple[str, ...]
    requires_names: tuple[str, ...]

    def __init__(
        self,
        names: tuple[str, ...] = (),
        methods: tuple[str, ...] = (),
        casts: tuple[str, ...] = (),
        method_casts: tuple[str, ...] = (),
        requires: tuple[str, ...] = (),
        requires_methods: tuple[str, ...] = (),
        requires_names: tuple[str, ...] = (),
    ) -> None:
        self._set(names, methods, casts, method_casts, requires, requires_methods, requires_names)
