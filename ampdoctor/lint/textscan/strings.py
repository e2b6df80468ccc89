"""Comments and plain strings: where a mention is provably not code. The string table of
a module (one-line, triple-quoted and f-strings with their fields), made once per module.
"""

from __future__ import annotations

import bisect
import re

from .lexer import _BACKSLASH, _HSPACE, _ID, _NL, _ident_start
from .memo import _memoized

_STRING_PREFIXES = frozenset({b"", b"r", b"u", b"b", b"br", b"rb", b"f", b"fr", b"rf", b"t", b"tr", b"rt"})


# The body of a one-line string, from its opening quote (unrolled loop).
_ONE_LINE = {
    34: re.compile(rb'"[^"\\\n]*(?:\\.[^"\\\n]*)*"', re.S),
    39: re.compile(rb"'[^'\\\n]*(?:\\.[^'\\\n]*)*'", re.S),
}


class _Strings:
    """The comments and plain strings of a module (and the literal parts of its f-strings),
    lexed from the start on demand, as the tokenizer reads them. The fields of f-strings are
    code to the parser and stay in; where the lexer is in doubt it stops, and nothing after
    that point is left out."""

    def __init__(self, d: bytes) -> None:
        self.d = d
        self.pos = 0  # lexed up to here
        self.stop = len(d) + 1  # nothing at or after this is known
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.ahead = (-1, -1, -1)  # the next '#', "'", '"' at or after pos (cached)

    def excluded(self, i: int) -> bool:
        """Whether position ``i`` is provably inside a comment or a plain string."""
        if self.pos <= i < self.stop:
            self._lex_to(i)
        if i >= self.stop:
            return False
        k = bisect.bisect_right(self.starts, i) - 1
        return k >= 0 and i < self.ends[k]

    def _lex_to(self, i: int) -> None:
        """Lex past position ``i`` (or stop where in doubt)."""
        d = self.d
        n = len(d)
        find = d.find
        starts, ends = self.starts, self.ends
        pos = self.pos
        h, a, q = self.ahead
        while pos <= i:
            if h < pos:
                h = find(b"#", pos)
                if h < 0:
                    h = n
            if a < pos:
                a = find(b"'", pos)
                if a < 0:
                    a = n
            if q < pos:
                q = find(b'"', pos)
                if q < 0:
                    q = n
            k = h if h < a else a
            if q < k:
                k = q
            if k >= n:
                pos = n + 1
                break
            if k == h:  # a comment
                e = find(b"\n", k)
                if e < 0:
                    e = n
                starts.append(k)
                ends.append(e)
                pos = e
                continue
            c = d[k]
            j = k
            if k and d[k - 1] in _ID:
                while j > 0 and d[j - 1] in _ID:
                    j -= 1
                prefix = d[j:k].lower()
                if prefix not in _STRING_PREFIXES:
                    prefix, j = b"", k  # a name right before the quote (``if"x" in y``)
            else:
                prefix = b""
            triple = d[k + 1] == c and d[k + 2] == c if k + 2 < n else False
            if prefix and (b"f" in prefix or b"t" in prefix):
                spans: list[tuple[int, int]] = []
                end = _fstring_end(d, k + (3 if triple else 1), c, triple, spans, 0)
                if end < 0:
                    pos = j
                    self.stop = min(self.stop, pos)
                    pos = n + 1
                    break
                for span in spans:
                    starts.append(span[0])
                    ends.append(span[1])
            else:
                if triple:
                    end = _string_end(d, k + 3, d[k : k + 1], True)
                else:
                    m = _ONE_LINE[c].match(d, k)
                    end = m.end() if m is not None else -1
                if end < 0:  # unterminated: not valid code; stop here
                    self.stop = min(self.stop, j)
                    pos = n + 1
                    break
                starts.append(j)
                ends.append(end)
            pos = end
        self.pos = pos
        self.ahead = (h, a, q)


def _string_end(d: bytes, k: int, quote: bytes, triple: bool) -> int:
    """End of the plain string whose body starts at ``k`` (-1: unterminated)."""
    while True:
        p = d.find(quote, k)
        if p < 0:
            return -1
        if not triple:
            nl = d.find(b"\n", k, p)
            while nl >= 0:
                if not _escaped(d, nl):
                    return -1  # a line break ends a one-line string: not valid code
                nl = d.find(b"\n", nl + 1, p)
        if _escaped(d, p):
            k = p + 1
            continue
        if not triple:
            return p + 1
        if d[p : p + 3] == quote * 3:
            return p + 3
        k = p + 1


def _escaped(d: bytes, p: int) -> bool:
    """Whether the character at ``p`` follows an odd number of backslashes."""
    k = p
    while k > 0 and d[k - 1] == _BACKSLASH:
        k -= 1
    return (p - k) % 2 == 1


_FSTRING_LITERAL = re.compile(rb"[{}\\\n'\"]")
_FSTRING_FIELD = re.compile(rb"[][(){}'\"#\\:!\n]")


def _fstring_end(d: bytes, k: int, q: int, triple: bool, spans: list[tuple[int, int]], level: int) -> int:
    """End of the f-string whose body starts at ``k`` (quote character ``q``), as Python 3.12
    reads it (PEP 701; valid code for older versions reads the same); its literal parts are
    added to ``spans``. -1 when in doubt: the caller stops there."""
    if level > 20:
        return -1
    n = len(d)
    run = k  # start of the current literal part
    i = k
    while True:
        m = _FSTRING_LITERAL.search(d, i)
        if m is None:
            return -1
        i = m.start()
        c = d[i]
        if c == _BACKSLASH:
            if d[i + 1 : i + 2] == b"N":
                return -1  # ``\N{...}``: braces that are no field (unless the string is raw)
            i += 2
            continue
        if c == _NL:
            if not triple:
                return -1
            i += 1
            continue
        if c == q:
            if not triple:
                spans.append((run, i))
                return i + 1
            if d[i + 1] == q if i + 1 < n else False:
                if d[i + 2 : i + 3] == bytes([q]):
                    spans.append((run, i))
                    return i + 3
            i += 1
            continue
        if c == 34 or c == 39:
            i += 1  # the other quote: text
            continue
        if d[i + 1 : i + 2] == bytes([c]):  # ``{{`` or ``}}``
            i += 2
            continue
        if c == 125:  # a lone ``}``
            return -1
        spans.append((run, i))
        i = _field_end(d, i + 1, q, triple, spans, level)
        if i < 0:
            return -1
        run = i


def _field_end(d: bytes, i: int, q: int, triple: bool, spans: list[tuple[int, int]], level: int) -> int:
    """End (after the ``}``) of the replacement field of an f-string starting at ``i``."""
    depth = 0
    while True:
        m = _FSTRING_FIELD.search(d, i)
        if m is None:
            return -1
        i = m.start()
        c = d[i]
        if c in b"([{":
            depth += 1
        elif c in b")]":
            depth -= 1
            if depth < 0:
                return -1
        elif c == 125:  # }
            if depth == 0:
                return i + 1
            depth -= 1
        elif c == 34 or c == 39:  # a string inside the field
            j = _ident_start(d, i - 1) if i > 0 and d[i - 1] in _ID else i
            prefix = d[j:i].lower()
            if prefix not in _STRING_PREFIXES:
                prefix, j = b"", i
            quote = d[i : i + 1]
            inner_triple = d[i : i + 3] == quote * 3
            body = i + (3 if inner_triple else 1)
            if b"f" in prefix or b"t" in prefix:
                end = _fstring_end(d, body, c, inner_triple, spans, level + 1)
            else:
                end = _string_end(d, body, quote, inner_triple)
                if end >= 0:
                    spans.append((j, end))
            if end < 0:
                return -1
            i = end
            continue
        elif c == 58:  # ``:``
            if depth == 0:  # a format spec: text with fields, up to ``}``
                return _spec_end(d, i + 1, q, triple, spans, level)
        elif c == 33 or c == _NL:  # ``!r``, ``!=``; a line break inside a field (3.12)
            pass
        else:  # a comment or a backslash in a field
            return -1
        i += 1


def _spec_end(d: bytes, i: int, q: int, triple: bool, spans: list[tuple[int, int]], level: int) -> int:
    while True:
        m = _FSTRING_LITERAL.search(d, i)
        if m is None:
            return -1
        i = m.start()
        c = d[i]
        if c == 125:  # }
            return i + 1
        if c == 123:  # a nested field
            i = _field_end(d, i + 1, q, triple, spans, level + 1)
            if i < 0:
                return -1
            continue
        if c == q or c == _BACKSLASH or (c == _NL and not triple):
            return -1
        i += 1


def _strings(d: bytes) -> _Strings:
    return _memoized("strings", _Strings, d)


def _in_code(d: bytes, i: int) -> bool:
    """False when position ``i`` is provably inside a comment or a plain string."""
    start = d.rfind(b"\n", 0, i) + 1
    if d.find(b"{", start, i) < 0 and d.find(b'"', start, i) < 0 and d.find(b"'", start, i) < 0:
        # No quote and no field of an f-string before it on its line: after a '#', it is in a
        # comment, or the whole line so far is in a string that began on an earlier line.
        if d.find(b"#", start, i) >= 0:
            return False
        # A doctest prompt: a line of code cannot begin with ">>>".
        first = start
        while first < i and d[first] in _HSPACE:
            first += 1
        if d.startswith(b">>> ", first):
            return False
    return not _strings(d).excluded(i)
