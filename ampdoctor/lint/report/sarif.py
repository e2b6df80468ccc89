"""The ``sarif`` format: SARIF 2.1.0 for GitHub code scanning and other SARIF viewers.

One run; ``tool.driver.rules`` holds one entry per code that appears in the results, with the
rule page from the catalog as its help. Columns are 1-based Unicode code points and end columns
are exclusive, exactly as SARIF defines them. Paths are relative POSIX URIs under the
``%SRCROOT%`` base (an absolute path outside the current folder becomes a ``file:`` URI).

Notebooks: SARIF has no cells, and a notebook finding's line counts within its cell, so the
result's message names the cell and line and ``properties`` carries ``cell``; the region holds
the line and column within the cell. Fixes of notebook findings are left out, since their
positions do not address lines of the ``.ipynb`` file. A finding's related locations (another
function or module that explains it) become ``relatedLocations``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePath
from typing import Any, Optional, TextIO
from urllib.parse import quote

from ..._version import __version__
from ...catalog import Rule, get_rule
from ...findings import Edit, Finding, Severity
from . import ReportContext
from .json_ import jsonable

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://pypi.org/project/ampdoctor/"
SRCROOT = "%SRCROOT%"
# GitHub code scanning rejects longer descriptions.
_MAX_DESCRIPTION = 1000
_LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
_WHAT_IT_DOES = re.compile(r"^## What it does[ \t]*\n(.*?)(?=^#|\Z)", re.MULTILINE | re.DOTALL)


def render(ctx: ReportContext, stream: TextIO, *, color: bool) -> None:
    json.dump(sarif_log(ctx.findings), stream, indent=2, allow_nan=False)
    stream.write("\n")


def sarif_log(findings: list[Finding]) -> dict[str, Any]:
    codes = sorted({f.code for f in findings})
    index = {code: i for i, code in enumerate(codes)}
    severities: dict[str, Severity] = {}
    for finding in findings:
        severities.setdefault(finding.code, finding.severity)
    driver = {
        "name": "ampdoctor",
        "version": __version__,
        "semanticVersion": __version__,
        "informationUri": INFORMATION_URI,
        "rules": [_rule(code, severities[code]) for code in codes],
    }
    run = {
        "tool": {"driver": driver},
        "columnKind": "unicodeCodePoints",
        "results": [_result(f, index[f.code]) for f in findings],
    }
    return {"$schema": SCHEMA, "version": "2.1.0", "runs": [run]}


def _rule(code: str, seen: Severity) -> dict[str, Any]:
    rule = get_rule(code)
    if rule is None:
        # A code without a page is a defect elsewhere; it must still make a valid report.
        return {
            "id": code,
            "name": code,
            "shortDescription": {"text": code},
            "defaultConfiguration": {"level": _LEVELS.get(seen, "error")},
        }
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": _clip(rule.summary)},
        "fullDescription": {"text": _clip(_full_description(rule))},
        "help": {"text": rule.body.strip(), "markdown": rule.body.strip()},
        "defaultConfiguration": {"level": _LEVELS.get(rule.severity, "error")},
        "properties": {"tags": ["mixed-precision"], "fixable": rule.fixable},
    }


def _full_description(rule: Rule) -> str:
    match = _WHAT_IT_DOES.search(rule.body)
    text = " ".join(match.group(1).split()) if match else ""
    return text or rule.summary


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_DESCRIPTION else text[: _MAX_DESCRIPTION - 3] + "..."


def _result(finding: Finding, rule_index: int) -> dict[str, Any]:
    loc = finding.location
    message = finding.message
    if loc.cell is not None:
        message = f"{message} (cell {loc.cell}, line {loc.line})"
    region = _region(loc.line, loc.column, loc.end_line, loc.end_column)
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "ruleIndex": rule_index,
        "level": _LEVELS.get(finding.severity, "error"),
        "message": {"text": message},
        "locations": [{"physicalLocation": {"artifactLocation": artifact_location(loc.path), "region": region}}],
    }
    if finding.related:
        result["relatedLocations"] = [
            {
                "id": number,
                "physicalLocation": {
                    "artifactLocation": artifact_location(related.path),
                    "region": {"startLine": max(related.line, 1), "startColumn": max(related.column, 1)},
                },
                "message": {"text": related.message},
            }
            for number, related in enumerate(finding.related)
        ]
    if finding.fix is not None and finding.fix.edits and loc.cell is None:  # a module rewrite has none until applied
        result["fixes"] = [_fix(finding)]
    properties = {}
    if loc.cell is not None:
        properties["cell"] = loc.cell
    if finding.extra:
        properties["extra"] = jsonable(finding.extra)
    if properties:
        result["properties"] = properties
    return result


def _region(line: int, column: int, end_line: Optional[int], end_column: Optional[int]) -> dict[str, int]:
    end_line = line if end_line is None else max(end_line, line)
    if end_column is None:
        end_column = column + 1 if end_line == line else 1
    if end_line == line:
        end_column = max(end_column, column)
    return {
        "startLine": max(line, 1),
        "startColumn": max(column, 1),
        "endLine": max(end_line, 1),
        "endColumn": max(end_column, 1),
    }


def _fix(finding: Finding) -> dict[str, Any]:
    fix = finding.fix
    assert fix is not None
    return {
        "description": {"text": fix.description},
        "artifactChanges": [
            {
                "artifactLocation": artifact_location(finding.location.path),
                "replacements": [_replacement(edit) for edit in fix.edits],
            }
        ],
    }


def _replacement(edit: Edit) -> dict[str, Any]:
    replacement: dict[str, Any] = {"deletedRegion": _region(edit.line, edit.column, edit.end_line, edit.end_column)}
    if edit.content:
        replacement["insertedContent"] = {"text": edit.content}
    return replacement


def artifact_location(path: str) -> dict[str, str]:
    """A relative POSIX URI under ``%SRCROOT%``, or a ``file:`` URI for a path outside it."""
    pure = PurePath(path)
    if pure.is_absolute():
        try:
            pure = Path(path).resolve().relative_to(Path.cwd().resolve())
        except ValueError:
            return {"uri": Path(path).resolve().as_uri()}
    posix = pure.as_posix()
    while posix.startswith("./"):
        posix = posix[2:]
    # (a name's bytes that are not UTF-8, read as surrogates, are escaped as the bytes they are)
    return {"uri": quote(posix, safe="/", errors="surrogateescape"), "uriBaseId": SRCROOT}
