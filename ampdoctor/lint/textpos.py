"""Where things are in a module's text, for fixes that edit it.

``ast`` positions leave out the parentheses around an expression and the punctuation between
arguments, and an import's module is a plain string; these helpers find them in the source.
Between the places they scan there is only whitespace, comments, line continuations and
parentheses, never a string. AMP401's fix (rules/deprecated_api.py) uses them to add a
device argument to a call and to rewrite an import's module name.
"""

from __future__ import annotations

import ast
import bisect
import re

from .fixes import NodeEdit, SourceLines

GAP = " \t\f\\"  # what may separate tokens on a line (a backslash continues the line)
_DOTTED_NAME = re.compile(r"\w+(?:(?:[ \t\f]|\\(?:\r\n|\r|\n))*\.(?:[ \t\f]|\\(?:\r\n|\r|\n))*\w+)*")


def next_char(lines: SourceLines, line: int, column: int, skip: str) -> tuple[int, int, str] | None:
    """The first character at or after (line, 1-based column) that is not in ``skip`` nor in a
    comment or line break, as (line, column, character)."""
    while line <= len(lines.lines):
        text = lines.text(line)
        for index in range(column - 1, len(text)):
            char = text[index]
            if char == "#":
                break
            if char not in skip:
                return line, index + 1, char
        line, column = line + 1, 1
    return None


def argument_starts(lines: SourceLines, call: ast.Call) -> tuple[tuple[int, int], list[tuple[int, int]]] | None:
    """(the position just after the call's ``(``, where each argument's text starts, parentheses
    around it included), or None when the text is not laid out as expected."""
    func = lines.span(call.func)
    paren = next_char(lines, func[2], func[3], GAP + ")") if func else None
    if paren is None or paren[2] != "(":
        return None
    inside = (paren[0], paren[1] + 1)
    line, column = inside
    starts = []
    for index, arg in enumerate([*call.args, *call.keywords]):
        span = lines.span(arg)
        if index:  # after the previous argument and its closing parentheses: a comma
            comma = next_char(lines, line, column, GAP + ")")
            if comma is None or comma[2] != ",":
                return None
            line, column = comma[0], comma[1] + 1
        start = next_char(lines, line, column, GAP)
        if span is None or start is None or start[:2] > span[:2]:
            return None  # ``f(x for x in y)``: the generator shares the call's parentheses
        starts.append(start[:2])
        line, column = span[2], span[3]
    return inside, starts


def insert_at(position: tuple[int, int], text: str) -> NodeEdit:
    line, column = position
    return NodeEdit("replace_range", text=text, span=(line, column, line, column))


def dotted_name_at(lines: SourceLines, line: int, column: int) -> ast.Name | None:
    """A positioned Name for the dotted name written at (line, 1-based column), so that a
    finding and an edit can point at a module name, which ast keeps only as a string."""
    match = _DOTTED_NAME.match(lines.source, lines.offset(line, column))
    if match is None:
        return None
    end_line = bisect.bisect_right(lines.starts, match.end() - 1)
    end_column = match.end() - lines.starts[end_line - 1] + 1
    name = ast.Name(id=match.group(), ctx=ast.Load())
    name.lineno, name.col_offset = line, byte_offset(lines, line, column)
    name.end_lineno, name.end_col_offset = end_line, byte_offset(lines, end_line, end_column)
    return name


def byte_offset(lines: SourceLines, line: int, column: int) -> int:
    """The UTF-8 byte offset (what ast stores) of a 1-based character column."""
    return len(lines.text(line)[: column - 1].encode("utf-8"))


def import_from_module(lines: SourceLines, node: ast.ImportFrom) -> ast.Name | None:
    """``torch.cuda.amp`` in ``from torch.cuda.amp import ...``."""
    start = lines.span(node)
    found = next_char(lines, start[0], start[1] + len("from"), GAP) if start else None
    return dotted_name_at(lines, found[0], found[1]) if found else None


def import_alias_name(lines: SourceLines, alias: ast.alias) -> ast.Name | None:
    """``torch.cuda.amp`` in ``import torch.cuda.amp as x``."""
    start = lines.span(alias)
    return dotted_name_at(lines, start[0], start[1]) if start else None
