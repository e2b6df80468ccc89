"""Words, imports and dotted names, and the anchors of ``gate.Anchors`` checked on the text:
names a module references (through its own import statements), methods it calls, and what it
converts to float16 with ``.to(...)``, ``.type(...)`` or ``dtype=``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..vocabulary import AUTOCAST_NAMES, FLOAT16_CASTS
from .lexer import (
    _BACKSLASH,
    _C_PAREN,
    _COMMA,
    _DIGITS,
    _DOT,
    _EQUAL,
    _GROUP,
    _HSPACE,
    _ID,
    _KEYWORDS,
    _NL,
    _O_PAREN,
    _STAR,
    UNSURE,
    _at,
    _continued,
    _ident_start,
    _next,
    _opener,
    _paren_kind,
    _prev,
    _word_positions,
)
from .memo import _contains, _memoized
from .normalise import _Check
from .strings import _in_code

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

# vocabulary.py's autocast names and float16 cast targets, as bytes.
_AUTOCAST_NAMES = tuple(name.encode() for name in AUTOCAST_NAMES)
_CAST_TARGETS = frozenset(name.encode() for name in FLOAT16_CASTS)


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

    def imported(self, match: Callable[[bytes], bool]) -> bool:
        """Whether an import statement (in code) imports a name ``match`` accepts."""
        return any(match(full) and _in_code(self.d, s) for full, s in self.full_names)

    def resolves(self, parts: list[bytes], match: Callable[[bytes], bool]) -> bool:
        """Whether the dotted chain may resolve to a name ``match`` accepts (through an import
        in code, or as it stands)."""
        if match(b".".join(parts)):
            return True
        rest = parts[1:]
        return any(
            match(b".".join([base, *rest])) and _in_code(self.d, s) for base, s in self.bindings.get(parts[0], ())
        )

    def bound_to(self, match: Callable[[bytes], bool]) -> list[bytes]:
        """The local names an import in code binds to a name ``match`` accepts."""
        return [
            name
            for name, bases in self.bindings.items()
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


def _from_module(d: bytes, s: int) -> Any:
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
        word = d[k : j + 1]
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


def _imported_names(d: bytes, i: int, module: bytes | None) -> Iterator[tuple[bytes, bytes, bytes]]:
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


def _chain_back(d: bytes, s: int) -> Any:
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
        word = d[ks : k + 1]
        if word[0] in _DIGITS or word in _KEYWORDS:
            return None
        parts.insert(0, word)
        pos = ks


def _as_bytes(names: Iterable[str | bytes]) -> tuple[bytes, ...]:
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
    ``torch.cuda.amp.autocast``, ... or an import of them), as the gate resolves names, or call
    a method of that name (``accelerator.autocast()``: the AUTOCAST anchors' ``methods``)."""
    return references(data, _AUTOCAST_NAMES) or calls_method(data, b"autocast")


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


def _is_target(name: bytes, targets: frozenset[bytes]) -> bool:
    if name.startswith(b"?."):
        return any(t.endswith(name[1:]) for t in targets)
    return name in targets


def _method_casts_to(d: bytes, targets: frozenset[bytes]) -> bool:
    """``_casts_to`` where only ``.to(...)``/``.type(...)`` count (the gate's ``method_casts``)."""
    return _casts_to(d, targets, True)


def _casts_to(d: bytes, targets: frozenset[bytes], methods_only: bool = False) -> bool:
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


def _call_keyword(
    d: bytes, p: int, names: tuple[bytes, ...] | None = None, calls: frozenset[bytes] | None = None
) -> int:
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
    word = d[ks : k + 1]
    if word[0] in _DIGITS or word in _KEYWORDS or (names is not None and word not in names):
        return 0
    q = _prev(d, ks)
    return _call_argument(d, q, calls)


def _call_argument(d: bytes, q: int, calls: frozenset[bytes] | None) -> int:
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


_CHECKS: dict[tuple[str, object], _Check] = {}


def _check(kind: str, arg: Any) -> _Check:  # ``arg``: a word, or names, as ``kind`` reads it
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
