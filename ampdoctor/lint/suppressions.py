"""Suppression comments: ``# noqa``, ``# noqa: AMP201``, ``# ampdoctor: ignore[AMP201]``, the
file-level ``# ampdoctor: noqa`` / ``# ampdoctor: noqa: AMP201, AMP105`` (a comment on a line of its
own, anywhere in the file, as ruff's ``# ruff: noqa``), and the per-file ignores of the
configuration, applied to a file's findings."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ..findings import PARSE_ERROR, Finding

# Suppression comments (compiled on first use by ``re``: only lines with findings are read).
_NOQA = r"(?i)#\s*noqa\b(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:\s*,\s*[A-Za-z]+[0-9]+|\s+[A-Za-z]+[0-9]+)*))?"
_IGNORE = r"#\s*ampdoctor:\s*ignore\b(?:\[(?P<codes>[^\]]*)\])?"
_CODE = r"[A-Za-z]+[0-9]+"
_FILE_NOQA = r"(?m)^[ \t]*#[ \t]*ampdoctor:[ \t]*(?i:noqa)\b(?P<rest>[^\n]*)$"


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
    comments = _Comments(source)
    whole_file = file_suppressed(source)
    kept, suppressed = [], 0
    for finding in findings:
        noqa_lines = finding.extra.pop("_noqa_lines", None)
        if not isinstance(noqa_lines, list):
            noqa_lines = [finding.location.line]
        if any(finding.code.startswith(prefix) for prefix in ignored) and finding.code != PARSE_ERROR:
            continue
        if whole_file is not None and finding.code != PARSE_ERROR and (not whole_file or finding.code in whole_file):
            suppressed += 1
            continue
        if _is_suppressed(finding.code, noqa_lines, lines, comments):
            suppressed += 1
            continue
        kept.append(finding)
    return kept, suppressed


def file_suppressed(source: str) -> set[str] | None:
    """The file-level ``# ampdoctor: noqa`` comments: None when there is none, an empty set when
    one silences every code, else the codes they name. Only a comment on a line of its own
    counts (a string that holds the text is on a line that does not start with ``#``)."""
    if "ampdoctor:" not in source:
        return None
    found: set[str] | None = None
    for match in re.finditer(_FILE_NOQA, source):
        rest = match.group("rest").strip()
        if not rest:
            return set()
        if not rest.startswith(":"):
            continue  # ``# ampdoctor: noqa-ish``: not ours
        codes = {code.upper() for code in re.findall(_CODE, rest)}
        if not codes:
            return set()
        found = (found or set()) | codes
    return found


def _is_suppressed(code: str, line_numbers: Iterable[int], lines: list[str], comments: _Comments) -> bool:
    for number in line_numbers:
        if 1 <= number <= len(lines):
            line = lines[number - 1]
            codes = suppressed_codes(line)
            if codes is not None and ("'" in line or '"' in line):
                # A noqa inside a string does not suppress, only a comment: the tokenizer tells them apart.
                codes = suppressed_codes(comments.on(number))
            if codes is not None and (not codes or code in codes):
                return True
    return False


class _Comments:
    """The comment on each line, found by the tokenizer on first use: only a line that holds
    both a quote and a suppression's text needs it."""

    def __init__(self, source: str) -> None:
        self._source = source
        self._by_line: dict[int, str] | None = None

    def on(self, line: int) -> str:
        if self._by_line is None:
            import io
            import tokenize

            self._by_line = {}
            try:
                for token in tokenize.generate_tokens(io.StringIO(self._source).readline):
                    if token.type == tokenize.COMMENT:
                        self._by_line[token.start[0]] = token.string
            except (tokenize.TokenError, SyntaxError):
                pass  # the comments found before the error stand
        return self._by_line.get(line, "")
