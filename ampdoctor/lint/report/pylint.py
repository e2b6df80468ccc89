"""The ``pylint`` format: one line per finding, as pylint's parseable output prints it.

``train.py:9: [AMP201] Gradients are clipped before scaler.unscale_(optimizer).``

Nothing else is printed: no summary, no colour. In a notebook the location reads
``notebook.ipynb:cell 3:2``, the line counting within the cell, as the ``concise`` format has it.
"""

from __future__ import annotations

from typing import TextIO

from ...findings import Finding
from . import ReportContext, one_line


def render(ctx: ReportContext, stream: TextIO, *, color: bool) -> None:
    for finding in ctx.findings:
        stream.write(format_finding(finding) + "\n")


def format_finding(finding: Finding) -> str:
    loc = finding.location
    cell = f":cell {loc.cell}" if loc.cell is not None else ""
    return f"{loc.path}{cell}:{loc.line}: [{finding.code}] {one_line(finding.message)}"
