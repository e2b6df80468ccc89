"""The ``rdjson`` format: reviewdog's Diagnostic Format, for ``reviewdog -f=rdjson``.

One ``DiagnosticResult`` object::

    {"source": {"name": "ampdoctor", "url": "https://pypi.org/project/ampdoctor/"},
     "severity": "ERROR",
     "diagnostics": [{"message": "Gradients are clipped ...",
                      "location": {"path": "train.py", "range": {"start": {"line": 9, "column": 5},
                                                                 "end": {"line": 9, "column": 60}}},
                      "severity": "ERROR", "code": {"value": "AMP201"},
                      "suggestions": [{"range": {...}, "text": "    scaler.unscale_(optimizer)\\n"}]}]}

Severities are ``ERROR``, ``WARNING`` and ``INFO``; the result's own is the most severe one
reported (``INFO`` when there is none). The rule pages live in the package (``ampdoctor rule
CODE``), not at an address, so ``code`` has no ``url``. Lines are 1-based; columns are 1-based
UTF-8 byte offsets, as the format defines them, counted on the source when it is at hand (else
the code point columns stand); ends are exclusive. Each edit of a finding's fix becomes one
suggestion (the text that replaces the range), whether the fix is safe or not: a reviewer
applies it or not. Related locations become ``related_locations``.

Notebooks: the lines count within a cell, so the message names the cell and line, and the fix
is left out, since its positions do not address lines of the ``.ipynb`` file.
"""

from __future__ import annotations

import json
import re
from pathlib import PurePath
from typing import Any, Optional, TextIO

from ...findings import Finding, Severity
from . import ReportContext, source_key
from .sarif import INFORMATION_URI

_SEVERITIES = {Severity.ERROR: "ERROR", Severity.WARNING: "WARNING", Severity.INFO: "INFO"}
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def render(ctx: ReportContext, stream: TextIO, *, color: bool) -> None:
    json.dump(diagnostic_result(ctx), stream, indent=2, allow_nan=False)
    stream.write("\n")


def diagnostic_result(ctx: ReportContext) -> dict[str, Any]:
    lines = _Lines(ctx)
    worst = max((f.severity for f in ctx.findings), default=Severity.INFO)
    return {
        "source": {"name": "ampdoctor", "url": INFORMATION_URI},
        "severity": _SEVERITIES.get(worst, "ERROR"),
        "diagnostics": [diagnostic(finding, lines) for finding in ctx.findings],
    }


class _Lines:
    """The lines of the sources in a report, each split once, to count columns in UTF-8 bytes."""

    def __init__(self, ctx: ReportContext) -> None:
        self._sources = ctx.sources
        self._split: dict[str, list[str] | None] = {}

    def get(self, key: str) -> list[str] | None:
        if key not in self._split:
            source = self._sources.get(key)
            self._split[key] = None if source is None else _LINE_BREAK.split(source)
        return self._split[key]


def diagnostic(finding: Finding, lines: _Lines) -> dict[str, Any]:
    loc = finding.location
    message = finding.message
    if loc.cell is not None:
        message = f"{message} (cell {loc.cell}, line {loc.line})"
    text = lines.get(source_key(loc.path, loc.cell))
    result: dict[str, Any] = {
        "message": message,
        "location": {
            "path": PurePath(loc.path).as_posix(),
            "range": _range(text, loc.line, loc.column, loc.end_line, loc.end_column),
        },
        "severity": _SEVERITIES.get(finding.severity, "ERROR"),
        "code": {"value": finding.code},
    }
    if finding.fix is not None and finding.fix.edits and loc.cell is None:
        result["suggestions"] = [
            {"range": _range(text, e.line, e.column, e.end_line, e.end_column), "text": e.content}
            for e in finding.fix.edits
        ]
    if finding.related:
        result["related_locations"] = [_related_location(related.to_dict(), lines) for related in finding.related]
    return result


def _related_location(related: dict[str, Any], lines: _Lines) -> dict[str, Any]:
    """A related location, from ``Related.to_dict()``."""
    path = related["path"]
    return {
        "message": related["message"],
        "location": {
            "path": PurePath(path).as_posix(),
            "range": _range(lines.get(path), related["line"], related["column"], None, None),
        },
    }


def _range(
    text: list[str] | None, line: int, column: int, end_line: Optional[int], end_column: Optional[int]
) -> dict[str, Any]:
    start = _position(text, line, column)
    if end_line is None or end_column is None:
        return {"start": start}
    return {"start": start, "end": _position(text, end_line, end_column)}


def _position(text: list[str] | None, line: int, column: int) -> dict[str, int]:
    return {"line": max(line, 1), "column": max(byte_column(text, line, column), 1)}


def byte_column(text: list[str] | None, line: int, column: int) -> int:
    """The 1-based UTF-8 byte column of the 1-based code point ``column`` on ``line``."""
    if text is None or not 0 < line <= len(text) or column < 1:
        return column
    before = text[line - 1][: column - 1]
    past_the_end = column - 1 - len(before)
    return len(before.encode("utf-8", "surrogatepass")) + past_the_end + 1
