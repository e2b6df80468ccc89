"""Positions between ampdoctor and a language client.

ampdoctor's findings and edits count 1-based lines and 1-based columns in characters (code points:
``findings.py``). The Language Server Protocol counts 0-based lines and 0-based columns in code
units of the position encoding the client and server agreed on: UTF-16 unless both chose UTF-8 or
UTF-32. A character outside the Basic Multilingual Plane (an emoji, ``𝄞``) is one code point, two
UTF-16 units and four UTF-8 bytes. Lines break where Python's tokenizer and the protocol both
break them: LF, CRLF, CR (``str.splitlines`` would also break at form feeds and other separators).
"""

from __future__ import annotations

import re

UTF8, UTF16, UTF32 = "utf-8", "utf-16", "utf-32"
_BREAK = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """The lines of ``text`` without their endings; a text ending in a break has an empty last line."""
    return _BREAK.split(text)


def _units(char: str, encoding: str) -> int:
    code = ord(char)
    if encoding == UTF8:
        return 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4
    if encoding == UTF32:
        return 1
    return 2 if code >= 0x10000 else 1


def units_before(line_text: str, index: int, encoding: str = UTF16) -> int:
    """The code units of the first ``index`` characters of a line. Characters past the line's end
    (a position on its line break) count one unit each."""
    prefix = line_text[:index]
    if encoding == UTF32 or prefix.isascii():
        count = len(prefix)
    elif encoding == UTF8:
        count = len(prefix.encode("utf-8", "surrogatepass"))
    else:
        count = len(prefix) + sum(1 for char in prefix if ord(char) >= 0x10000)
    return count + max(0, index - len(line_text))


def char_index(line_text: str, units: int, encoding: str = UTF16) -> int:
    """The character index (0-based) at ``units`` code units into a line. A position inside a
    character (between the two halves of a surrogate pair) moves to that character's end; one past
    the line's end stays past it."""
    if encoding == UTF32 or line_text.isascii():
        return units
    seen = 0
    for index, char in enumerate(line_text):
        if seen >= units:
            return index
        seen += _units(char, encoding)
    return len(line_text) + max(0, units - seen)


class Converter:
    """Converts positions of one text: ampdoctor's (1-based line, 1-based character column) to
    the protocol's (0-based line, 0-based code units) and back."""

    def __init__(self, text: str, encoding: str = UTF16) -> None:
        self.lines = split_lines(text)
        self.encoding = encoding

    def _line(self, index: int) -> str:
        return self.lines[index] if 0 <= index < len(self.lines) else ""

    def to_client(self, line: int, column: int) -> tuple[int, int]:
        """(0-based line, code units) of a 1-based line and column. A line past the text's end is
        the end of the text (a parse error reported after the last line)."""
        index = line - 1
        if index >= len(self.lines):
            last = len(self.lines) - 1
            return last, units_before(self.lines[last], len(self.lines[last]), self.encoding)
        index = max(index, 0)
        return index, units_before(self._line(index), max(column - 1, 0), self.encoding)

    def to_ampdoctor(self, line: int, character: int) -> tuple[int, int]:
        """(1-based line, 1-based character column) of a protocol position."""
        return line + 1, char_index(self._line(line), character, self.encoding) + 1

    def line_text(self, line: int) -> str:
        """The text of a 1-based line ("" past the end)."""
        return self._line(line - 1)
