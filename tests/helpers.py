"""Shared test helpers: lint a text with every rule, apply fixes, read ``# expect:`` markers."""

from __future__ import annotations

import re

from ampdoctor.lint import known_codes
from ampdoctor.lint.engine import LintOptions, check_source, fix_source

_EXPECT_SUFFIX = re.compile(r"[ \t]*#\s*expect:\s*AMP\d{3}(?:[\s,]+AMP\d{3})*[ \t]*$", re.M)
_EXPECT = re.compile(r"#\s*expect:\s*((?:AMP\d{3}[\s,]*)+)")


def all_options(**kwargs) -> LintOptions:
    return LintOptions(codes=frozenset(known_codes()), **kwargs)


def lint_text(source: str, path: str = "example.py", **kwargs):
    findings, _suppressed, _parsed = check_source(source, path, all_options(**kwargs))
    return findings


def found_pairs(source: str, path: str = "example.py") -> list[tuple[int, str]]:
    return sorted((f.location.line, f.code) for f in lint_text(source, path))


def expected_pairs(source: str) -> list[tuple[int, str]]:
    pairs = []
    for number, line in enumerate(source.splitlines(), start=1):
        marker = _EXPECT.search(line)
        if marker:
            pairs.extend((number, code) for code in re.findall(r"AMP\d{3}", marker.group(1)))
    return sorted(pairs)


def strip_markers(source: str) -> str:
    return _EXPECT_SUFFIX.sub("", source)


def fix_text(source: str, unsafe: bool = False) -> str:
    new_source, _fixed, _findings, _suppressed, _parsed = fix_source(
        source, "example.py", all_options(fix=True, unsafe_fixes=unsafe)
    )
    return new_source
