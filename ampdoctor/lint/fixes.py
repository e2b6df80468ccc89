"""Turning node-level fix plans into text edits, and applying edits to source text.

Fixes are text edits (as in ruff): everything outside an edit stays byte-for-byte the same,
several fixes compose as long as their edits do not overlap, and the result is reparsed
before anything is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from ..findings import Edit, Fix

if TYPE_CHECKING:
    import libcst as cst
    from libcst.metadata import CodeRange

    from .rules import FixPlan, NodeEdit


class FixError(Exception):
    """A fix produced code that does not parse (a defect; the file is left unchanged)."""


class SourceLines:
    """Line/column ↔ offset conversions for one source text (1-based lines and columns)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, line: int, column: int) -> int:
        if line > len(self.lines):
            return len(self.source)
        return self.starts[line - 1] + column - 1

    def text(self, line: int) -> str:
        """The line without its newline."""
        if 1 <= line <= len(self.lines):
            return self.lines[line - 1].rstrip("\r\n")
        return ""

    def newline(self) -> str:
        for line in self.lines:
            if line.endswith("\r\n"):
                return "\r\n"
            if line.endswith("\n"):
                return "\n"
        return "\n"


def resolve_fix(plan: "FixPlan", positions: "Mapping[cst.CSTNode, CodeRange]", lines: SourceLines) -> Optional[Fix]:
    edits = []
    for edit in plan.edits:
        resolved = _resolve_edit(edit, positions, lines)
        if resolved is None:
            return None
        edits.append(resolved)
    return Fix(plan.description, tuple(sorted(edits)), plan.applicability)


def _resolve_edit(edit: "NodeEdit", positions: "Mapping[cst.CSTNode, CodeRange]", lines: SourceLines) -> Optional[Edit]:
    span = positions.get(edit.node)
    if span is None:
        return None
    start_line, start_col = span.start.line, span.start.column + 1
    end_line, end_col = span.end.line, span.end.column + 1
    newline = lines.newline()
    if edit.kind == "replace":
        return Edit(start_line, start_col, end_line, end_col, edit.text)
    if edit.kind == "replace_span":
        end = positions.get(edit.end_node) if edit.end_node is not None else None
        if end is None:
            return None
        return Edit(start_line, start_col, end.end.line, end.end.column + 1, edit.text)
    if edit.kind == "insert_before":
        return Edit(start_line, start_col, start_line, start_col, edit.text)
    if edit.kind == "insert_after":
        return Edit(end_line, end_col, end_line, end_col, edit.text)
    if edit.kind in ("line_before", "line_after"):
        indent = _indentation(lines.text(start_line), span.start.column)
        if indent is None:
            return None
        if edit.kind == "line_before":
            return Edit(start_line, 1, start_line, 1, f"{indent}{edit.text}{newline}")
        # After the statement's last physical line, trailing comment included.
        last = lines.text(end_line)
        column = len(last) + 1
        return Edit(end_line, column, end_line, column, f"{newline}{indent}{edit.text}")
    raise ValueError(f"unknown edit kind {edit.kind!r}")


def _indentation(line: str, column: int) -> Optional[str]:
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
    return [
        (source_lines.offset(e.line, e.column), source_lines.offset(e.end_line, e.end_column)) for e in fix.edits
    ]


def overlaps(spans: Sequence[tuple[int, int]], taken: Sequence[tuple[int, int]]) -> bool:
    for start, end in spans:
        for other_start, other_end in taken:
            # Two insertions at one point conflict too: their order would be arbitrary.
            if start < other_end and other_start < end or start == other_start:
                return True
    return False
