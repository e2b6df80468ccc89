"""The vocabulary shared by lint and trace: Finding, Severity (defined in ``severity.py``), Location, Fix.

A finding is plain data: both halves of ampdoctor produce it and every reporter consumes it.
Positions are 1-based lines and 1-based columns, as editors and ruff print them; end positions
are exclusive columns on ``end_line``.
"""

from __future__ import annotations

import enum

from .records import Value
from .severity import Severity

# The code of a file that could not be read, decoded or parsed (never hidden by a per-file ignore).
PARSE_ERROR = "AMP000"

__all__ = ["Applicability", "Edit", "Finding", "Fix", "Location", "Severity"]


class Applicability(str, enum.Enum):
    """Whether ``--fix`` applies a fix by itself (safe) or only with ``--unsafe-fixes``."""

    SAFE = "safe"
    UNSAFE = "unsafe"


class Edit(Value):
    """Replace the text between two positions (1-based line, 1-based column, end exclusive).

    Edits order by position (then content), so sorting a fix's edits puts them in file order.
    """

    __slots__ = ("line", "column", "end_line", "end_column", "content")
    line: int
    column: int
    end_line: int
    end_column: int
    content: str

    def __init__(self, line: int, column: int, end_line: int, end_column: int, content: str) -> None:
        self._set(line, column, end_line, end_column, content)

    def to_dict(self) -> dict[str, object]:
        return {
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "content": self.content,
        }


class Fix(Value):
    __slots__ = ("description", "edits", "applicability")
    description: str
    edits: tuple[Edit, ...]
    applicability: Applicability

    def __init__(
        self, description: str, edits: tuple[Edit, ...], applicability: Applicability = Applicability.SAFE
    ) -> None:
        self._set(description, edits, applicability)

    @property
    def is_safe(self) -> bool:
        return self.applicability is Applicability.SAFE

    def to_dict(self) -> dict[str, object]:
        return {
            "description": self.description,
            "applicability": self.applicability.value,
            "edits": [e.to_dict() for e in self.edits],
        }


class Location(Value):
    """Where a finding is. ``cell``: in a notebook, the 1-based cell number (``line`` is then the
    line within that cell)."""

    __slots__ = ("path", "line", "column", "end_line", "end_column", "cell")
    path: str
    line: int
    column: int
    end_line: int | None
    end_column: int | None
    cell: int | None

    def __init__(
        self,
        path: str,
        line: int = 1,
        column: int = 1,
        end_line: int | None = None,
        end_column: int | None = None,
        cell: int | None = None,
    ) -> None:
        self._set(path, line, column, end_line, end_column, cell)

    def to_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line if self.end_line is not None else self.line,
            "end_column": self.end_column if self.end_column is not None else self.column,
            "cell": self.cell,
        }


class Related(Value):
    """Another place that explains a finding: where the scaler was made, the backward that a
    call runs, the helper that writes the checkpoint. Shown as a ``note:`` line."""

    __slots__ = ("path", "line", "column", "message")
    path: str
    line: int
    column: int
    message: str

    def __init__(self, path: str, line: int, column: int, message: str) -> None:
        self._set(path, line, column, message)

    def to_dict(self) -> dict[str, object]:
        return {"path": self.path, "line": self.line, "column": self.column, "message": self.message}


class Finding(Value):
    """One diagnostic.

    ``help``: a short instruction shown after ``help:`` (falls back to the fix description).
    ``extra``: free-form structured data for machine readers (runtime findings: module, step,
    values); not part of equality. ``related``: other locations that explain the finding (in
    other functions or modules); the finding itself stays where the fix goes.
    """

    __slots__ = ("code", "severity", "message", "location", "fix", "help", "extra", "related")
    code: str
    severity: Severity
    message: str
    location: Location
    fix: Fix | None
    help: str | None
    extra: dict[str, object]
    related: tuple[Related, ...]
    _uncompared = ("extra",)

    def __init__(
        self,
        code: str,
        severity: Severity,
        message: str,
        location: Location,
        fix: Fix | None = None,
        help: str | None = None,
        extra: dict[str, object] | None = None,
        related: tuple[Related, ...] = (),
    ) -> None:
        self._set(code, severity, message, location, fix, help, {} if extra is None else extra, tuple(related))

    @property
    def help_text(self) -> str | None:
        if self.help:
            return self.help
        return self.fix.description if self.fix else None

    def sort_key(self) -> tuple[str, int, int, int, str]:
        loc = self.location
        return (loc.path, loc.cell or 0, loc.line, loc.column, self.code)

    def to_dict(self) -> dict[str, object]:
        """The stable JSON shape documented in ``docs/output-formats.md``."""
        from .catalog import rule_name

        data: dict[str, object] = {
            "code": self.code,
            "name": rule_name(self.code),
            "severity": self.severity.label,
            "message": self.message,
        }
        data.update(self.location.to_dict())
        data["help"] = self.help_text
        data["fix"] = self.fix.to_dict() if self.fix else None
        data["related"] = [r.to_dict() for r in self.related]
        if self.extra:
            data["extra"] = self.extra
        return data
