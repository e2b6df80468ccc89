"""Reporters: lint findings as text, concise or pylint lines, grouped by file, JSON or JSON
Lines, SARIF, GitHub annotations, JUnit XML, GitLab Code Quality or reviewdog's rdjson.

``render(fmt, ctx, stream, color=...)`` is the one entry point; each format lives in its own
module, imported only when it is used. None of them imports rich: a report must not cost more
than the linting it reports on.

Source text for the snippets of the ``text`` format comes from ``ReportContext.sources``:

* a Python file: ``sources[path]`` is the file's text;
* a notebook finding (``finding.location.cell`` is set): ``sources[source_key(path, cell)]``,
  that is ``"<path>#cell<n>"``, is the text of that one cell as the user sees it (IPython magics
  included), because a notebook finding's line and column count within its cell.

A finding whose source is missing is still reported, only without the snippet.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from ...records import Record

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import TextIO

    from ...findings import Finding, Location

FORMATS = ("text", "concise", "json", "sarif", "github", "junit", "gitlab", "pylint", "json-lines", "grouped", "rdjson")

# ``json_`` so that the module never stands in for the standard library's ``json``.
_MODULES = {
    "text": "text",
    "concise": "concise",
    "json": "json_",
    "sarif": "sarif",
    "github": "github",
    "junit": "junit",
    "gitlab": "gitlab",
    "pylint": "pylint",
    "json-lines": "json_lines",
    "grouped": "grouped",
    "rdjson": "rdjson",
}


class ReportContext(Record):
    """What a report shows.

    ``findings``: already sorted and filtered (suppressed findings removed); ``sources``: see the
    module docstring for the keys; ``suppressed``: None unless --show-suppressed; ``fixed``: fixed
    by --fix in this run (with --diff: the fixes the diff shows); ``unsafe_fixes_available``:
    fixable only with --unsafe-fixes; ``quiet``: --quiet.
    """

    __slots__ = (
        "findings",
        "sources",
        "files_checked",
        "suppressed",
        "fixed",
        "unsafe_fixes_available",
        "fix_mode",
        "diff_mode",
        "quiet",
    )

    def __init__(
        self,
        findings: list[Finding],
        sources: Mapping[str, str],
        files_checked: int,
        suppressed: int | None = None,
        fixed: int = 0,
        unsafe_fixes_available: int = 0,
        fix_mode: bool = False,
        diff_mode: bool = False,
        quiet: bool = False,
    ) -> None:
        self.findings = findings
        self.sources = sources
        self.files_checked = files_checked
        self.suppressed = suppressed
        self.fixed = fixed
        self.unsafe_fixes_available = unsafe_fixes_available
        self.fix_mode = fix_mode
        self.diff_mode = diff_mode
        self.quiet = quiet  # ``--quiet``: the findings, no summary after them

    def source_for(self, finding: Finding) -> str | None:
        loc = finding.location
        return self.sources.get(source_key(loc.path, loc.cell))


def source_key(path: str, cell: int | None = None) -> str:
    """The key of ``ReportContext.sources`` for a file, or for one cell of a notebook."""
    return path if cell is None else f"{path}#cell{cell}"


def render(fmt: str, ctx: ReportContext, stream: TextIO, *, color: bool) -> None:
    """Write the report for ``ctx`` in format ``fmt`` (one of ``FORMATS``) to ``stream``."""
    if fmt not in _MODULES:
        raise ValueError(f"unknown output format {fmt!r} (expected one of: {', '.join(FORMATS)})")
    module = importlib.import_module(f"{__name__}.{_MODULES[fmt]}")
    module.render(ctx, stream, color=color)


# Helpers shared by the human-readable formats.


def location_label(loc: Location) -> str:
    """``path:line:col``, or ``path:cell 3:line:col`` in a notebook."""
    cell = f":cell {loc.cell}" if loc.cell is not None else ""
    return f"{loc.path}{cell}:{loc.line}:{loc.column}"


def one_line(text: str) -> str:
    """Messages are one line; a stray line break must not break the line-oriented formats."""
    return " ".join(text.splitlines())


def plural(count: int, word: str, suffix: str = "s") -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}{suffix}"


def summary_lines(ctx: ReportContext) -> list[str]:
    """The summary after the findings: what was fixed, what was found, what more could be fixed
    (none with ``--quiet``)."""
    if ctx.quiet:
        return []
    lines = []
    if ctx.diff_mode and ctx.fixed:
        lines.append(f"Would fix {plural(ctx.fixed, 'problem')}.")
    elif ctx.fix_mode and ctx.fixed:
        lines.append(f"Fixed {plural(ctx.fixed, 'problem')}.")

    notes = []
    fixable = sum(1 for f in ctx.findings if f.fix is not None and f.fix.is_safe)
    if fixable and not (ctx.fix_mode or ctx.diff_mode):
        notes.append(f"{fixable} fixable with --fix")
    if ctx.suppressed is not None:
        notes.append(f"{ctx.suppressed} suppressed")
    tail = f" ({', '.join(notes)})" if notes else ""

    count = len(ctx.findings)
    if count == 0:
        lines.append(f"All checks passed!{tail}")
    else:
        word = "remaining problem" if lines else "problem"
        lines.append(f"Found {plural(count, word)}{tail}.")

    if ctx.unsafe_fixes_available:
        hidden = plural(ctx.unsafe_fixes_available, "hidden fix", "es")
        lines.append(f"{hidden} can be enabled with --unsafe-fixes.")
    return lines
