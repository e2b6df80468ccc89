"""How a traced run ended, and the exit status ``ampdoctor trace`` gives it.

Kept apart from the session (which needs torch) so the report, the command and the torchrun
merge can all say how a run ended without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Protocol

from ..findings import Severity

EXIT_TIMEOUT = 124  # as timeout(1); deadline.py's watchdog ends a run it cannot stop with it too


class _Judged(Protocol):
    """A report (TraceReport; a Protocol here, as trace_report.py imports this module)."""

    def fails(self, level: Optional[Severity]) -> bool: ...


@dataclass
class Outcome:
    """How the traced code ended.

    ``reason``: ``"steps"`` (stopped after the requested iterations), ``"end"`` (finished by
    itself), ``"exit"`` (``sys.exit``), ``"error"`` (raised), ``"interrupt"`` (Ctrl-C) or
    ``"timeout"`` (stopped by ``--timeout``).
    """

    reason: str = "end"
    exit_code: Optional[int] = None
    error: Optional[str] = None
    traceback: Optional[str] = None
    exception: Optional[BaseException] = field(default=None, repr=False, compare=False)  # while the runner shows it
    # The innermost frame of the user's code in the error's traceback: (file, line).
    error_site: Optional[tuple[str, int]] = None

    @property
    def completed(self) -> bool:
        return self.reason in ("steps", "end", "exit")


def exit_code_of(exc: SystemExit) -> int:
    """The process exit status Python would use for this SystemExit."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    return 1


def how_it_ended(outcome: Outcome, steps_requested: Optional[int]) -> str:
    """How the traced run ended, in words (the terminal and HTML headlines)."""
    return {
        "steps": f"stopped after --steps {steps_requested}",
        "end": "the script ended",
        "exit": f"the script called sys.exit({outcome.exit_code})",
        "error": "the script raised",
        "interrupt": "interrupted",
        "timeout": "stopped by --timeout",
    }.get(outcome.reason, outcome.reason)


def exit_status(report: _Judged, outcome: Outcome, fail_on: str) -> int:
    """0 no finding at or above ``fail_on``; 1 findings at or above it, or the script raised;
    the script's own ``sys.exit`` status; 130 on Ctrl-C; 124 when ``--timeout`` stopped it."""
    if outcome.reason == "error":
        return 1
    if outcome.reason == "interrupt":
        return 130
    if outcome.reason == "timeout":
        return EXIT_TIMEOUT
    if outcome.reason == "exit" and outcome.exit_code:
        return outcome.exit_code
    level = None if fail_on.lower() == "never" else Severity.parse(fail_on)
    return 1 if report.fails(level) else 0
