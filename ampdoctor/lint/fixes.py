"""Turning node-level fix plans into text edits, and applying edits to source text.

Fixes are text edits (as in ruff): everything outside an edit stays byte-for-byte the same,
several fixes compose as long as their edits do not overlap, and the result is reparsed
before anything is written.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import accumulate

from ..findings import Applicability, Edit, Fix
from ..records import Value

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    import ast

    from ..findings import Finding

# (line, column, end line, end column): 1-based lines, 1-based character columns.
Span = tuple[int, int, int, int]


class NodeEdit(Value):
    """A text edit expressed against nodes; positions are resolved later.

    kind: ``replace`` (node's span ← text), ``insert_before`` / ``insert_after`` (at the
    node's start / end), ``line_before`` / ``line_after`` (a new line with the statement's
    indentation before its first / after its last line), ``replace_span`` (from ``node``'s
    start to ``end_node``'s end ← text), ``replace_range`` (``span`` ← text, no node).
    span: for ``replace_range``, (line, column, end line, end column), 1-based, in characters.
    """

    __slots__ = ("kind", "node", "text", "end_node", "span")
    kind: str
    node: ast.AST | None
    text: str
    end_node: ast.AST | None
    span: tuple[int, int, int, int] | None

    def __init__(
        self,
        kind: str,
        node: ast.AST | None = None,
        text: str = "",
        end_node: ast.AST | None = None,
        span: tuple[int, int, int, int] | None = None,
    ) -> None:
        self._set(kind, node, text, end_node, span)


class FixPlan(Value):
    __slots__ = ("description", "edits", "applicability")
    description: str
    edits: tuple[NodeEdit, ...]
    applicability: Applicability

    def __init__(
        self, description: str, edits: tuple[NodeEdit, ...], applicability: Applicability = Applicability.SAFE
    ) -> None:
        self._set(description, edits, applicability)


class FixError(Exception):
    """A fix produced code that does not parse (a defect; the file is left unchanged)."""


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def split_lines(text: str) -> list[str]:
    """Lines with their endings, breaking where Python's tokenizer breaks (LF, CRLF, CR):
    ``str.splitlines`` would also split at form feeds and other separators."""
    if "\r" in text:
        return _LINE.findall(text)
    # Only LF: a plain split, half the expression's time on a large module.
    lines = [line + "\n" for line in text.split("\n")]
    last = lines.pop()
    if len(last) > 1:
        lines.append(last[:-1])  # the last line has no newline
    return lines


class SourceLines:
    """Line/column ↔ offset conversions for one source text (1-based lines and columns)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines = split_lines(source)  # physical lines, as the interpreter counts them
        self.starts = [0, *accumulate(map(len, self.lines))]

    def offset(self, line: int, column: int) -> int:
        if line > len(self.lines):
            return len(self.source)
        return self.starts[line - 1] + column - 1

    def column(self, line: int, byte_offset: int) -> int:
        """The 1-based character column of a UTF-8 byte offset (``ast`` counts bytes) in a line."""
        if 1 <= line <= len(self.lines):
            text = self.lines[line - 1]
            if not text.isascii():
                return len(text.encode("utf-8")[:byte_offset].decode("utf-8", errors="replace")) + 1
        return byte_offset + 1

    def span(self, node: ast.AST) -> Span | None:
        """Where an ``ast`` node is, or None for nodes without positions (``ast.arguments``)."""
        line = getattr(node, "lineno", None)
        end_line = getattr(node, "end_lineno", None)
        if line is None or end_line is None:
            return None
        column, end_column = getattr(node, "col_offset", 0), getattr(node, "end_col_offset", 0)
        return line, self.column(line, column), end_line, self.column(end_line, end_column)

    def segment(self, node: ast.AST) -> str:
        """The exact source text of a node."""
        bounds = self.bounds(node)
        return "" if bounds is None else self.source[bounds[0] : bounds[1]]

    def bounds(self, node: ast.AST) -> tuple[int, int] | None:
        """Where a node's text starts and ends in ``source`` (offsets), None without a position:
        to search it (``pattern.search(source, start, end)``) without copying it out."""
        span = self.span(node)
        if span is None:
            return None
        line, column, end_line, end_column = span
        return self.offset(line, column), self.offset(end_line, end_column)

    def text(self, line: int) -> str:
        """The line without its newline."""
        if 1 <= line <= len(self.lines):
            return self.lines[line - 1].rstrip("\r\n")
        return ""

    def newline(self) -> str:
        """The text's line ending, as its first line ends (LF, CRLF, or a classic Mac's CR)."""
        for line in self.lines:
            if line.endswith("\r\n"):
                return "\r\n"
            if line.endswith("\n"):
                return "\n"
            if line.endswith("\r"):
                return "\r"
        return "\n"


class ModuleRewrite(Fix):
    """A fix that rewrites the whole module, computed only when it is applied.

    A codemod (libcst) is too costly to run for every finding that is only reported, and it
    must stay off the lint path. ``rewrite`` is (module, function, argument): importing the
    module and calling ``function(source, argument)`` gives the new text, or None when there is
    nothing to change. Picklable, so worker processes can send it back with their findings.
    """

    __slots__ = ("description", "edits", "applicability", "rewrite")
    rewrite: tuple[str, str, object]

    def __init__(
        self,
        description: str,
        edits: tuple[Edit, ...] = (),
        applicability: Applicability = Applicability.UNSAFE,
        rewrite: tuple[str, str, object] | tuple[()] = (),
    ) -> None:
        self._set(description, edits, applicability, rewrite)

    def realize(self, source: str) -> Fix | None:
        """The fix as one edit over the whole text, or None when the rewrite changes nothing."""
        import importlib

        module, function, argument = self.rewrite
        new = getattr(importlib.import_module(module), function)(source, argument)
        if new is None or new == source:
            return None
        end = len(split_lines(source)) + 1  # past the last line: the end of the text
        return Fix(self.description, (Edit(1, 1, end, 1, new),), self.applicability)


def realize_rewrites(findings: list[Finding], source: str, path: str = "") -> list[Finding]:
    """The findings with their module rewrites computed against ``source`` (those that change
    nothing lose their fix). A notebook's source joins its cells: a rewrite could move code
    across cells, so notebooks get none."""
    result = []
    for finding in findings:
        if isinstance(finding.fix, ModuleRewrite):
            fix = None if path.endswith(".ipynb") else finding.fix.realize(source)
            if fix is None:
                continue
            finding = finding.replace(fix=fix)
        result.append(finding)
    return result


def resolve_fix(plan: FixPlan | Fix, lines: SourceLines) -> Fix | None:
    if isinstance(plan, Fix):
        return plan  # already text-level (a module rewrite, computed when applied)
    edits = []
    for edit in plan.edits:
        resolved = _resolve_edit(edit, lines)
        if resolved is None:
            return None
        edits.append(resolved)
    return Fix(plan.description, tuple(sorted(edits)), plan.applicability)


def _resolve_edit(edit: NodeEdit, lines: SourceLines) -> Edit | None:
    if edit.kind == "replace_range":
        if edit.span is None:
            return None
        return Edit(*edit.span, edit.text)
    span = lines.span(edit.node) if edit.node is not None else None
    if span is None:
        return None
    start_line, start_col, end_line, end_col = span
    newline = lines.newline()
    if edit.kind == "replace":
        return Edit(start_line, start_col, end_line, end_col, edit.text)
    if edit.kind == "replace_span":
        end = lines.span(edit.end_node) if edit.end_node is not None else None
        if end is None:
            return None
        return Edit(start_line, start_col, end[2], end[3], edit.text)
    if edit.kind == "insert_before":
        return Edit(start_line, start_col, start_line, start_col, edit.text)
    if edit.kind == "insert_after":
        return Edit(end_line, end_col, end_line, end_col, edit.text)
    if edit.kind in ("line_before", "line_after"):
        indent = _indentation(lines.text(start_line), start_col - 1)
        if indent is None:
            return None
        if edit.kind == "line_before":
            return Edit(start_line, 1, start_line, 1, f"{indent}{edit.text}{newline}")
        # After the statement's last physical line, trailing comment included.
        last = lines.text(end_line)
        column = len(last) + 1
        return Edit(end_line, column, end_line, column, f"{newline}{indent}{edit.text}")
    raise ValueError(f"unknown edit kind {edit.kind!r}")


def _indentation(line: str, column: int) -> str | None:
    prefix = line[:column]
    if prefix.strip():
        return None  # the statement shares its line with other code (``if x: stmt``)
    return prefix


def apply_edits(source: str, edits: Sequence[Edit]) -> str:
    """Apply non-overlapping edits (the caller has checked) from the end backwards."""
    lines = SourceLines(source)
    spans = sorted(
        ((lines.offset(e.line, e.column), lines.offset(e.end_line, e.end_column), e.content) for e in edits),
        reverse=True,
    )
    result = source
    for start, end, content in spans:
        result = result[:start] + content + result[end:]
    return result


def edit_spans(source_lines: SourceLines, fix: Fix) -> list[tuple[int, int]]:
    return [(source_lines.offset(e.line, e.column), source_lines.offset(e.end_line, e.end_column)) for e in fix.edits]


def overlaps(spans: Sequence[tuple[int, int]], taken: Sequence[tuple[int, int]]) -> bool:
    for start, end in spans:
        for other_start, other_end in taken:
            # Two insertions at one point conflict too: their order would be arbitrary.
            if (start < other_end and other_start < end) or start == other_start:
                return True
    return False
