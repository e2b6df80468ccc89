"""Suppression comments: ``# noqa``, ``# noqa: AMP201``, ``# ampdoctor: ignore[AMP201]``, and the
per-file ignores of the configuration, applied to a file's findings."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ..findings import PARSE_ERROR, Finding

# Suppression comments (compiled on first use by ``re``: only lines with findings are read).
_NOQA = r"(?i)#\s*noqa\b(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:\s*,\s*[A-Za-z]+[0-9]+|\s+[A-Za-z]+[0-9]+)*))?"
_IGNORE = r"#\s*ampdoctor:\s*ignore\b(?:\[(?P<codes>[^\]]*)\])?"
_CODE = r"[A-Za-z]+[0-9]+"


def suppressed_codes(line: str) -> set[str] | None:
    """None: nothing suppressed; empty set: everything; else the codes named."""
    if "#" not in line:
        return None
    result: set[str] | None = None
    for pattern in (_NOQA, _IGNORE):
        for match in re.finditer(pattern, line):
            codes = match.group("codes")
            if not codes:
                return set()
            result = (result or set()) | {c.upper() for c in re.findall(_CODE, codes)}
    return result


def apply_suppressions(findings: list[Finding], source: str, ignored: Sequence[str]) -> tuple[list[Finding], int]:
    """The findings kept (neither ignored for the file by a code prefix in ``ignored`` nor
    suppressed by a comment on one of their lines) and how many comments suppressed."""
    lines = source.splitlines()
    kept, suppressed = [], 0
    for finding in findings:
        noqa_lines = finding.extra.pop("_noqa_lines", None)
        if not isinstance(noqa_lines, list):
            noqa_lines = [finding.location.line]
        if any(finding.code.startswith(prefix) for prefix in ignored) and finding.code != PARSE_ERROR:
            continue
        if _is_suppressed(finding.code, noqa_lines, lines):
            suppressed += 1
            continue
        kept.append(finding)
    return kept, suppressed


def _is_suppressed(code: str, line_numbers: Iterable[int], lines: list[str]) -> bool:
    for number in line_numbers:
        if 1 <= number <= len(lines):
            codes = suppressed_codes(lines[number - 1])
            if codes is not None and (not codes or code in codes):
                return True
    return False
