"""The ``grouped`` format: the findings under a header line for each file, then the summary.

::

    train.py:
      3:10 AMP401 `torch.cuda.amp.GradScaler` is deprecated
      9:5  AMP201 Gradients are clipped before scaler.unscale_(optimizer).

    Found 2 problems (1 fixable with --fix).

Positions are padded to line the codes up within a file. A notebook's positions name the cell
(``cell 3:2:5``). With colour the header is bold and the code takes its severity's colour, as in
the ``concise`` format; the summary is the one ``text`` and ``concise`` print.
"""

from __future__ import annotations

from typing import TextIO

from ...findings import Finding, Severity
from . import ReportContext, one_line, summary_lines

# ANSI SGR sequences: bold red, bold yellow, bold cyan.
_COLOURS = {Severity.ERROR: "1;31", Severity.WARNING: "1;33", Severity.INFO: "1;36"}


def render(ctx: ReportContext, stream: TextIO, *, color: bool) -> None:
    groups: dict[str, list[Finding]] = {}
    for finding in ctx.findings:
        groups.setdefault(finding.location.path, []).append(finding)
    for path, findings in groups.items():
        for line in group_lines(path, findings, color=color):
            stream.write(line + "\n")
        stream.write("\n")
    for line in summary_lines(ctx):
        stream.write(line + "\n")


def group_lines(path: str, findings: list[Finding], *, color: bool = False) -> list[str]:
    """The header and one indented line per finding of one file."""
    header = f"{path}:"
    lines = [f"\x1b[1m{header}\x1b[0m" if color else header]
    positions = [position(finding) for finding in findings]
    width = max(len(text) for text in positions)
    for finding, text in zip(findings, positions):
        code = finding.code
        if color:
            code = f"\x1b[{_COLOURS.get(finding.severity, '1')}m{code}\x1b[0m"
        lines.append(f"  {text.ljust(width)} {code} {one_line(finding.message)}")
    return lines


def position(finding: Finding) -> str:
    """``line:col``, or ``cell 3:line:col`` in a notebook."""
    loc = finding.location
    cell = f"cell {loc.cell}:" if loc.cell is not None else ""
    return f"{cell}{loc.line}:{loc.column}"
