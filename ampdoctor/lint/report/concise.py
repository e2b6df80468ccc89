"""The ``concise`` format: one line per finding, then the summary.

``train.py:9:5: AMP201 [error] Gradients are clipped before scaler.unscale_(optimizer).``
In a notebook the location reads ``notebook.ipynb:cell 3:2:5``.
"""

from __future__ import annotations

from typing import TextIO

from ...findings import Finding, Severity
from . import ReportContext, location_label, one_line, summary_lines

# ANSI SGR sequences: bold red, bold yellow, bold cyan.
_COLOURS = {Severity.ERROR: "1;31", Severity.WARNING: "1;33", Severity.INFO: "1;36"}


def render(ctx: ReportContext, stream: TextIO, *, color: bool) -> None:
    for finding in ctx.findings:
        stream.write(format_finding(finding, color=color) + "\n")
    for line in summary_lines(ctx):
        stream.write(line + "\n")


def format_finding(finding: Finding, *, color: bool = False) -> str:
    code = finding.code
    if color:
        code = f"\x1b[{_COLOURS.get(finding.severity, '1')}m{code}\x1b[0m"
    return f"{location_label(finding.location)}: {code} [{finding.severity.label}] {one_line(finding.message)}"
