"""Characters and small scanners over a module's bytes: brackets outside strings and
comments on one line, the code character before or after a position, the call a parenthesis
opens, and the per-module budgets past which every answer is "keep the file".
"""

from __future__ import annotations

import keyword
import re

from .memo import _memo

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

UNSURE = -2  # a scanner's "cannot tell" (positions are >= -1)
# Mentions and literals examined per module before giving up and keeping it: each costs some
# microseconds in Python, so a dense table of ``torch.float16`` would cost more than a parse.
_MENTION_BUDGET = 20000
# Bytes ``_lex`` may look at per module: a few passes over the file, plus a floor for small ones.
_LEX_BUDGET_FACTOR = 4
_LEX_BUDGET_BASE = 1 << 20

_ID = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") | frozenset(range(128, 256))
_DIGITS = frozenset(b"0123456789")
_HSPACE = frozenset(b" \t\f\r\v")
_OPERAND_END = frozenset(b")]}'\".")  # "." ends a float (``1.``) or ``...`` here
_KEYWORDS = frozenset(k.encode() for k in keyword.kwlist) - {b"True", b"False", b"None"}
_LEX = re.compile(rb"[][(){}'\"#\\]")

_O_PAREN, _C_PAREN, _COMMA, _EQUAL, _DOT, _HASH, _BACKSLASH, _NL = b"(),=.#\\\n"
_PLUS, _MINUS, _STAR, _SLASH = b"+-*/"


def _at(d: bytes, i: int) -> int:
    return d[i] if 0 <= i < len(d) else -1


def _continued(d: bytes, start: int) -> bool:
    """Whether the line before the one starting at ``start`` ends with a backslash."""
    j = start - 2  # start - 1 is the newline
    if j >= 0 and d[j] == 13:
        j -= 1
    return j >= 0 and d[j] == _BACKSLASH


def _lex(d: bytes, start: int, end: int) -> Any:
    """Brackets outside strings and comments in ``d[start:end]`` (a piece of one line that
    begins in code), and where its comment starts (``end`` if none); UNSURE when in doubt:
    triple quotes, f-strings, backslashes, a line continued from a string, or when the module's
    lexing budget is spent (many mentions on very long lines would otherwise cost quadratic
    time; past the budget every answer is "keep the file", which is always safe)."""
    memo = _memo(d)
    spent = memo.get("lexed", 0) + (end - start)
    memo["lexed"] = spent
    if spent > _LEX_BUDGET_FACTOR * len(d) + _LEX_BUDGET_BASE:
        return UNSURE
    out: list[int] = []
    quote = 0
    checked = False
    for m in _LEX.finditer(d, start, end):
        i = m.start()
        c = d[i]
        if quote:
            if c == quote:
                quote = 0
            elif c == _BACKSLASH:
                return UNSURE
            continue
        if c == 34 or c == 39:
            if not checked:
                if _continued(d, start):
                    return UNSURE
                checked = True
            if d[i + 1 : i + 2] == d[i : i + 1] and d[i + 2 : i + 3] == d[i : i + 1]:
                return UNSURE  # a triple-quoted string may span lines
            j = i
            while j > start and d[j - 1] in _ID:
                j -= 1
            if b"f" in d[j:i].lower():
                return UNSURE  # an f-string holds code
            quote = c
            continue
        if c == _HASH:
            return out, i
        if c == _BACKSLASH:
            return UNSURE
        out.append(i)
    if quote:
        return UNSURE
    return out, end


def _prev(d: bytes, i: int) -> int:
    """Index of the last significant character before ``i`` (blanks, line breaks, comments
    and continuation backslashes skipped); -1 at the start of the file; UNSURE."""
    j = i - 1
    while j >= 0:
        c = d[j]
        if c in _HSPACE:
            j -= 1
            continue
        if c != _NL:
            return UNSURE if c == _BACKSLASH else j
        start = d.rfind(b"\n", 0, j) + 1
        code_end = j
        hash_at = d.find(b"#", start, j)
        if hash_at >= 0:
            if d.find(b'"', start, j) < 0 and d.find(b"'", start, j) < 0:
                code_end = hash_at  # no string on the line: the comment starts at the first '#'
            else:
                lexed = _lex(d, start, j)
                if lexed == UNSURE:
                    return UNSURE
                code_end = lexed[1]
        k = code_end - 1
        while k >= start and d[k] in _HSPACE:
            k -= 1
        if k >= start and d[k] == _BACKSLASH:  # an explicit continuation
            j = k - 1
            continue
        if k >= start:
            return k
        j = start - 1
    return -1


def _next(d: bytes, i: int) -> int:
    """Index of the first significant character at or after ``i`` (``len(d)`` at the end)."""
    n = len(d)
    while i < n:
        c = d[i]
        if c in _HSPACE or c == _NL:
            i += 1
        elif c == _HASH:
            k = d.find(b"\n", i)
            if k < 0:
                return n
            i = k + 1
        elif c == _BACKSLASH and d[i + 1 : i + 2] in (b"\n", b"\r"):
            i += 2
        else:
            return i
    return n


def _ident_start(d: bytes, j: int) -> int:
    """Start of the identifier (or number) whose last character is at ``j``."""
    while j > 0 and d[j - 1] in _ID:
        j -= 1
    return j


def _operand_end(d: bytes, j: int) -> bool:
    """Whether the character at ``j`` ends an operand (a name, number, string or bracket)."""
    if j < 0:
        return False
    c = d[j]
    if c in _OPERAND_END:
        return True
    if c in _ID:
        word = d[_ident_start(d, j) : j + 1]
        return word[0] in _DIGITS or word not in _KEYWORDS
    return False


def _opener(d: bytes, i: int, limit: int = 20000) -> int:
    """The unmatched opening bracket before ``i``: its index, -1 if there is none, UNSURE."""
    depth = 0
    end = i
    while True:
        start = d.rfind(b"\n", 0, end) + 1
        if i - start > limit:
            return UNSURE  # never lex more than ``limit`` bytes back (a very long line)
        lexed = _lex(d, start, end)
        if lexed == UNSURE:
            return UNSURE
        pos: int
        for pos in reversed(lexed[0]):
            if d[pos] in b")]}":
                depth += 1
            elif depth == 0:
                return pos
            else:
                depth -= 1
        if start == 0:
            return -1
        if i - start > limit:
            return UNSURE
        end = start - 1


_GROUP = ("group",)


def _paren_kind(d: bytes, o: int) -> Any:
    """What the ``(`` at ``o`` opens: ``_GROUP`` (parentheses or a tuple), ``("call", name,
    is_method, is_definition)`` (name None for a call of a call or subscript), or UNSURE."""
    j = _prev(d, o)
    if j == UNSURE:
        return UNSURE
    if j < 0:
        return _GROUP
    c = d[j]
    if c in _ID:
        k = _ident_start(d, j)
        word = d[k : j + 1]
        if word[0] in _DIGITS:
            return ("call", None, False, False)
        if word in _KEYWORDS:
            return _GROUP
        q = _prev(d, k)
        if q == UNSURE:
            return UNSURE
        is_method = q >= 0 and d[q] == _DOT
        is_def = False
        if q >= 0 and d[q] in _ID:
            is_def = d[_ident_start(d, q) : q + 1] in (b"def", b"class")
        return ("call", word, is_method, is_def)
    if c in _OPERAND_END:
        return ("call", None, False, False)
    return _GROUP


class _OverBudget(Exception):
    """The module has more mentions than are worth looking at one by one: parse it instead."""


def _spend(d: bytes) -> None:
    """Count one mention or literal examined in module ``d``; raise past the budget."""
    memo = _memo(d)
    spent = memo.get("mentions", 0) + 1
    memo["mentions"] = spent
    if spent > _MENTION_BUDGET:
        raise _OverBudget


def _word_positions(d: bytes, word: bytes) -> Iterator[int]:
    """Start of each occurrence of ``word`` as a whole identifier."""
    whole = _WHOLE_WORDS.get(word)
    if whole is None:
        if len(_WHOLE_WORDS) > 256:
            _WHOLE_WORDS.clear()
        whole = _WHOLE_WORDS[word] = _whole_word(word)
    if whole is not None:
        # The expression's own search finds the whole words: most occurrences of a short word
        # are inside longer ones ("amp" in "example"), each a step of the loop below.
        for match in whole.finditer(d):
            _spend(d)
            yield match.start()
        return
    n = len(word)
    i = d.find(word)
    while i >= 0:
        if (i == 0 or d[i - 1] not in _ID) and d[i + n : i + n + 1] not in _ID_BYTES:
            _spend(d)
            yield i
        i = d.find(word, i + n)


_ID_BYTES = frozenset(bytes([c]) for c in _ID)
_WHOLE_WORDS: dict[bytes, re.Pattern[bytes] | None] = {}


def _whole_word(word: bytes) -> re.Pattern[bytes] | None:
    """``word`` as a whole identifier, for a word made of identifier characters (for such a word
    the matches are exactly the loop's: no whole-word occurrence can start inside another
    occurrence, whose characters are all identifier characters); None otherwise."""
    if not word or not all(c in _ID for c in word):
        return None
    # The word first, so that the expression's search looks for it as a literal; the character
    # before it is tested by a look back over it.
    literal = re.escape(word)
    return re.compile(literal + rb"(?![A-Za-z0-9_\x80-\xff])(?<![A-Za-z0-9_\x80-\xff]" + literal + rb")")
