"""``# noqa`` comments for the editor: the edit that suppresses a finding on its line, and the
rule code under the cursor in a comment that names codes.

The comments are those ``lint/suppressions.py`` honours: ``# noqa: AMP201``, several codes
separated by commas or spaces (``# noqa: AMP201, AMP204``), ``# ampdoctor: ignore[AMP201]`` and
the file-wide ``# ampdoctor: noqa: AMP201``.
The edit is the one ``ampdoctor lint --add-noqa`` makes (``lint/add_noqa.py``): a line that
already has a ``# noqa:`` list gets the code added to it; any other line gets ``  # noqa: CODE``
at its end, after a comment it may have. A line whose end is inside a string or continued by a
backslash cannot take a comment there: no edit is offered for it.
"""

from __future__ import annotations

import re

from ..lint.add_noqa import NOQA_CODES, comments_and_open_ends, directive_edit
from ..records import Record

_IGNORE_LIST = re.compile(r"#\s*ampdoctor:\s*ignore\[(?P<codes>[^\]]*)\]")
_FILE_LIST = re.compile(r"(?i)#\s*ampdoctor:\s*noqa:(?P<codes>[^#]*)")
_CODE = re.compile(r"[A-Za-z]+[0-9]+")


class LineEdit(Record):
    """Replace the characters ``index`` to ``end`` (0-based, end exclusive) of a 1-based line with
    ``text``."""

    __slots__ = ("line", "index", "end", "text")

    def __init__(self, line: int, index: int, end: int, text: str) -> None:
        self.line = line
        self.index = index
        self.end = end
        self.text = text


def noqa_edit(source: str, line: int, code: str, line_text: str) -> LineEdit | None:
    """The edit that makes line ``line`` (whose text is ``line_text``) suppress ``code``; None when
    the line's end cannot take a comment, or the line names the code already (what
    ``ampdoctor lint --add-noqa`` writes: ``lint/add_noqa.py``)."""
    comments, open_ends = comments_and_open_ends(source)
    if line in open_ends:
        return None
    edit = directive_edit(line_text, comments.get(line), [code])
    return None if edit is None else LineEdit(line, *edit)


def code_at(line_text: str, index: int) -> str | None:
    """The rule code at 0-based character ``index`` of a line, when it is in a suppression
    comment's list of codes."""
    for pattern in (NOQA_CODES, _IGNORE_LIST, _FILE_LIST):
        for match in pattern.finditer(line_text):
            start = match.start("codes")
            for code in _CODE.finditer(match.group("codes")):
                if start + code.start() <= index <= start + code.end():
                    return code.group().upper()
    return None
