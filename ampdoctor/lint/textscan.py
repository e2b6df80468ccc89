"""Text-level approximations of the semantic gate (gate.py), without parsing.

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
"""

from __future__ import annotations

import bisect
import keyword
import re
import unicodedata
from collections.abc import Iterable

from .gate import FILL_CALLS
from .vocabulary import AUTOCAST_NAMES, FLOAT16_CASTS, FLOAT16_MAX, FLOAT16_SMALLEST

__all__ = [
    "LITERAL_FLAGS",
    "autocast_anchor",
    "calls_method",
    "casts_to",
    "float16_anchor",
    "float16_cast",
    "half_call",
    "method_casts_to",
    "literal_flags",
    "may_have",
    "may_keep",
    "mentions_word",
    "references",
    "text_gate",
    "TextGate",
]

LITERAL_FLAGS = frozenset({"big-fill", "big-arith", "tiny-arith", "tiny-eps"})

# The vocabulary of vocabulary.py and gate.py, as bytes.
_FILL_CALLS = frozenset(name.encode() for name in FILL_CALLS)
_AUTOCAST_NAMES = tuple(name.encode() for name in AUTOCAST_NAMES)
_CAST_TARGETS = frozenset(name.encode() for name in FLOAT16_CASTS)

# ---------------------------------------------------------------------------------------
# Characters and small scanners
# ---------------------------------------------------------------------------------------

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


def _lex(d: bytes, start: int, end: int):
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
    out = []
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
            if d[i + 1:i + 2] == d[i:i + 1] and d[i + 2:i + 3] == d[i:i + 1]:
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
        elif c == _BACKSLASH and d[i + 1:i + 2] in (b"\n", b"\r"):
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
        word = d[_ident_start(d, j):j + 1]
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


def _paren_kind(d: bytes, o: int):
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
        word = d[k:j + 1]
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
            is_def = d[_ident_start(d, q):q + 1] in (b"def", b"class")
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


def _word_positions(d: bytes, word: bytes):
    """Start of each occurrence of ``word`` as a whole identifier."""
    n = len(word)
    i = d.find(word)
    while i >= 0:
        if (i == 0 or d[i - 1] not in _ID) and d[i + n:i + n + 1] not in _ID_BYTES:
            _spend(d)
            yield i
        i = d.find(word, i + n)


_ID_BYTES = frozenset(bytes([c]) for c in _ID)

# ---------------------------------------------------------------------------------------
# Comments and plain strings: where a mention is provably not code
# ---------------------------------------------------------------------------------------

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
                spans: list = []
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
                    end = _string_end(d, k + 3, d[k:k + 1], True)
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
        if d[p:p + 3] == quote * 3:
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


def _fstring_end(d: bytes, k: int, q: int, triple: bool, spans: list, level: int) -> int:
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
            if d[i + 1:i + 2] == b"N":
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
                if d[i + 2:i + 3] == bytes([q]):
                    spans.append((run, i))
                    return i + 3
            i += 1
            continue
        if c == 34 or c == 39:
            i += 1  # the other quote: text
            continue
        if d[i + 1:i + 2] == bytes([c]):  # ``{{`` or ``}}``
            i += 2
            continue
        if c == 125:  # a lone ``}``
            return -1
        spans.append((run, i))
        i = _field_end(d, i + 1, q, triple, spans, level)
        if i < 0:
            return -1
        run = i


def _field_end(d: bytes, i: int, q: int, triple: bool, spans: list, level: int) -> int:
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
            quote = d[i:i + 1]
            inner_triple = d[i:i + 3] == quote * 3
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


def _spec_end(d: bytes, i: int, q: int, triple: bool, spans: list, level: int) -> int:
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


# ---------------------------------------------------------------------------------------
# NFKC: identifiers are normalised by the parser (``ｆｌｏａｔ16`` is ``float16``)
# ---------------------------------------------------------------------------------------

_ASCII = bytes(range(128))


def _normalized(data: bytes) -> bytes | None:
    """``data`` with identifiers as the parser sees them: ``data`` itself when nothing changes
    (the common case), else the text with its identifiers NFKC-normalised; None when it cannot
    be decoded (then every check answers "yes"). Made once per module, and kept in the
    module's memo together with a memo of its own (see ``_memo``)."""
    memo = _memo(data)
    found = memo.get("view")
    if found is not None:
        return found[0]
    view: bytes | None = data
    end = data.find(b"\n")
    end = data.find(b"\n", end + 1) if end >= 0 else -1
    try:
        if b"coding" in data[:end if end >= 0 else len(data)]:  # an encoding declaration
            view = _decode_normalized(data, None)
        else:
            others = data.translate(None, _ASCII).decode("utf-8")
            if not unicodedata.is_normalized("NFKC", others):
                view = _decode_normalized(data, set(others))
    except UnicodeDecodeError:
        view = None
    if view is not None and view is not data and view == data:
        view = data  # only non-identifier text (say, fullwidth commas in comments) would change
    memo["view"] = (view, {})
    return view


def _decode_normalized(data: bytes, chars: set | None) -> bytes | None:
    """The text with each identifier NFKC-normalised, as the parser does, but with no new
    punctuation (a fullwidth quote in a string stays what it is): the text keeps its
    structure, and the scanners stay sound on it."""
    import io
    import tokenize

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return None
    if chars is None:
        chars = {c for c in text if ord(c) > 127}
    # The characters normalisation may change: compatibility forms, and combining marks
    # (which may compose with the character before them).
    changing = [c for c in chars if unicodedata.normalize("NFKC", c) != c or unicodedata.combining(c)]
    runs = []
    for char in changing:
        i = text.find(char)
        while i >= 0:
            start, end = i, i + 1
            while start > 0 and _identifier_char(text[start - 1]):
                start -= 1
            while end < len(text) and _identifier_char(text[end]):
                end += 1
            runs.append((start, end))
            i = text.find(char, end)
    out = []
    last = 0
    for start, end in sorted(runs):
        if start < last:
            start = last
            if start >= end:
                continue
        out.append(text[last:start])
        out.append(_normalize_run(text[start:end]))
        last = end
    out.append(text[last:])
    try:
        return "".join(out).encode("utf-8")
    except UnicodeEncodeError:
        return None


def _identifier_char(c: str) -> bool:
    return c == "_" or c.isalnum() or (ord(c) > 127 and not c.isspace() and unicodedata.category(c)[0] in "LMN")


def _normalize_run(run: str) -> str:
    normal = unicodedata.normalize("NFKC", run)
    if ("_" + normal).isidentifier():
        return normal
    out = []
    for char in run:
        normal = unicodedata.normalize("NFKC", char)
        out.append(normal if ("_" + normal).isidentifier() else char)
    return "".join(out)


_MEMO: tuple = (None, {})

# Shorter tokens that several quick checks share: a module without "alf" mentions neither
# half nor HalfTensor, and one pass over the bytes answers for both.
_SHARED = {b"half": b"alf", b"HalfTensor": b"alf", b"scale": b"cale", b"unscale_": b"cale",
           b"GradScaler": b"cale", b"ShardedGradScaler": b"cale"}


def _contains(data: bytes, token: bytes) -> bool:
    """``token in data``, remembered for the module (one pass over its bytes per token)."""
    memo = _memo(data)
    found = memo.get(token)
    if found is None:
        shared = _SHARED.get(token)
        found = memo[token] = (shared is None or _contains(data, shared)) and token in data
    return found


def _mentions_some(data: bytes, tokens) -> bool:
    """Whether the module may mention one of ``tokens`` (always, when it is not ASCII: NFKC)."""
    for token in tokens:
        if _contains(data, token):
            return True
    memo = _memo(data)
    ascii_ = memo.get("ascii")
    if ascii_ is None:
        ascii_ = memo["ascii"] = data.isascii()
    return not ascii_


def _memo(data: bytes) -> dict:
    """What is known about ``data``: the checks of one module share their findings (a token
    search, a literal scan, an import table is made once). Kept for the last module seen; the
    normalised view of that module (``_normalized``) keeps its own memo inside it, so checks
    that alternate between the two lose nothing."""
    global _MEMO
    cached = _MEMO
    if cached[0] is data:
        return cached[1]
    view = cached[1].get("view")
    if view is not None and view[0] is data:
        return view[1]
    cached = _MEMO = (data, {})
    return cached[1]


def _memoized(key, compute, data: bytes, *args):
    """``compute(data, *args)``, remembered for the module."""
    memo = _memo(data)
    found = memo.get(key)
    if found is None:
        found = memo[key] = compute(data, *args)
    return found


class _Check:
    """One check (a word, a method, names, cast targets): the tokens one of which the bytes
    must contain, and the scan that decides. The object is its own key in a module's memo."""

    __slots__ = ("tokens", "scan", "arg")

    def __init__(self, tokens, scan, arg) -> None:
        self.tokens = tuple(tokens)
        self.scan = scan
        self.arg = arg

    def __call__(self, data: bytes) -> bool:
        memo = _memo(data)
        found = memo.get(self)
        if found is None:
            try:
                found = _mentions_some(data, self.tokens) and _on_text(self.scan, data, self.arg)
            except _OverBudget:
                found = True
            memo[self] = found
        return found


_CHECKS: dict = {}


def _check(kind: str, arg) -> _Check:
    check = _CHECKS.get((kind, arg))
    if check is None:
        if kind == "word":
            check = _Check((arg,), _mentions, arg)
        elif kind == "method":
            check = _Check((arg[:-2] if arg.endswith(b"()") else arg,), _calls_method, arg)
        elif kind == "names":
            check = _Check({n.rpartition(b".")[2] for n in arg}, _references, arg)
        elif kind == "method_casts":
            check = _Check({t.rpartition(b".")[2] for t in arg}, _method_casts_to, arg)
        else:
            check = _Check({t.rpartition(b".")[2] for t in arg}, _casts_to, arg)
        _CHECKS[(kind, arg)] = check
    return check


def _on_text(check, data: bytes, *args):
    """``check`` on the bytes, and again on the normalised text when the answer is "no"."""
    answer = check(data, *args)
    if answer or data.isascii():
        return answer
    view = _normalized(data)
    if view is None:
        return True
    if view is data:
        return answer
    return check(view, *args)


# ---------------------------------------------------------------------------------------
# Words, imports and dotted names
# ---------------------------------------------------------------------------------------


def mentions_word(data: bytes, word: bytes | str) -> bool:
    """Whether ``word`` occurs as a whole identifier (not inside a longer one)."""
    if isinstance(word, str):
        word = word.encode()
    return _check("word", word)(data)


def _mentions(d: bytes, word: bytes) -> bool:
    return _contains(d, word) and any(_in_code(d, s) for s in _word_positions(d, word))


class _Imports:
    """What the gate's ``imports`` map may hold: local name → possible full names, and the
    full names the import statements add to the module's names. A full name starting with
    ``?.`` has an unknown module (``?.float16``: ``<something>.float16``)."""

    def __init__(self, d: bytes) -> None:
        self.d = d
        self.bindings: dict[bytes, list[tuple[bytes, int]]] = {}  # name → [(full name, where)]
        self.full_names: list[tuple[bytes, int]] = []
        for s in _word_positions(d, b"import"):
            module = _from_module(d, s)
            if module is _RELATIVE:
                continue
            for full, bound, base in _imported_names(d, s + 6, module):
                if base != bound:  # ``import torch`` binds torch to itself: nothing to resolve
                    self.bindings.setdefault(bound, []).append((base, s))
                self.full_names.append((full, s))

    def imported(self, match) -> bool:
        """Whether an import statement (in code) imports a name ``match`` accepts."""
        return any(match(full) and _in_code(self.d, s) for full, s in self.full_names)

    def resolves(self, parts: list[bytes], match) -> bool:
        """Whether the dotted chain may resolve to a name ``match`` accepts (through an import
        in code, or as it stands)."""
        if match(b".".join(parts)):
            return True
        rest = parts[1:]
        return any(
            match(b".".join([base, *rest])) and _in_code(self.d, s) for base, s in self.bindings.get(parts[0], ())
        )

    def bound_to(self, match) -> list[bytes]:
        """The local names an import in code binds to a name ``match`` accepts."""
        return [
            name for name, bases in self.bindings.items()
            if any(match(base) and _in_code(self.d, s) for base, s in bases)
        ]


def _imports(d: bytes) -> _Imports:
    return _memoized("imports", _Imports, d)


_RELATIVE = object()
_NAME = re.compile(rb"[A-Za-z_\x80-\xff][0-9A-Za-z_\x80-\xff]*")


def _prev_inline(d: bytes, i: int) -> int:
    """Like ``_prev`` within one logical line outside brackets: -1 at a line break that ends
    the statement (an import's ``from M`` cannot be on an earlier line)."""
    j = i - 1
    while j >= 0:
        c = d[j]
        if c in _HSPACE:
            j -= 1
        elif c == _NL:
            if not _continued(d, j + 1):
                return -1
            j -= 2 if d[j - 1] == _BACKSLASH else 3  # past "\\\n" or "\\\r\n"
        elif c == _BACKSLASH:
            return UNSURE
        else:
            return j
    return -1


def _from_module(d: bytes, s: int):
    """For the ``import`` keyword at ``s``: the module of ``from M import``, None for a plain
    ``import``, _RELATIVE for ``from .M import``, or ``b"?"`` when unsure."""
    tokens: list[bytes] = []  # backwards
    i = s
    while True:
        j = _prev_inline(d, i)
        if j == UNSURE:
            return b"?"
        if j < 0:
            return None
        c = d[j]
        if c == _DOT:
            tokens.append(b".")
            i = j
            continue
        if c not in _ID:
            return None
        k = _ident_start(d, j)
        word = d[k:j + 1]
        if word == b"from":
            break
        if word in _KEYWORDS or word[0] in _DIGITS:
            return None
        tokens.append(word)
        i = k
    tokens.reverse()
    level = 0
    while level < len(tokens) and tokens[level] == b".":
        level += 1
    names = tokens[level:]
    if level:
        return _RELATIVE
    if not names or len(names) % 2 == 0 or any(t != b"." for t in names[1::2]) or b"." in names[0::2]:
        return None
    return b"".join(names)


def _ident_at(d: bytes, i: int) -> bytes | None:
    """The identifier starting at ``i`` (None if there is none)."""
    m = _NAME.match(d, i)
    return m.group() if m is not None else None


def _imported_names(d: bytes, i: int, module):
    """(full name, local name, what the local name stands for) of each name the import
    statement continuing at ``i`` binds; stops at the first thing that does not fit."""
    i = _next(d, i)
    if module is not None:
        if _at(d, i) == _STAR:
            return
        if _at(d, i) == _O_PAREN:
            i = _next(d, i + 1)
    while True:
        name = _ident_at(d, i)
        if name is None or name in _KEYWORDS:
            return
        i += len(name)
        parts = [name]
        if module is None:
            while True:
                j = _next(d, i)
                if _at(d, j) != _DOT:
                    break
                k = _next(d, j + 1)
                more = _ident_at(d, k)
                if more is None:
                    break
                parts.append(more)
                i = k + len(more)
        j = _next(d, i)
        alias = None
        if _ident_at(d, j) == b"as":
            k = _next(d, j + 2)
            alias = _ident_at(d, k)
            if alias is None:
                return
            i = k + len(alias)
            j = _next(d, i)
        if module is None:
            full = b".".join(parts)
            yield full, alias or parts[0], full if alias else parts[0]
        else:
            full = (b"?." if module == b"?" else module + b".") + name
            yield full, alias or name, full
        if _at(d, j) != _COMMA:
            return
        i = _next(d, j + 1)


def _chain_back(d: bytes, s: int):
    """The dotted name ending with the identifier at ``s``: (start, parts); None when it is
    not a plain dotted name (``f().x``, ``a[0].x``); UNSURE."""
    m = _NAME.match(d, s)
    parts = [m.group() if m is not None else b""]
    pos = s
    while True:
        j = _prev(d, pos)
        if j == UNSURE:
            return UNSURE
        if j < 0 or d[j] != _DOT:
            return pos, parts
        k = _prev(d, j)
        if k == UNSURE:
            return UNSURE
        if k < 0:
            return None
        c = d[k]
        if c == _C_PAREN:
            return UNSURE  # ``(torch).float16`` is a dotted name to the gate
        if c not in _ID:
            return None
        ks = _ident_start(d, k)
        word = d[ks:k + 1]
        if word[0] in _DIGITS or word in _KEYWORDS:
            return None
        parts.insert(0, word)
        pos = ks


# ---------------------------------------------------------------------------------------
# Anchors (gate.Anchors): names, methods, casts
# ---------------------------------------------------------------------------------------


def _as_bytes(names) -> tuple[bytes, ...]:
    return tuple(n.encode() if isinstance(n, str) else n for n in names)


def references(data: bytes, names: Iterable[str | bytes]) -> bool:
    """Whether the module may reference one of ``names`` (qualified names or prefixes, matched
    at dot boundaries) as the gate resolves names through the module's imports."""
    return _check("names", _as_bytes(names))(data)


def _matches(name: bytes, anchors: tuple[bytes, ...]) -> bool:
    if name.startswith(b"?."):
        return True  # an unknown module: it may be anything
    return any(name == a or name.startswith(a + b".") for a in anchors)


def _references(d: bytes, names: tuple[bytes, ...]) -> bool:
    # A name resolving to (or below) ``a.b.c`` has ``c`` as a whole word in its chain or in
    # the import statement that binds it.
    chains = []
    for last in {n.rpartition(b".")[2] for n in names}:
        if not _contains(d, last):
            continue
        for s in _word_positions(d, last):
            chain = _chain_back(d, s)
            if chain == UNSURE:
                if _in_code(d, s):
                    return True
                continue
            if chain is None:
                continue
            if _matches(b".".join(chain[1]), names):
                if _in_code(d, s):
                    return True
                continue
            chains.append((s, chain[1]))
    if not chains:
        return False
    imports = _imports(d)

    def match(name: bytes) -> bool:
        return _matches(name, names)

    if imports.imported(match):
        return True
    return any(imports.resolves(parts, match) and _in_code(d, s) for s, parts in chains)


def autocast_anchor(data: bytes) -> bool:
    """Whether the module may reference one of the autocast names (``torch.autocast``,
    ``torch.cuda.amp.autocast``, ... or an import of them), as the gate resolves names."""
    return references(data, _AUTOCAST_NAMES)


def calls_method(data: bytes, name: bytes | str) -> bool:
    """Whether ``<something>.name(`` may be called (the gate's ``methods``)."""
    return _check("method", name.encode() if isinstance(name, str) else name)(data)


def half_call(data: bytes) -> bool:
    """Whether ``.half(`` is called."""
    return calls_method(data, b"half")


def _calls_method(d: bytes, name: bytes) -> bool:
    # ``half()`` (the gate's spelling of a call without arguments): ``)`` must follow ``(``.
    bare = name.endswith(b"()")
    if bare:
        name = name[:-2]
    if not _contains(d, name):
        return False
    for s in _word_positions(d, name):
        n = _next(d, s + len(name))
        if _at(d, n) != _O_PAREN:
            continue
        if bare and _at(d, _next(d, n + 1)) != _C_PAREN:
            continue
        p = _prev(d, s)
        if (p == UNSURE or (p >= 0 and d[p] == _DOT)) and _in_code(d, s):
            return True
    return False


_CAST_METHODS = frozenset({b"to", b"type"})


def casts_to(data: bytes, targets: Iterable[str | bytes]) -> bool:
    """Whether one of ``targets`` (qualified names, or an import alias of one) may be a
    positional argument of ``.to(...)``/``.type(...)`` or the value of a ``dtype=`` keyword in
    a call (the gate's ``casts``)."""
    return _check("casts", frozenset(_as_bytes(targets)))(data)


def method_casts_to(data: bytes, targets: Iterable[str | bytes]) -> bool:
    """``casts_to`` where only ``.to(...)``/``.type(...)`` count (the gate's ``method_casts``)."""
    return _check("method_casts", frozenset(_as_bytes(targets)))(data)


def float16_cast(data: bytes) -> bool:
    """Whether torch.float16 / torch.half / torch.HalfTensor / torch.cuda.HalfTensor (or an
    import alias of one) may be a positional argument of ``.to(...)``/``.type(...)`` or the
    value of a ``dtype=`` keyword in a call."""
    return casts_to(data, _CAST_TARGETS)


def float16_anchor(data: bytes) -> bool:
    """The gate's FLOAT16 anchors: an autocast name, a ``.half()`` call or a float16 cast."""
    return autocast_anchor(data) or half_call(data) or float16_cast(data)


def _is_target(name: bytes, targets: frozenset) -> bool:
    if name.startswith(b"?."):
        return any(t.endswith(name[1:]) for t in targets)
    return name in targets


def _method_casts_to(d: bytes, targets: frozenset) -> bool:
    """``_casts_to`` where only ``.to(...)``/``.type(...)`` count (the gate's ``method_casts``)."""
    return _casts_to(d, targets, True)


def _casts_to(d: bytes, targets: frozenset, methods_only: bool = False) -> bool:
    for word in {t.rpartition(b".")[2] for t in targets if t.endswith(b"Tensor")}:
        # ``.type("torch.HalfTensor")``: a tensor type named by a string. Any string that ends
        # with the type's name counts (also the last piece of ``"torch." "HalfTensor"``).
        if _contains(d, word + b'"') or _contains(d, word + b"'"):
            return True
    aliased = False
    for word in {t.rpartition(b".")[2] for t in targets}:
        if not _contains(d, word):
            continue
        for s in _word_positions(d, word):
            end = s + len(word)
            after = _next(d, end)
            c = _at(d, after)
            if c != _COMMA and c != _C_PAREN:
                if _ident_at(d, after) == b"as":
                    aliased = True  # ``from torch import float16 as f16``
                continue
            chain = _chain_back(d, s)
            if chain == UNSURE:
                if _in_code(d, s):
                    return True
                continue
            if chain is None:
                continue
            start, parts = chain
            if not _cast_context(d, start, end, methods_only):
                continue
            if b".".join(parts) in targets or _imports(d).resolves(parts, lambda n: _is_target(n, targets)):
                if _in_code(d, s):
                    return True
    if not aliased:
        return False
    for name in _imports(d).bound_to(lambda n: _is_target(n, targets)):
        for s in _word_positions(d, name):
            chain = _chain_back(d, s)
            if chain == UNSURE or (
                chain is not None and len(chain[1]) == 1 and _cast_context(d, s, s + len(name), methods_only)
            ):
                if _in_code(d, s):
                    return True
    return False


def _cast_context(d: bytes, a: int, b: int, methods_only: bool = False) -> bool:
    """Whether the expression at ``d[a:b]`` may be a positional argument of ``.to``/``.type``
    or the value of a ``dtype=`` keyword of a call (of ``.to``/``.type`` if ``methods_only``)."""
    while True:
        n = _next(d, b)
        cn = _at(d, n)
        if cn != _COMMA and cn != _C_PAREN:
            return False
        p = _prev(d, a)
        if p == UNSURE:
            return True
        c = _at(d, p)
        if c == _O_PAREN:
            kind = _paren_kind(d, p)
            if kind == UNSURE:
                return True
            if kind is _GROUP:
                if cn == _C_PAREN:  # ``(torch.float16)``: the parentheses are transparent
                    a, b = p, n + 1
                    continue
                return False
            return kind[2] and kind[1] in (b"to", b"type")
        if c == _COMMA:
            o = _opener(d, p)
            if o == UNSURE:
                return True
            if o < 0 or d[o] != _O_PAREN:
                return False
            kind = _paren_kind(d, o)
            if kind == UNSURE:
                return True
            return kind is not _GROUP and kind[2] and kind[1] in (b"to", b"type")
        if c == _EQUAL:
            return _call_keyword(d, p, (b"dtype",), _CAST_METHODS if methods_only else None) != 0
        return False


def _call_keyword(d: bytes, p: int, names: tuple | None = None, calls: frozenset | None = None) -> int:
    """For the ``=`` at ``p``: 1 if it may be a keyword argument (named one of ``names``, if
    given) of a call (of a function named one of ``calls``, if given), 0 if not; 2 if unsure."""
    if p > 0 and d[p - 1] in b"=!<>:+-*/%&|^@~":
        return 0  # ``==``, ``<=``, ``+=``, ``:=`` ...
    k = _prev(d, p)
    if k == UNSURE:
        return 2
    if k < 0 or d[k] not in _ID:
        return 0
    ks = _ident_start(d, k)
    word = d[ks:k + 1]
    if word[0] in _DIGITS or word in _KEYWORDS or (names is not None and word not in names):
        return 0
    q = _prev(d, ks)
    return _call_argument(d, q, calls)


def _call_argument(d: bytes, q: int, calls: frozenset | None) -> int:
    """For an argument preceded by the ``(`` or ``,`` at ``q``: 1 if it may be an argument of
    a call (of one named in ``calls``, if given), 0 if not, 2 if unsure."""
    if q == UNSURE:
        return 2
    c = _at(d, q)
    if c == _O_PAREN:
        o = q
    elif c == _COMMA:
        o = _opener(d, q)
        if o == UNSURE:
            return 2
        if o < 0 or d[o] != _O_PAREN:
            return 0
    else:
        return 0
    kind = _paren_kind(d, o)
    if kind == UNSURE:
        return 2
    if kind is _GROUP or kind[3]:
        return 0
    if calls is not None and kind[1] not in calls:
        return 0
    return 1


def may_have(data: bytes, anchors) -> bool:
    """A superset of ``gate.summarize(source).has_any(anchors)`` for a ``gate.Anchors``."""
    return text_gate((anchors,)).keeps(data)


def may_keep(data: bytes, anchors) -> bool:
    """A superset of ``gate.keeps(source, anchors)``: False only when no rule's anchors can
    hold. (Where the gate keeps a module it cannot parse, this looks at the text alone: a
    syntax error in a module without any anchor is not looked for.)"""
    return text_gate(tuple(anchors)).keeps(data)


class _Alternative:
    """One ``gate.Anchors`` as checks: any of ``anchors`` (if there are any), then all of
    ``required``, then the literal facts."""

    def __init__(self, anchors) -> None:
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
        return not self.literals or literal_flags(data) >= self.literals


class TextGate:
    """The text-level gate for a set of rules' anchors (``LintRule.anchors`` each): build it
    once, then ``keeps(data)`` for each module: a superset of ``gate.keeps(source, anchors)``."""

    def __init__(self, anchors) -> None:
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


_GATES: dict = {}


def text_gate(anchors) -> TextGate:
    """The ``TextGate`` for these anchors (made once and remembered)."""
    anchors = tuple(anchors)
    gate = _GATES.get(anchors)
    if gate is None:
        if len(_GATES) > 64:
            _GATES.clear()
        gate = _GATES[anchors] = TextGate(anchors)
    return gate


# ---------------------------------------------------------------------------------------
# Literals
# ---------------------------------------------------------------------------------------

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


def _finite(value) -> float | _Any | None:
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
    if base is _ANY or exponent is _ANY:
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
    if d[j:j + 2] == b"**" and d[j + 2:j + 3] != b"=":
        end, exponent = _factor(d, j + 2, depth + 1)
        return end, _power(value, exponent)
    return end, value


def _number_before(d: bytes, q: int):
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

    def __init__(self, d: bytes, wanted: frozenset) -> None:
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
            if d[n:n + 2] != b"**" and not (p == UNSURE or (p > 0 and d[p - 1:p + 1] == b"**")):
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
                if d[n:n + 2] == b"**" and d[n + 2:n + 3] != b"=":
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
    if value is _ANY:
        return True, True
    magnitude = abs(value)
    return magnitude > FLOAT16_MAX, 0 < magnitude < FLOAT16_SMALLEST


# Where number tokens that may matter start, found with bytes.find on a translated copy:
# digits become "0", "_" "u", e/E "e", x/X/o/O/b/B "x", other identifier characters "a".
_SHAPE = bytes(
    48 if chr(c) in "0123456789" else 117 if c == 95 else 101 if chr(c) in "eE" else 120 if chr(c) in "xXoObB"
    else 97 if c in _ID else c if chr(c) in ".*" else 32
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
    memo = _memoized("literals", lambda _: {}, data)
    if LITERAL_FLAGS in memo:
        return memo[LITERAL_FLAGS] & want
    if want not in memo:
        memo[want] = _literal_flags_any(data, want)
    return memo[want]


def _literal_flags_any(data: bytes, want: frozenset) -> frozenset[str]:
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


def _literal_flags(d: bytes, want: frozenset) -> set[str]:
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
                m = _NUMBER.match(d, start)
                if m is not None:
                    scan.examine(start, m.end(), _number_value(m.group()))
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
