"""Literals beyond float16's range, on the text: a superset of the gate's literal facts
("big-fill": a value past float16's largest as an argument of a fill; "big-arith" and
"tiny-arith": such a value, or one below its smallest subnormal, in arithmetic; "tiny-eps": a
tiny ``eps=``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..vocabulary import FILL_CALLS, FLOAT16_MAX, FLOAT16_SMALLEST
from .lexer import (
    _C_PAREN,
    _COMMA,
    _DIGITS,
    _DOT,
    _EQUAL,
    _GROUP,
    _ID,
    _MINUS,
    _O_PAREN,
    _PLUS,
    _SLASH,
    _STAR,
    UNSURE,
    _at,
    _next,
    _opener,
    _operand_end,
    _OverBudget,
    _paren_kind,
    _prev,
    _spend,
)
from .memo import _memoized
from .names import _call_argument, _call_keyword
from .normalise import _normalized
from .strings import _in_code

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any

LITERAL_FLAGS = frozenset({"big-fill", "big-arith", "tiny-arith", "tiny-eps"})
# gate.py's fill calls, as bytes.
_FILL_CALLS = frozenset(name.encode() for name in FILL_CALLS)

_NUMBER = re.compile(
    rb"(?:0[xX](?:_?[0-9a-fA-F])+|0[oO](?:_?[0-7])+|0[bB](?:_?[01])+"
    rb"|(?:(?:[0-9](?:_?[0-9])*)?\.[0-9](?:_?[0-9])*|[0-9](?:_?[0-9])*\.?)(?:[eE][-+]?[0-9](?:_?[0-9])*)?)[jJ]?"
)
_TOKEN = re.compile(_NUMBER.pattern + rb"|[A-Za-z_\x80-\xff][0-9A-Za-z_\x80-\xff]*|\.")


class _Any:
    """A literal whose value is not known here: it may be anything."""

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return "ANY"


_ANY = _Any()
# A literal's value in the functions below (``float | _Any | None``): None when not a literal.


def _finite(value: float | complex) -> float | _Any | None:
    if isinstance(value, complex) or value != value or abs(value) == float("inf"):
        return None
    return value


def _number_value(text: bytes) -> float | _Any | None:
    """The value the gate gives a number token (None for complex numbers)."""
    last = text[-1]
    if last == 106 or last == 74:  # j, J: complex
        return None
    try:
        if text[:2].lower() in (b"0x", b"0o", b"0b"):
            try:
                return _finite(float(int(text, 0)))
            except OverflowError:
                return _ANY  # the gate's float() fails here; be safe
        value = float(text)
    except ValueError:
        return None  # not a valid literal: the module does not parse
    if value == _INF and b"." not in text and b"e" not in text and b"E" not in text:
        return _ANY  # an integer too large for a float: the gate's float() fails; be safe
    return _finite(value)


_INF = float("inf")


def _negate(value: float | _Any | None) -> float | _Any | None:
    return -value if isinstance(value, float) else value


def _power(base: float | _Any | None, exponent: float | _Any | None) -> float | _Any | None:
    if base is None or exponent is None:
        return None
    if isinstance(base, _Any) or isinstance(exponent, _Any):  # _ANY, the only instance
        return _ANY
    if not abs(exponent) < 1024:
        return None
    try:
        return _finite(base**exponent)
    except (OverflowError, ZeroDivisionError):
        return None


def _factor(d: bytes, i: int, depth: int = 0) -> tuple[int, float | _Any | None]:
    """Parse a literal factor (``-2``, ``(1e-3)``, ``2 ** -25``) at ``i``: (end, value)."""
    if depth > 50:
        return i, _ANY
    i = _next(d, i)
    c = _at(d, i)
    if c == _MINUS or c == _PLUS:
        end, value = _factor(d, i + 1, depth + 1)
        return end, _negate(value) if c == _MINUS else value
    if c == _O_PAREN:
        end, value = _factor(d, i + 1, depth + 1)
        j = _next(d, end)
        if _at(d, j) != _C_PAREN:
            return j, None
        end = j + 1
    else:
        m = _NUMBER.match(d, i)
        if m is None or (c not in _DIGITS and c != _DOT):
            return i, None
        end, value = m.end(), _number_value(m.group())
    j = _next(d, end)
    if d[j : j + 2] == b"**" and d[j + 2 : j + 3] != b"=":
        end, exponent = _factor(d, j + 2, depth + 1)
        return end, _power(value, exponent)
    return end, value


def _number_before(d: bytes, q: int) -> Any:
    """The number token ending at ``q``: (start, value); None if it is a name; UNSURE."""
    k = q
    while True:
        while k > 0 and (d[k - 1] in _ID or d[k - 1] == _DOT):
            k -= 1
        if k >= 3 and d[k - 1] in b"+-" and d[k - 2] in b"eE" and (d[k - 3] in _DIGITS or d[k - 3] == _DOT):
            k -= 1
            continue
        break
    i = k
    while i <= q:
        m = _TOKEN.match(d, i)
        if m is None:
            return UNSURE
        if m.end() > q:
            if m.end() != q + 1:
                return UNSURE
            text = m.group()
            if text[0] not in _DIGITS and not (text[0] == _DOT and len(text) > 1):
                return None
            return m.start(), _number_value(text)
        i = m.end()
    return UNSURE  # pragma: no cover - the loop always reaches q


_TIGHTER = frozenset(b"*/%@.([")  # binds tighter than + and - after an operand
_TIGHTER_BEFORE = frozenset(b"*/%@~.")  # ... before an operand
_POSTFIX = frozenset(b".([")  # an attribute, call or subscript of what comes before


class _Scan:
    """One pass over the literals of a module."""

    def __init__(self, d: bytes, wanted: frozenset[str]) -> None:
        self.d = d
        self.wanted = wanted
        self.found: set[str] = set()
        self.seen: set[int] = set()
        self.origin = 0  # where the literal being looked at starts

    def add(self, flag: str) -> None:
        if flag in self.wanted and flag not in self.found and _in_code(self.d, self.origin):
            self.found.add(flag)

    def done(self) -> bool:
        return self.found >= self.wanted

    def all_for(self, value: float | _Any | None) -> None:
        """In doubt about the context: every flag the value allows. (In doubt about where the
        literal expression begins, its value is unknown too: ``2 ** 30`` seen from ``30``.)"""
        big, tiny = _sizes(value)
        if big:
            self.add("big-fill")
            self.add("big-arith")
        if tiny:
            self.add("tiny-arith")
            self.add("tiny-eps")

    def candidate(self, s: int) -> None:
        """The number token starting at ``s``."""
        if s in self.seen:
            return
        d = self.d
        m = _NUMBER.match(d, s)
        if m is None:
            return
        value = _number_value(m.group())
        if value is None:
            return
        big, tiny = _sizes(value)
        if not (big or tiny):
            # It matters only as part of a power; the exponents of those are looked at anyway.
            p = _prev(d, s)
            n = _next(d, m.end())
            if d[n : n + 2] != b"**" and not (p == UNSURE or (p > 0 and d[p - 1 : p + 1] == b"**")):
                return
        self.seen.add(s)
        self.examine(s, m.end(), value)

    def examine(self, a: int, b: int, value: float | _Any | None) -> None:
        """Grow the literal expression around ``d[a:b]`` (signs, powers, parentheses) as the
        parser would, then look at what surrounds it."""
        d = self.d
        self.origin = a
        atom = True
        binary = False
        while True:
            if atom:
                n = _next(d, b)
                if d[n : n + 2] == b"**" and d[n + 2 : n + 3] != b"=":
                    b, exponent = _factor(d, n + 2)
                    value = _power(value, exponent)
                    if value is None:
                        return
                    atom = False
            p = _prev(d, a)
            if p == UNSURE:
                return self.all_for(_ANY)
            c = _at(d, p)
            if c == _PLUS or c == _MINUS:
                q = _prev(d, p)
                if q == UNSURE:
                    return self.all_for(_ANY)
                if _operand_end(d, q):
                    binary = True
                    break
                value = _negate(value) if c == _MINUS else value
                a, atom = p, False
                continue
            if c == _STAR and p > 0 and d[p - 1] == _STAR:
                # the exponent of a power: the base must be a literal too
                q = _prev(d, p - 1)
                if q == UNSURE:
                    return self.all_for(_ANY)
                cq = _at(d, q)
                if cq == _C_PAREN:
                    o = _opener(d, q)
                    if o == UNSURE or o < 0 or d[o] != _O_PAREN:
                        return self.all_for(_ANY)
                    kind = _paren_kind(d, o)
                    if kind == UNSURE:
                        return self.all_for(_ANY)
                    if kind is not _GROUP:
                        return  # ``f(x) ** 2``: not a literal
                    end, base = _factor(d, o + 1)
                    if _next(d, end) != q:
                        return
                    start = o
                elif cq in _ID or cq == _DOT:  # ``2 ** 30``, ``10. ** 5``
                    number = _number_before(d, q)
                    if number == UNSURE:
                        return self.all_for(_ANY)
                    if number is None:
                        return  # ``x ** 2``
                    start, base = number
                else:
                    return
                value = _power(base, value)
                if value is None:
                    return
                a, atom = start, False
                continue
            if c == _O_PAREN:
                n = _next(d, b)
                if _at(d, n) == _C_PAREN:
                    kind = _paren_kind(d, p)
                    if kind == UNSURE:
                        return self.all_for(_ANY)
                    if kind is _GROUP:
                        a, b, atom = p, n + 1, True
                        continue
            break
        self.context(a, b, p, c, binary, value)

    def context(self, a: int, b: int, p: int, c: int, binary: bool, value: float | _Any | None) -> None:
        big, tiny = _sizes(value)
        if not (big or tiny):
            return
        d = self.d
        n = _next(d, b)
        cn = _at(d, n)
        if binary:  # the right operand of + or -
            if cn not in _TIGHTER:
                if big:
                    self.add("big-arith")
                if tiny:
                    self.add("tiny-arith")
            return
        if c == _SLASH and tiny and (p == 0 or d[p - 1] != _SLASH):  # divided by
            if cn not in _POSTFIX:
                self.add("tiny-arith")
        if (cn == _PLUS or cn == _MINUS) and c not in _TIGHTER_BEFORE:  # the left operand of + or -
            if big:
                self.add("big-arith")
            if tiny:
                self.add("tiny-arith")
        if big and c == _EQUAL and "big-fill" in self.wanted and p > 0 and d[p - 1] not in _NOT_ASSIGN:
            q = _prev(d, p)
            if q == UNSURE or _at(d, q) == 93:  # "]": ``x[i] = -1e10``, an index assignment
                self.add("big-fill")
        if cn != _COMMA and cn != _C_PAREN:
            return
        if big and "big-fill" in self.wanted and "big-fill" not in self.found:
            if c == _EQUAL:
                where = _call_keyword(d, p, None, _FILL_CALLS)
            else:
                where = _call_argument(d, p, _FILL_CALLS)
            if where:
                self.add("big-fill")
        if tiny and c == _EQUAL and "tiny-eps" in self.wanted and "tiny-eps" not in self.found:
            if _call_keyword(d, p, (b"eps",)):
                self.add("tiny-eps")


# Characters before ``=`` that make it a comparison or an augmented assignment.
_NOT_ASSIGN = frozenset(b"=!<>+-*/%&|^@:")


def _sizes(value: float | _Any | None) -> tuple[bool, bool]:
    if value is None:
        return False, False
    if isinstance(value, _Any):  # _ANY, the only instance
        return True, True
    magnitude = abs(value)
    return magnitude > FLOAT16_MAX, 0 < magnitude < FLOAT16_SMALLEST


# Where number tokens that may matter start, found with bytes.find on a translated copy:
# digits become "0", "_" "u", e/E "e", x/X/o/O/b/B "x", other identifier characters "a".
_SHAPE = bytes(
    48
    if chr(c) in "0123456789"
    else 117
    if c == 95
    else 101
    if chr(c) in "eE"
    else 120
    if chr(c) in "xXoObB"
    else 97
    if c in _ID
    else c
    if chr(c) in ".*"
    else 32
    for c in range(256)
)
_SHAPES = re.compile(
    rb"0(?:0000"  # five digits: above 65504, or a long fraction (0.00000001)
    rb"|u0"  # 1_000_000
    rb"|\.?e"  # an exponent: 1e9, 1.e9
    rb"|x)"  # hexadecimal, octal, binary
)  # (a regular expression that starts with one literal character is fast)


def literal_flags(data: bytes, wanted: Iterable[str] = LITERAL_FLAGS) -> frozenset[str]:
    """A superset of the gate's literal facts (of those in ``wanted``) for the module."""
    want = frozenset(wanted) & LITERAL_FLAGS
    if not want:
        return frozenset()
    memo: dict[frozenset[str], frozenset[str]] = _memoized("literals", lambda _: {}, data)
    if LITERAL_FLAGS in memo:
        return memo[LITERAL_FLAGS] & want
    if want not in memo:
        memo[want] = _literal_flags_any(data, want)
    return memo[want]


def _literal_flags_any(data: bytes, want: frozenset[str]) -> frozenset[str]:
    try:
        found = _literal_flags(data, want)
    except _OverBudget:
        return want
    if found >= want or data.isascii():
        return frozenset(found)
    view = _normalized(data)  # ``ｅｐｓ=1e-9`` is ``eps=1e-9``
    if view is None:
        return want
    if view is not data:
        found |= _literal_flags(view, want - found)
    return frozenset(found)


def _literal_flags(d: bytes, want: frozenset[str]) -> set[str]:
    scan = _Scan(d, want)
    shaped = d.translate(_SHAPE)
    after = 0
    for m in _SHAPES.finditer(shaped):
        i = m.start()
        if i < after:
            continue  # inside the number just looked at
        start = _token_start(d, shaped, i)
        if start is not None:
            _spend(d)
            scan.candidate(start)
            if scan.done():
                return scan.found
            number = _NUMBER.match(d, start)
            after = number.end() if number is not None else i
    i = d.find(b"**")
    while i >= 0:
        # a power: start from the first number of its exponent (``2 ** -(25)``)
        j = _next(d, i + 2)
        while _at(d, j) in (_PLUS, _MINUS, _O_PAREN):
            j = _next(d, j + 1)
        if _at(d, j) in _DIGITS or (_at(d, j) == _DOT and _at(d, j + 1) in _DIGITS):
            start = _token_start(d, shaped, j)
            if start is not None and start not in scan.seen:
                scan.seen.add(start)
                literal = _NUMBER.match(d, start)
                if literal is not None:
                    scan.examine(start, literal.end(), _number_value(literal.group()))
                    if scan.done():
                        return scan.found
        i = d.find(b"**", i + 2)
    return scan.found


def _token_start(d: bytes, shaped: bytes, i: int) -> int | None:
    """The start of the number token covering ``d[i]``; None if it is part of a name."""
    k = i
    while True:
        while k > 0 and shaped[k - 1] in b"0uexa.":
            k -= 1
        if k >= 3 and d[k - 1] in b"+-" and d[k - 2] in b"eE" and (d[k - 3] in _DIGITS or d[k - 3] == _DOT):
            k -= 1
            continue
        break
    while k <= i:
        m = _TOKEN.match(d, k)
        if m is None:
            return None
        if m.end() > i:
            first = d[m.start()]
            if first in _DIGITS or (first == _DOT and m.end() - m.start() > 1):
                return m.start()
            return None
        k = m.end()
    return None
