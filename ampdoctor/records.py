"""Two small bases for ampdoctor's data classes, in place of ``dataclasses``.

``ampdoctor lint FILE`` runs on every commit, so its start-up is most of its cost. Building a
dataclass compiles each generated method from source, and importing ``dataclasses`` imports
``inspect``; for the thirty-odd data types on the lint path that was more time than linting a
typical training script. These bases give the same behaviour from ``__slots__``:

* ``Value``: immutable; equal, hashed and ordered field by field (like a tuple of its fields);
  ``replace(**changes)`` returns a copy; picklable (worker processes send findings back).
* ``Record``: mutable, compared by identity; only a readable ``repr``.

A subclass lists its fields in ``__slots__`` in the order of its ``__init__`` parameters (``replace``
and pickling call ``__init__`` positionally). A ``Value`` subclass assigns them with
``self._set(...)`` in that same order.
"""

from __future__ import annotations

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any, Self

# Objects whose repr is being built: records point at each other (a call at its frame, the frame
# at its calls), so a nested repr of one of these prints ``...`` instead of recursing.
_IN_REPR: set[int] = set()


def _repr(obj: Record | Value) -> str:
    name = type(obj).__name__
    if id(obj) in _IN_REPR:
        return f"{name}(...)"
    _IN_REPR.add(id(obj))
    try:
        fields = ", ".join(
            f"{field}={getattr(obj, field, None)!r}" for field in obj.__slots__ if field != "__weakref__"
        )
    finally:
        _IN_REPR.discard(id(obj))
    return f"{name}({fields})"


class Record:
    __slots__: tuple[str, ...] = ()

    __repr__ = _repr


class Value:
    __slots__: tuple[str, ...] = ()
    # Fields left out of equality, hashing and ordering (data that rides along, such as a node).
    _uncompared: tuple[str, ...] = ()
    _compared: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._compared = tuple(name for name in cls.__slots__ if name not in cls._uncompared)

    def _set(self, *values: object) -> None:
        for name, value in zip(self.__slots__, values):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable (cannot set {name!r}); use replace()")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable (cannot delete {name!r})")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def _key(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._compared)

    def replace(self, **changes: Any) -> Self:
        """A copy with the given fields changed."""
        unknown = set(changes).difference(self.__slots__)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {sorted(unknown)[0]!r}")
        return type(self)(*(changes.get(name, getattr(self, name)) for name in self.__slots__))

    def __reduce__(self) -> tuple[type[Self], tuple[Any, ...]]:
        return type(self), self._values()

    __repr__ = _repr

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._key() == other._key()

    def __ne__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._key() != other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __lt__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._key() < other._key()

    def __le__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._key() <= other._key()

    def __gt__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._key() > other._key()

    def __ge__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._key() >= other._key()
