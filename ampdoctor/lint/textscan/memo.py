"""What is known about the module being scanned: the checks of one module share their
findings (a token search, a literal scan, an import table is made once), kept for the last
module seen.
"""

from __future__ import annotations

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any, TypeVar

    _T = TypeVar("_T")

# The last module seen, and what is known about it: its keys are tokens (bytes), the names of
# what the checks compute once ("view", "imports" ...) and the checks themselves.
_MEMO: tuple[bytes | None, dict[object, Any]] = (None, {})

# Shorter tokens that several quick checks share: a module without "alf" mentions neither
# half nor HalfTensor, and one pass over the bytes answers for both.
_SHARED = {
    b"half": b"alf",
    b"HalfTensor": b"alf",
    b"scale": b"cale",
    b"unscale_": b"cale",
    b"GradScaler": b"cale",
    b"ShardedGradScaler": b"cale",
}


def _contains(data: bytes, token: bytes) -> bool:
    """``token in data``, remembered for the module (one pass over its bytes per token)."""
    memo = _memo(data)
    found = memo.get(token)
    if found is None:
        shared = _SHARED.get(token)
        found = memo[token] = (shared is None or _contains(data, shared)) and token in data
    return found


def seed(data: bytes, found: dict[bytes, bool]) -> None:
    """Take what is already known of ``data``: ``found`` maps tokens to whether ``data`` holds
    each (the token prefilter's searches), so that the checks do not search for them again."""
    memo = _memo(data)
    for token, held in found.items():
        memo.setdefault(token, held)


def _mentions_some(data: bytes, tokens: Iterable[bytes]) -> bool:
    """Whether the module may mention one of ``tokens`` (always, when it is not ASCII: NFKC)."""
    for token in tokens:
        if _contains(data, token):
            return True
    memo = _memo(data)
    ascii_ = memo.get("ascii")
    if ascii_ is None:
        ascii_ = memo["ascii"] = data.isascii()
    return not ascii_


def _memo(data: bytes) -> dict[object, Any]:
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
        own: dict[object, Any] = view[1]
        return own
    cached = _MEMO = (data, {})
    return cached[1]


def _memoized(key: str, compute: Callable[..., _T], data: bytes, *args: object) -> _T:
    """``compute(data, *args)``, remembered for the module."""
    memo = _memo(data)
    found = memo.get(key)
    if found is None:
        found = memo[key] = compute(data, *args)
    value: _T = found
    return value
