"""Whether a module's text names an identifier as a whole word: the first, cheap test of which
modules may call a function (``Callers.of``).

A call can only land on ``train_1`` from a module whose text holds ``train_1`` as a word (its
import, the call, the attribute): ``train_10`` does not count. The first few questions about a
module are answered by a search of its bytes; a module asked more often than that (one that
defines many functions, each looked for in turn) gets the set of its words, made once.

Measured on a file of 4,200 training functions (50,000 lines, 1.9 MB), linted alone: a search of
the whole text for each function, 4,200 searches, took 1.1 s, growing with the square of the
file's size (the run went from 5.05 to 3.75 s). The set of its words takes 0.03 s to make, as
long as about 110 searches, and holds more memory than the text: a module gets one only after
``SEARCHES`` questions. (On the 31-repository tree, where the checks ask every module about 34
names, sets made after 8 questions cost 0.2 s and 27 MB of peak memory.)
"""

from __future__ import annotations

import re

_WORD = re.compile(rb"\w+")  # ASCII letters, digits and underscores: bytes patterns are ASCII
_WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
SEARCHES = 128  # questions about one module answered by searching its text, before its word set


class Words:
    """The whole-word test for the modules of one run, keyed by the module's relative path."""

    __slots__ = ("_asked", "_sets")

    def __init__(self) -> None:
        self._asked: dict[str, int] = {}
        self._sets: dict[str, frozenset[bytes]] = {}

    def names(self, rel: str, data: bytes, word: str) -> bool:
        """Whether ``data`` (the text of ``rel``) holds ``word`` with no letter, digit or
        underscore on either side. A word that is not plain ASCII is searched as it is."""
        encoded = word.encode("utf-8")
        if not _WORD.fullmatch(encoded):
            return encoded in data  # not one ASCII word: as a substring (may call, never misses one)
        known = self._sets.get(rel)
        if known is None:
            asked = self._asked[rel] = self._asked.get(rel, 0) + 1
            if asked <= SEARCHES:
                return _whole(data, encoded)
            known = self._sets[rel] = frozenset(_WORD.findall(data))
        return encoded in known


def _whole(data: bytes, word: bytes) -> bool:
    """``word`` in ``data`` with no word character on either side (a search of the bytes, then a
    look at the two bytes around each place found)."""
    start = data.find(word)
    while start != -1:
        end = start + len(word)
        if (start == 0 or data[start - 1] not in _WORD_BYTES) and (end == len(data) or data[end] not in _WORD_BYTES):
            return True
        start = data.find(word, start + 1)
    return False
