"""NFKC: identifiers are normalised by the parser (``ｆｌｏａｔ16`` is ``float16``). The
normalised view of a module, made only when its non-ASCII text would change, and ``_Check``:
one check on the bytes, and again on the normalised view when the answer is "no".
"""

from __future__ import annotations

import unicodedata

from .lexer import _OverBudget
from .memo import _memo, _mentions_some

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

_ASCII = bytes(range(128))


def _normalized(data: bytes) -> bytes | None:
    """``data`` with identifiers as the parser sees them: ``data`` itself when nothing changes
    (the common case), else the text with its identifiers NFKC-normalised; None when it cannot
    be decoded (then every check answers "yes"). Made once per module, and kept in the
    module's memo together with a memo of its own (see ``_memo``)."""
    memo = _memo(data)
    found = memo.get("view")
    if found is not None:
        known: bytes | None = found[0]
        return known
    view: bytes | None = data
    end = data.find(b"\n")
    end = data.find(b"\n", end + 1) if end >= 0 else -1
    try:
        if b"coding" in data[: end if end >= 0 else len(data)]:  # an encoding declaration
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


def _decode_normalized(data: bytes, chars: set[str] | None) -> bytes | None:
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


class _Check:
    """One check (a word, a method, names, cast targets): the tokens one of which the bytes
    must contain, and the scan that decides. The object is its own key in a module's memo."""

    __slots__ = ("tokens", "scan", "arg")

    def __init__(self, tokens: Iterable[bytes], scan: Callable[[bytes, Any], bool], arg: object) -> None:
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


def _on_text(check: Callable[..., bool], data: bytes, *args: object) -> bool:
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
