"""The ``text`` format: each finding with its source line, the span underlined, and a summary.

::

    train.py:9:5: AMP201 Gradients are clipped before scaler.unscale_(optimizer).
      |
    9 |     torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
      |     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
      |
    help: Insert `scaler.unscale_(optimizer)` before clipping

A finding whose cause lies in another function or module adds its related locations before
``help:``, one ``note:`` line each, followed by ``  --> path:line:column``.

Each line is built as (text, style) pieces. Without colour the pieces are joined as they are:
plain text, no escape codes, nothing wrapped. With colour each styled piece is wrapped in an
ANSI SGR sequence, as the ``concise`` format does. Nothing the user wrote (paths, messages,
source) is interpreted: ``[bold]`` in a message is printed as it is, and control characters
that would move the cursor (carriage return, backspace, form feed, vertical tab, bell) are
dropped. No rich here: importing it costs more than linting a typical training script, and
this is what a pre-commit hook prints when it blocks a commit.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

from ...catalog import rule_name
from ...findings import Finding, Severity
from . import ReportContext, location_label, one_line, summary_lines

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import TextIO

TAB_SIZE = 4
# ANSI SGR parameters of the styles used here.
_SGR = {"bold": "1", "bold red": "1;31", "bold yellow": "1;33", "bold cyan": "1;36", "bold blue": "1;34"}
_SEVERITY_STYLE = {
    Severity.ERROR: "bold red",
    Severity.WARNING: "bold yellow",
    Severity.INFO: "bold cyan",
}
_GUTTER = "bold blue"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# Bell, backspace, vertical tab, form feed, carriage return: removed from everything printed.
_CURSOR_CONTROLS = dict.fromkeys((7, 8, 11, 12, 13))

Piece = tuple[str, "str | None"]  # (text, style)


def render(ctx: ReportContext, stream: TextIO, *, color: bool) -> None:
    split: dict[tuple[str, int | None], list[str] | None] = {}  # each source is split once, not per finding
    for finding in ctx.findings:
        key = (finding.location.path, finding.location.cell)
        if key not in split:
            source = ctx.source_for(finding)
            split[key] = None if source is None else _LINE_BREAK.split(source)
        for line in finding_block(finding, split[key]):
            stream.write(_format(line, color))
    for summary in summary_lines(ctx):
        stream.write(_format([(summary, "bold")], color))
    codes = None if ctx.quiet else codes_line(ctx.findings)
    if codes:
        stream.write(_format([(codes, None)], color))


def _format(pieces: list[Piece], color: bool) -> str:
    """One output line; tabs expand by their column in the line as printed (escapes take none)."""
    out = []
    column = 0
    for text, style in pieces:
        text = text.translate(_CURSOR_CONTROLS)
        if "\t" in text:
            text = (" " * column + text).expandtabs(TAB_SIZE)[column:]
        column += len(text)
        if color and style and text:
            text = f"\x1b[{_SGR[style]}m{text}\x1b[0m"
        out.append(text)
    return "".join(out) + "\n"


def finding_block(finding: Finding, source_lines: list[str] | None) -> list[list[Piece]]:
    """The lines for one finding: header, snippet, help, and a blank separator."""
    lines = [_header(finding)]
    lines.extend(_snippet(finding, source_lines))
    for related in finding.related:
        # As rustc prints a secondary note: what it says, then where.
        lines.append([("note", "bold cyan"), (": " + one_line(related.message), None)])
        lines.append([("  --> ", _GUTTER), (f"{related.path}:{related.line}:{related.column}", None)])
    help_text = finding.help_text
    if help_text:
        lines.append([("help", "bold cyan"), (": " + one_line(help_text), None)])
    lines.append([])
    return lines


def _header(finding: Finding) -> list[Piece]:
    return [
        (location_label(finding.location) + ":", "bold"),
        (" ", None),
        (finding.code, _SEVERITY_STYLE.get(finding.severity, "bold")),
        (" " + one_line(finding.message), None),
    ]


def _snippet(finding: Finding, source_lines: list[str] | None) -> list[list[Piece]]:
    loc = finding.location
    if source_lines is None or not 1 <= loc.line <= len(source_lines):
        return []
    raw = source_lines[loc.line - 1]
    start, end = _span_columns(raw, loc.line, loc.column, loc.end_line, loc.end_column)
    # Tabs are expanded before measuring, so the carets are measured on the text as shown (the
    # control characters that printing drops take no cell).
    before = raw[:start].expandtabs(TAB_SIZE)
    through = raw[:end].expandtabs(TAB_SIZE)
    shown = raw.expandtabs(TAB_SIZE)
    offset = cell_len(before)
    width = max(1, cell_len(through) - offset)

    number = str(loc.line)
    pad = " " * len(number)
    code_line: list[Piece] = [(f"{number} |", _GUTTER)]
    if shown:
        code_line.append((" " + shown, None))
    style = _SEVERITY_STYLE.get(finding.severity, "bold")
    carets = [(f"{pad} |", _GUTTER), (" " + " " * offset, None), ("^" * width, style)]
    return [[(f"{pad} |", _GUTTER)], code_line, carets, [(f"{pad} |", _GUTTER)]]


def cell_len(text: str) -> int:
    """How many terminal cells ``text`` takes: wide (East Asian wide and full-width) characters
    two, combining marks, format characters and control characters none, the rest one."""
    if text.isascii() and text.isprintable():
        return len(text)
    width = 0
    for char in text:
        code = ord(char)
        if code < 32 or 0x7F <= code < 0xA0 or unicodedata.category(char) in ("Mn", "Me", "Cf"):
            continue
        width += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return width


def _span_columns(raw: str, line: int, column: int, end_line: int | None, end_column: int | None) -> tuple[int, int]:
    """0-based [start, end) of the span on its first line; a multi-line span runs to the end."""
    start = min(max(column - 1, 0), len(raw))
    if end_line is not None and end_line > line:
        end = len(raw)
    elif end_column is not None:
        end = end_column - 1
    else:
        end = start + 1
    return start, min(max(end, start), len(raw))


def codes_line(findings: list[Finding]) -> str | None:
    """``Codes: AMP201 clip-before-unscale (2), ... Run 'ampdoctor rule AMP201' for details.``"""
    counts = Counter(f.code for f in findings)
    if not counts:
        return None
    codes = sorted(counts)
    listed = ", ".join(f"{_code_and_name(code)} ({counts[code]})" for code in codes)
    target = codes[0] if len(codes) == 1 else "CODE"
    return f"Codes: {listed}. Run 'ampdoctor rule {target}' for details."


def _code_and_name(code: str) -> str:
    name = rule_name(code)
    return code if name == code else f"{code} {name}"
