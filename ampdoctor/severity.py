"""Severity: how bad a finding is. Its own module because the rule catalog reads it from the rule
pages, and a finding asks the catalog for its rule's name: both import this, neither the other.
"""

from __future__ import annotations

import enum


class Severity(enum.IntEnum):
    """How bad a finding is. Ordered, so ``severity >= Severity.WARNING`` works."""

    INFO = 1
    WARNING = 2
    ERROR = 3

    @classmethod
    def parse(cls, text: str) -> "Severity":
        try:
            return cls[text.strip().upper()]
        except KeyError:
            names = ", ".join(s.label for s in cls)
            raise ValueError(f"unknown severity {text!r} (expected one of: {names})") from None

    @property
    def label(self) -> str:
        return self.name.lower()

    def __str__(self) -> str:
        return self.label
