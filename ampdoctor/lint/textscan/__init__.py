"""Text-level approximations of the semantic gate (lint/gate.py), without parsing.

``ast.parse`` runs at a few MB/s; a library such as torch mentions ``float16``, ``.half`` and
``autocast`` in hundreds of files that no float16 rule can fire on. The checks here look at the
bytes around each mention instead: is ``torch.float16`` an argument of ``.to(...)`` or the value
of ``dtype=``, is ``-1e9`` an argument of ``masked_fill``, is ``1e-10`` added to something, is
the mention code at all (not a comment, a docstring or the text of an f-string).

Every check is CONSERVATIVE: whenever ``gate.summarize(source)`` would record a fact, the
check says so too (a false "yes" costs a parse, a false "no" would lose findings). The local
scans answer "no" only from positive evidence built of plain code characters; a quote, a
comment, a backslash, a long distance or anything unexpected on the way answers "yes". Names
resolve through the module's import statements as the gate resolves them; identifiers are
compared after NFKC normalisation, as the parser does; text that cannot be decoded answers yes.

All checks take the module's bytes (for a notebook: its joined cell source, encoded as UTF-8,
not the JSON) and remember what they found for the last module they saw, so several checks
on the same bytes object share their work:

* ``literal_flags(data, wanted=LITERAL_FLAGS)``: a superset of the gate's literal facts
  "big-fill", "big-arith", "tiny-arith", "tiny-eps" (of those wanted).
* ``mentions_word(data, word)``: ``word`` occurs as a whole identifier, in code.
* ``references(data, names)``: a dotted name that may resolve to (or below) one of ``names``;
  ``autocast_anchor(data)`` for the autocast names.
* ``calls_method(data, name)``: ``<x>.name(`` is called; ``half_call(data)`` for ``.half(``.
* ``casts_to(data, targets)``: a target (or an import alias of one) as a positional argument of
  ``.to(...)``/``.type(...)`` or as ``dtype=``, or a tensor type target spelled in a string
  (``.type("torch.HalfTensor")``); ``float16_cast(data)`` for the float16 targets.
* ``float16_anchor(data)``: the gate's FLOAT16 anchors (autocast name, ``.half()``, cast).
* ``text_gate(anchors).keeps(data)``: all of the above for rules' anchors (``LintRule.anchors``
  each): a superset of ``gate.keeps(source, anchors)``; ``may_keep``/``may_have`` are shorthands.

Unlike the gate, these never look for syntax errors: a module the gate would keep because it
cannot parse it is kept here only if its text has anchors.

The package, in the order a check runs: ``memo.py`` (what is known about the module being
scanned), ``lexer.py`` (characters and small scanners), ``strings.py`` (comments and strings:
where a mention is provably not code), ``normalise.py`` (NFKC identifiers), ``names.py``
(words, imports, dotted names, methods and casts), ``literals.py`` (literals beyond float16's
range) and ``textgate.py`` (rules' anchors as one gate). Names with a leading underscore are
private to the package.
"""

from __future__ import annotations

from .names import (
    autocast_anchor,
    calls_method,
    casts_to,
    float16_anchor,
    float16_cast,
    half_call,
    mentions_word,
    method_casts_to,
    references,
)
from .textgate import TextGate, may_have, may_keep, text_gate

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "LITERAL_FLAGS",
    "TextGate",
    "autocast_anchor",
    "calls_method",
    "casts_to",
    "float16_anchor",
    "float16_cast",
    "half_call",
    "literal_flags",
    "may_have",
    "may_keep",
    "mentions_word",
    "method_casts_to",
    "references",
    "text_gate",
]


def __getattr__(name: str) -> Any:
    """``literal_flags`` and ``LITERAL_FLAGS``, from literals.py on first use: the text gate
    imports that module only when a rule's anchors require a literal fact, and most files are
    decided before."""
    if name in ("literal_flags", "LITERAL_FLAGS"):
        from . import literals

        return getattr(literals, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
