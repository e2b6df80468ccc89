"""How a field's entries are named in a function's value flow: ``self.env["generators"] = net``
is a store into field ``env`` under key ``generators`` (``env[generators``), read back by
``self.env["generators"]`` alone, while ``self.env`` whole holds what every key holds."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

# A key that may name a field's entry in an atom: no separator of the atoms' syntax in it.
_KEY = re.compile(r"[\w.\-]+")


def field_key(subscript: ast.Subscript, first: str | None) -> str | None:
    """``self.env["generators"]``: the field and its key as one name, ``env[generators``, or None
    where the subscript is not of a field of the function's own object by a plain string key.
    A field's value then holds what is stored under each of its keys, and the entry of one key
    only what is stored under it and what the field is given whole (``flow.field``): a dict of
    shared state that holds the optimizers under one key does not make every entry of it one."""
    owner = subscript.value
    index = subscript.slice
    if (
        first is None
        or type(owner) is not ast.Attribute
        or type(owner.value) is not ast.Name
        or owner.value.id != first
        or type(index) is not ast.Constant
        or type(index.value) is not str
        or _KEY.fullmatch(index.value) is None
    ):
        return None
    return f"{owner.attr}[{index.value}"


def field_stores(stores: dict[str, list[str]], name: str) -> Iterable[list[str]]:
    """What a function stores into field ``name`` of its object: into the field whole and under
    each of its keys (``self.env["k"] = v``, stored as ``env[k``); for one key's entry
    (``env[k``), what the field is given whole and what is stored under that key alone."""
    field, keyed, _key = name.partition("[")
    whole = stores.get(field)
    if whole:
        yield whole
    if keyed:
        under = stores.get(name)
        if under:
            yield under
        return
    prefix = name + "["
    for stored_name, stored in stores.items():
        if stored_name.startswith(prefix):
            yield stored
