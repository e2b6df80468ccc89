"""The rule catalog: ``rules/AMPxxx.md`` is the one source of names, severities and docs.

A page starts with front matter between ``---`` lines (``key: value`` pairs), then Markdown.
Fenced code blocks whose info string is ``python bad``, ``python good`` or ``python fixed`` are
executable examples: the tests lint every ``bad`` block and expect exactly the codes marked with
``# expect: CODE`` comments on their lines, lint every ``good`` block and expect nothing, and
check that ``--fix`` turns the preceding ``bad`` block into a ``fixed`` block.

The pages live in the source tree at ``rules/`` and in the wheel at ``ampdoctor/_rules/``.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from .records import Value
from .severity import Severity

_FRONT_KEYS = {"code", "name", "severity", "fixable", "origin", "summary"}
_FIXABLE = {"no", "safe", "unsafe", "sometimes"}
_ORIGINS = {"lint", "trace"}
# Patterns of the examples, compiled on first use (linting never reads the examples).
_FENCE = r"^```([^\n`]*)\n(.*?)^```\s*$"
_EXPECT = r"#\s*expect:\s*((?:AMP\d{3}[\s,]*)+)"
_CODE = r"AMP\d{3}"


class CatalogError(Exception):
    """A rule page is malformed (a defect in ampdoctor itself, caught by the tests)."""


class Example(Value):
    """One fenced example of a page.

    ``kind``: "bad", "good" or "fixed"; ``page_line``: the line of the opening fence in the
    page, so failures can point at the docs; ``expected``: (line within the example, code)
    pairs from ``# expect: CODE`` markers; ``options``: extra words on the fence line after the
    kind, e.g. ``python bad unsafe-fixes``.
    """

    __slots__ = ("kind", "source", "page_line", "expected", "options")
    kind: str
    source: str
    page_line: int
    expected: tuple[tuple[int, str], ...]
    options: tuple[str, ...]

    def __init__(
        self,
        kind: str,
        source: str,
        page_line: int,
        expected: tuple[tuple[int, str], ...] = (),
        options: tuple[str, ...] = (),
    ) -> None:
        self._set(kind, source, page_line, expected, options)


class Rule(Value):
    """One rule page: its front matter, its Markdown body and where the body starts
    (``body_line``: lines before the body in the page)."""

    __slots__ = ("code", "name", "severity", "fixable", "origin", "summary", "body", "path", "body_line")
    code: str
    name: str
    severity: Severity
    fixable: str
    origin: str
    summary: str
    body: str
    path: Path
    body_line: int

    def __init__(
        self,
        code: str,
        name: str,
        severity: Severity,
        fixable: str,
        origin: str,
        summary: str,
        body: str,
        path: Path,
        body_line: int = 0,
    ) -> None:
        self._set(code, name, severity, fixable, origin, summary, body, path, body_line)

    @property
    def examples(self) -> tuple[Example, ...]:
        """The page's bad/good/fixed examples (parsed on first use: linting never needs them)."""
        return _parse_examples(self.body, self.body_line)


def rules_dir() -> Path:
    """Where the pages are: shipped inside the package, or the checkout's ``rules/``."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_rules", here.parent / "rules"):
        if candidate.is_dir():
            return candidate
    raise CatalogError("rule pages not found (expected ampdoctor/_rules or rules/)")


def _parse_front_matter(text: str, path: Path) -> tuple[dict[str, str], str, int]:
    if not text.startswith("---\n"):
        raise CatalogError(f"{path.name}: missing front matter")
    end = text.find("\n---\n", 4)
    if end < 0:
        raise CatalogError(f"{path.name}: unterminated front matter")
    meta: dict[str, str] = {}
    for raw in text[4:end].splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        key, sep, value = raw.partition(":")
        if not sep:
            raise CatalogError(f"{path.name}: bad front matter line {raw!r}")
        meta[key.strip()] = value.strip()
    body_start = end + len("\n---\n")
    return meta, text[body_start:], text[:body_start].count("\n")


@functools.cache
def _parse_examples(body: str, line_offset: int) -> tuple[Example, ...]:
    examples = []
    for match in re.finditer(_FENCE, body, re.DOTALL | re.MULTILINE):
        words = match.group(1).split()
        if len(words) < 2 or words[0] != "python" or words[1] not in ("bad", "good", "fixed"):
            continue
        source = match.group(2)
        expected: list[tuple[int, str]] = []
        for number, line in enumerate(source.splitlines(), start=1):
            marker = re.search(_EXPECT, line)
            if marker:
                expected.extend((number, code) for code in re.findall(_CODE, marker.group(1)))
        page_line = line_offset + body.count("\n", 0, match.start()) + 1
        examples.append(Example(words[1], source, page_line, tuple(expected), tuple(words[2:])))
    return tuple(examples)


def load_rule(path: Path) -> Rule:
    text = path.read_text(encoding="utf-8")
    meta, body, offset = _parse_front_matter(text, path)
    unknown = set(meta) - _FRONT_KEYS
    missing = _FRONT_KEYS - set(meta)
    if unknown or missing:
        raise CatalogError(f"{path.name}: front matter keys unknown {sorted(unknown)} missing {sorted(missing)}")
    if meta["code"] != path.stem:
        raise CatalogError(f"{path.name}: code {meta['code']} does not match the file name")
    if meta["fixable"] not in _FIXABLE:
        raise CatalogError(f"{path.name}: fixable must be one of {sorted(_FIXABLE)}")
    if meta["origin"] not in _ORIGINS:
        raise CatalogError(f"{path.name}: origin must be one of {sorted(_ORIGINS)}")
    try:
        severity = Severity.parse(meta["severity"])
    except ValueError as exc:
        raise CatalogError(f"{path.name}: {exc}") from None
    return Rule(
        code=meta["code"],
        name=meta["name"],
        severity=severity,
        fixable=meta["fixable"],
        origin=meta["origin"],
        summary=meta["summary"],
        body=body,
        path=path,
        body_line=offset,
    )


@functools.cache
def all_rules() -> dict[str, Rule]:
    """Every rule page, by code, in code order."""
    rules = {}
    folder = rules_dir()
    for name in sorted(os.listdir(folder)):
        if not (name.startswith("AMP") and name.endswith(".md")):
            continue
        rule = load_rule(folder / name)
        rules[rule.code] = rule
    return rules


def get_rule(code: str) -> Rule | None:
    return all_rules().get(code.upper())


def rule_name(code: str) -> str:
    rule = get_rule(code)
    return rule.name if rule else code


def severity_of(code: str) -> Severity:
    rule = get_rule(code)
    return rule.severity if rule else Severity.ERROR


def find_rule(key: str) -> Rule | None:
    """Look a rule up by code (``AMP201``, ``amp201``) or by name (``clip-before-unscale``)."""
    rule = get_rule(key)
    if rule:
        return rule
    for candidate in all_rules().values():
        if candidate.name == key.strip().lower():
            return candidate
    return None
