"""The ``github`` format: GitHub Actions workflow commands that annotate the pull request.

``::error file=train.py,line=9,col=5,endLine=9,endColumn=60,title=AMP201 clip-before-unscale::...``

The command is ``error``, ``warning`` or ``notice`` by severity. Values are escaped as the
Actions runner expects (``%``, CR and LF in the message; also ``:`` and ``,`` in properties).
A notebook's lines count within a cell, which GitHub cannot show on the ``.ipynb`` file, so a
notebook finding annotates the file and names the cell and line in its message.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import TextIO

from ...catalog import rule_name
from ...findings import Finding, Severity
from . import ReportContext

_COMMANDS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def render(ctx: ReportContext, stream: TextIO, *, color: bool) -> None:
    for finding in ctx.findings:
        stream.write(annotation(finding) + "\n")


def annotation(finding: Finding) -> str:
    loc = finding.location
    props: list[tuple[str, object]] = [("file", PurePath(loc.path).as_posix())]
    message = finding.message
    if loc.cell is None:
        props += [("line", loc.line), ("col", loc.column)]
        if loc.end_line is not None:
            props.append(("endLine", loc.end_line))
        if loc.end_column is not None:
            props.append(("endColumn", loc.end_column))
    else:
        message = f"cell {loc.cell}, line {loc.line}, column {loc.column}: {message}"
    name = rule_name(finding.code)
    props.append(("title", finding.code if name == finding.code else f"{finding.code} {name}"))
    command = _COMMANDS.get(finding.severity, "error")
    rendered = ",".join(f"{key}={escape_property(str(value))}" for key, value in props)
    return f"::{command} {rendered}::{escape_data(message)}"


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")
