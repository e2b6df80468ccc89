"""Findings as the protocol's objects: diagnostics, code actions and hover text.

Positions go through ``positions.Converter``: ampdoctor counts 1-based lines and character
columns, the client 0-based lines and code units of the agreed encoding. The rule pages have no
web address, so a diagnostic carries no ``codeDescription``; its code, hovered, shows the rule's
name, severity and summary.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from lsprotocol import types

from ..catalog import get_rule
from ..findings import Edit, Finding, Related, Severity
from .noqa import LineEdit, noqa_edit
from .positions import Converter

SOURCE = "ampdoctor"
SEVERITIES = {
    Severity.ERROR: types.DiagnosticSeverity.Error,
    Severity.WARNING: types.DiagnosticSeverity.Warning,
    Severity.INFO: types.DiagnosticSeverity.Information,
}


class Document:
    """The text a set of findings was computed on, with where it lives: ``uri`` and ``path`` (None
    for a buffer never saved; the findings then name ``placeholder`` as their path)."""

    def __init__(self, uri: str, path: str | None, text: str, encoding: str, placeholder: str) -> None:
        self.uri = uri
        self.path = path
        self.text = text
        self.positions = Converter(text, encoding)
        self.placeholder = placeholder

    def position(self, line: int, column: int) -> types.Position:
        line_index, units = self.positions.to_client(line, column)
        return types.Position(line=line_index, character=units)

    def is_self(self, path: str) -> bool:
        return path == (self.path if self.path is not None else self.placeholder)


def finding_range(document: Document, finding: Finding) -> types.Range:
    """The finding's span; a finding without an end (a parse error) covers one character, or the
    end of its line when it is at the end."""
    location = finding.location
    start = document.position(location.line, location.column)
    if location.end_line is not None and location.end_column is not None:
        return types.Range(start=start, end=document.position(location.end_line, location.end_column))
    text = document.positions.line_text(location.line)
    end_column = location.column + 1 if location.column <= len(text) else location.column
    return types.Range(start=start, end=document.position(location.line, end_column))


def diagnostic(document: Document, finding: Finding) -> types.Diagnostic:
    message = finding.message
    if finding.help:  # a fix's description is the title of its code action instead
        message += f"\nhelp: {finding.help}"
    related = [_related(document, r) for r in finding.related]
    return types.Diagnostic(
        range=finding_range(document, finding),
        message=message,
        severity=SEVERITIES.get(finding.severity, types.DiagnosticSeverity.Error),
        code=finding.code,
        source=SOURCE,
        related_information=related or None,
    )


def _related(document: Document, related: Related) -> types.DiagnosticRelatedInformation:
    """A ``findings.Related`` as the protocol's."""
    if document.is_self(related.path):
        uri, start = document.uri, document.position(related.line, related.column)
    else:  # another module: its text on disk gives the code units of the column
        path = os.path.abspath(related.path)
        try:
            with open(path, encoding="utf-8", newline="") as handle:
                other = Converter(handle.read(), document.positions.encoding)
            line, units = other.to_client(related.line, related.column)
        except (OSError, UnicodeDecodeError):
            line, units = related.line - 1, related.column - 1
        uri, start = Path(path).as_uri(), types.Position(line=line, character=units)
    return types.DiagnosticRelatedInformation(
        location=types.Location(uri=uri, range=types.Range(start=start, end=start)), message=related.message
    )


def text_edits(document: Document, edits: Iterable[Edit]) -> list[types.TextEdit]:
    return [
        types.TextEdit(
            range=types.Range(
                start=document.position(edit.line, edit.column), end=document.position(edit.end_line, edit.end_column)
            ),
            new_text=edit.content,
        )
        for edit in sorted(edits)
    ]


def workspace_edit(
    document: Document, version: int | None, edits: list[types.TextEdit], document_changes: bool
) -> types.WorkspaceEdit:
    """The edits to the document; with ``document_changes``, for its version only (a client
    rejects them once the text has changed)."""
    if document_changes:
        identifier = types.OptionalVersionedTextDocumentIdentifier(uri=document.uri, version=version)
        return types.WorkspaceEdit(
            document_changes=[types.TextDocumentEdit(text_document=identifier, edits=list(edits))]
        )
    return types.WorkspaceEdit(changes={document.uri: list(edits)})


def _overlaps(a: types.Range, b: types.Range) -> bool:
    def key(p: types.Position) -> tuple[int, int]:
        return p.line, p.character

    return key(a.start) <= key(b.end) and key(b.start) <= key(a.end)


def code_actions(
    document: Document,
    version: int | None,
    findings: Sequence[Finding],
    wanted: types.Range,
    document_changes: bool,
) -> list[types.CodeAction]:
    """Quick fixes for the findings whose span meets ``wanted``: each safe fix, then a ``# noqa``
    comment for each code on each line."""
    fixes, suppressions = [], []
    noqa_done = set()
    for finding in findings:
        shown = diagnostic(document, finding)
        if not _overlaps(shown.range, wanted):
            continue
        fix = finding.fix
        if fix is not None and fix.is_safe and fix.edits:
            edit = workspace_edit(document, version, text_edits(document, fix.edits), document_changes)
            fixes.append(
                types.CodeAction(
                    title=f"{fix.description} ({finding.code})",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[shown],
                    edit=edit,
                    is_preferred=True,
                )
            )
        line = finding.location.line
        if (line, finding.code) in noqa_done:
            continue
        noqa_done.add((line, finding.code))
        insert = noqa_edit(document.text, line, finding.code, document.positions.line_text(line))
        if insert is not None:
            suppressions.append(
                types.CodeAction(
                    title=f"Suppress {finding.code} with `# noqa: {finding.code}`",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[shown],
                    edit=workspace_edit(document, version, [_line_edit(document, insert)], document_changes),
                )
            )
    return fixes + suppressions


def _line_edit(document: Document, insert: LineEdit) -> types.TextEdit:
    start, end = document.position(insert.line, insert.index + 1), document.position(insert.line, insert.end + 1)
    return types.TextEdit(range=types.Range(start=start, end=end), new_text=insert.text)


def rule_markdown(code: str) -> str | None:
    """A rule's name, severity and summary, as Markdown; None for a code the catalog lacks."""
    rule = get_rule(code)
    if rule is None:
        return None
    fix = {"safe": "fixable", "unsafe": "unsafe fix", "sometimes": "sometimes fixable"}.get(rule.fixable)
    facts = ", ".join(part for part in (rule.severity.label, fix) if part)
    return f"**{rule.code}** `{rule.name}` ({facts})\n\n{rule.summary}\n\n`ampdoctor rule {rule.code}` shows the full page."


def hover(codes: Sequence[str], at: types.Range | None = None) -> types.Hover | None:
    """The rules of ``codes`` (each once, in order), as one Markdown hover."""
    parts = []
    for code in dict.fromkeys(codes):
        text = rule_markdown(code)
        if text is not None:
            parts.append(text)
    if not parts:
        return None
    contents = types.MarkupContent(kind=types.MarkupKind.Markdown, value="\n\n---\n\n".join(parts))
    return types.Hover(contents=contents, range=at)
