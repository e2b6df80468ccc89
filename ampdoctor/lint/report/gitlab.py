"""The ``gitlab`` format: a GitLab Code Quality report (a ``codequality`` artifact).

A JSON array, one object per finding::

    {"description": "AMP201 clip-before-unscale: Gradients are clipped ...", "check_name": "AMP201",
     "fingerprint": "3f0c...", "severity": "major",
     "location": {"path": "train.py", "lines": {"begin": 9, "end": 9}}}

``severity`` maps ampdoctor's error, warning and info to GitLab's ``major``, ``minor`` and
``info``. ``location.path`` is relative to ``$CI_PROJECT_DIR`` when that is set (as in a GitLab
job), else to the current folder, with ``/`` separators.

``fingerprint`` is how GitLab tells a finding that is new in a merge request from one that was
already there. It hashes the path, the code, the message and the text of the flagged line
(stripped), never the line number, so code added above a finding leaves its fingerprint alone.
Two findings that agree in all of these get the occurrence's number hashed in as well, in file
order, so that each fingerprint appears once in a report.

Notebooks: the lines count within a cell, so the description names the cell and line.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

from ...catalog import rule_name
from ...findings import Finding, Severity
from . import ReportContext, one_line

_SEVERITIES = {Severity.ERROR: "major", Severity.WARNING: "minor", Severity.INFO: "info"}
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def render(ctx: ReportContext, stream: TextIO, *, color: bool) -> None:
    base = project_dir()
    split: dict[tuple[str, int | None], list[str]] = {}  # each source is split once, not per finding
    seen: Counter[tuple[str, ...]] = Counter()
    issues = []
    for finding in ctx.findings:
        loc = finding.location
        if (loc.path, loc.cell) not in split:
            split[loc.path, loc.cell] = _LINE_BREAK.split(ctx.source_for(finding) or "")
        path = relative_path(loc.path, base)
        key = (path, finding.code, finding.message, _flagged_line(split[loc.path, loc.cell], loc.line))
        seen[key] += 1
        issues.append(issue(finding, path, fingerprint(key, seen[key])))
    json.dump(issues, stream, indent=2, allow_nan=False)
    stream.write("\n")


def project_dir() -> Path:
    """The folder report paths are relative to: ``$CI_PROJECT_DIR``, else the current folder."""
    return Path(os.environ.get("CI_PROJECT_DIR") or Path.cwd())


def issue(finding: Finding, path: str, fingerprint: str) -> dict[str, Any]:
    loc = finding.location
    name = rule_name(finding.code)
    title = finding.code if name == finding.code else f"{finding.code} {name}"
    description = f"{title}: {one_line(finding.message)}"
    if loc.cell is not None:
        description = f"{description} (cell {loc.cell}, line {loc.line})"
    end = loc.line if loc.end_line is None else max(loc.end_line, loc.line)
    return {
        "description": description,
        "check_name": finding.code,
        "fingerprint": fingerprint,
        "severity": _SEVERITIES.get(finding.severity, "major"),
        "location": {
            "path": path,
            "lines": {"begin": max(loc.line, 1), "end": max(end, 1)},
        },
    }


def relative_path(path: str, base: Path) -> str:
    """``path`` relative to ``base`` with ``/`` separators; absolute where it lies outside."""
    absolute = Path(path).resolve()
    try:
        return absolute.relative_to(base.resolve()).as_posix()
    except ValueError:
        return absolute.as_posix()


def fingerprint(identity: tuple[str, ...], occurrence: int) -> str:
    """The hash of a finding's identity and its occurrence number among equal identities."""
    digest = hashlib.sha256()
    for part in (*identity, str(occurrence)):
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()


def _flagged_line(lines: list[str], line: int) -> str:
    """The stripped text of a finding's first line; "" when the source is not at hand."""
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""
