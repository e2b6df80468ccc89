"""The ``text`` format: each finding with its source line, the span underlined, and a summary.

::

    train.py:9:5: AMP201 Gradients are clipped before scaler.unscale_(optimizer).
      |
    9 |     torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
      |     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
      |
    help: Insert `scaler.unscale_(optimizer)` before clipping

Everything the user wrote (paths, messages, source) goes into rich ``Text`` objects, never
through markup, so ``[bold]`` in a message is printed as it is. Without colour the output is
plain text: no escape codes, nothing wrapped.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Optional, TextIO

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from ..catalog import rule_name
from ..findings import Finding, Severity
from . import ReportContext, location_label, one_line, summary_lines

TAB_SIZE = 4
_SEVERITY_STYLE = {
    Severity.ERROR: "bold red",
    Severity.WARNING: "bold yellow",
    Severity.INFO: "bold cyan",
}
_GUTTER = "bold blue"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def render(ctx: ReportContext, stream: TextIO, *, color: bool) -> None:
    console = Console(
        file=stream,
        force_terminal=color,
        no_color=not color,
        color_system="standard" if color else None,
        force_jupyter=False,
        legacy_windows=False,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=True,
        width=1_000_000,
        tab_size=TAB_SIZE,
    )
    split: dict[tuple, Optional[list[str]]] = {}  # each source is split once, not per finding
    for finding in ctx.findings:
        key = (finding.location.path, finding.location.cell)
        if key not in split:
            source = ctx.source_for(finding)
            split[key] = None if source is None else _LINE_BREAK.split(source)
        for line in finding_block(finding, split[key]):
            console.print(line)
    for line in summary_lines(ctx):
        console.print(Text(line, style="bold"))
    codes = codes_line(ctx.findings)
    if codes:
        console.print(codes)


def finding_block(finding: Finding, source_lines: Optional[list[str]]) -> list[Text]:
    """The lines for one finding: header, snippet, help, and a blank separator."""
    lines = [_header(finding)]
    lines.extend(_snippet(finding, source_lines))
    help_text = finding.help_text
    if help_text:
        lines.append(Text.assemble(("help", "bold cyan"), ": " + one_line(help_text)))
    lines.append(Text(""))
    return lines


def _header(finding: Finding) -> Text:
    header = Text()
    header.append(location_label(finding.location) + ":", style="bold")
    header.append(" ")
    header.append(finding.code, style=_SEVERITY_STYLE.get(finding.severity, "bold"))
    header.append(" " + one_line(finding.message))
    return header


def _snippet(finding: Finding, source_lines: Optional[list[str]]) -> list[Text]:
    loc = finding.location
    if source_lines is None or not 1 <= loc.line <= len(source_lines):
        return []
    raw = source_lines[loc.line - 1]
    start, end = _span_columns(raw, loc.line, loc.column, loc.end_line, loc.end_column)
    # Tabs are expanded here rather than by rich so the carets are measured on the same text.
    before = raw[:start].expandtabs(TAB_SIZE)
    through = raw[:end].expandtabs(TAB_SIZE)
    shown = raw.expandtabs(TAB_SIZE)
    offset = cell_len(before)
    width = max(1, cell_len(through) - offset)

    number = str(loc.line)
    pad = " " * len(number)
    style = _SEVERITY_STYLE.get(finding.severity, "bold")
    code_line = Text()
    code_line.append(f"{number} |", style=_GUTTER)
    if shown:
        code_line.append(" " + shown)
    carets = Text()
    carets.append(f"{pad} |", style=_GUTTER)
    carets.append(" " + " " * offset)
    carets.append("^" * width, style=style)
    return [Text(f"{pad} |", style=_GUTTER), code_line, carets, Text(f"{pad} |", style=_GUTTER)]


def _span_columns(
    raw: str, line: int, column: int, end_line: Optional[int], end_column: Optional[int]
) -> tuple[int, int]:
    """0-based [start, end) of the span on its first line; a multi-line span runs to the end."""
    start = min(max(column - 1, 0), len(raw))
    if end_line is not None and end_line > line:
        end = len(raw)
    elif end_column is not None:
        end = end_column - 1
    else:
        end = start + 1
    return start, min(max(end, start), len(raw))


def codes_line(findings: list[Finding]) -> Optional[Text]:
    """``Codes: AMP201 clip-before-unscale (2), ... Run 'ampdoctor rule AMP201' for details.``"""
    counts = Counter(f.code for f in findings)
    if not counts:
        return None
    codes = sorted(counts)
    listed = ", ".join(f"{_code_and_name(code)} ({counts[code]})" for code in codes)
    target = codes[0] if len(codes) == 1 else "CODE"
    return Text(f"Codes: {listed}. Run 'ampdoctor rule {target}' for details.")


def _code_and_name(code: str) -> str:
    name = rule_name(code)
    return code if name == code else f"{code} {name}"
