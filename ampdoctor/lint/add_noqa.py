"""``ampdoctor lint --add-noqa``: a ``# noqa: CODE`` comment on every line with a finding, so that
a codebase adopting a rule starts clean and only new code is held to it (ruff's ``--add-noqa``).

A line that already has a ``# noqa: ...`` comment gets the new codes added to its list; another
comment keeps its text and the directive follows it. A line whose end lies inside a string (a
triple-quoted string that goes on, or a backslash continuation) cannot hold a comment: its
findings are left as they are and counted. Files are written as ``--fix`` writes them
(``writing.write_result``): atomically, only when the new text parses and the file still holds
what was read. Notebooks are left as they are.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

from .suppressions import suppressed_codes

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Iterable

    from .engine import FileResult

# The code list of an existing noqa directive (group ``codes``), which new codes extend.
NOQA_CODES = re.compile(r"(?i)#\s*noqa:\s*(?P<codes>[A-Za-z]+[0-9]+(?:\s*,\s*[A-Za-z]+[0-9]+|\s+[A-Za-z]+[0-9]+)*)")


class NoqaOutcome:
    """What ``add_noqa`` did: directives added, files written, findings whose line cannot hold a
    comment, and files that could not be written (path, why)."""

    def __init__(self) -> None:
        self.added = 0
        self.files = 0
        self.skipped = 0
        self.errors: list[tuple[str, str]] = []


def add_noqa(results: Iterable[FileResult]) -> NoqaOutcome:
    """Add the directives for the findings of ``results`` (``engine.FileResult``) and write the
    files that changed."""
    from ..findings import PARSE_ERROR
    from .writing import WriteError, write_result

    outcome = NoqaOutcome()
    for result in results:
        findings = [f for f in result.findings if f.code != PARSE_ERROR]
        if not findings or result.source is None or result.cells or result.path.endswith(".ipynb"):
            continue
        codes_by_line: dict[int, list[str]] = {}
        for finding in findings:
            codes = codes_by_line.setdefault(finding.location.line, [])
            if finding.code not in codes:
                codes.append(finding.code)
        text, added, skipped = with_directives(result.source, codes_by_line)
        outcome.skipped += skipped
        if not added:
            continue
        result.original, result.source = result.source, text
        try:
            write_result(Path(result.file_path or result.path), result)
        except (OSError, WriteError) as exc:
            reason = exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc)
            outcome.errors.append((result.path, reason))
            result.source, result.original = result.original, None
            continue
        outcome.added += added
        outcome.files += 1
    return outcome


def with_directives(source: str, codes_by_line: dict[int, list[str]]) -> tuple[str, int, int]:
    """``source`` with a directive for each line of ``codes_by_line`` (1-based line → codes):
    the new text, how many lines took one, and how many findings were left (no comment fits)."""
    lines = source.splitlines(keepends=True)
    comments, open_ends = comments_and_open_ends(source)
    added = skipped = 0
    for number in sorted(codes_by_line):
        codes = codes_by_line[number]
        if not 1 <= number <= len(lines) or number in open_ends:
            skipped += len(codes)
            continue
        line = lines[number - 1]
        body = line.rstrip("\r\n")
        edit = directive_edit(body, comments.get(number), codes)
        if edit is None:
            continue
        start, end, text = edit
        lines[number - 1] = body[:start] + text + body[end:] + line[len(body) :]
        added += 1
    return "".join(lines), added, skipped


def directive_edit(body: str, comment: str | None, codes: list[str]) -> tuple[int, int, str] | None:
    """The edit ``(start, end, text)`` (0-based characters of ``body``, a line without its line
    break, whose comment is ``comment``) that makes the line suppress ``codes``: the codes added
    to its ``# noqa: ...`` list, or a directive after the line's code and comment. None when the
    line suppresses them already. The line's end must be able to hold a comment
    (``comments_and_open_ends``)."""
    already = suppressed_codes(comment) if comment is not None else None
    if already is not None and not already:
        return None  # a bare noqa directive already silences the line
    missing = [code for code in codes if already is None or code.upper() not in already]
    if not missing:
        return None
    match = NOQA_CODES.search(comment) if comment is not None else None
    if match is not None and comment is not None:
        end = body.rindex(comment) + match.end("codes")
        return end, end, ", " + ", ".join(missing)
    kept = len(body.rstrip(" \t"))  # trailing blanks give way to the directive
    return kept, len(body), "  # noqa: " + ", ".join(missing)


def comments_and_open_ends(source: str) -> tuple[dict[int, str], set[int]]:
    """The comment on each line, and the lines whose end is not the end of a token a comment may
    follow: inside a string that goes on to the next line, or continued with a backslash."""
    comments: dict[int, str] = {}
    open_ends: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                comments[token.start[0]] = token.string
            elif token.start[0] != token.end[0] and token.type not in (tokenize.NL, tokenize.NEWLINE):
                open_ends.update(range(token.start[0], token.end[0]))  # a string over several lines
    except (tokenize.TokenError, SyntaxError):
        pass  # a text that does not tokenize gets no directives where it fails
    for number, line in enumerate(source.splitlines(), 1):
        if line.rstrip(" \t").endswith("\\") and number not in comments:
            open_ends.add(number)
    return comments, open_ends
