"""How a traced script is stopped, and how the way it ended is told.

The session stops the training code after the requested iterations by raising ``StopTracing``
from an optimizer step hook; ``--timeout`` raises ``TraceTimeout`` in the script (deadline.py).
Both are ``BaseException``s, so ``except Exception`` in the training code does not catch them.
``outcome_of`` turns the exception that ended a session's ``with`` block into its ``Outcome``.

Kept apart from the session (which needs torch and installs the instruments) so the runner and
the command can catch and raise these without reaching into it.
"""

from __future__ import annotations

from typing import Any

from .outcome import Outcome, exit_code_of


class StopTracing(BaseException):
    """Raised from a step hook after the last requested iteration; never seen by users."""


class TraceTimeout(StopTracing):
    """Raised in the script when ``--timeout`` expires (deadline.py)."""


def outcome_of(exc_type: type[BaseException], exc: Any) -> Outcome:
    """The ``Outcome`` of a session ended by ``exc`` (of type ``exc_type``)."""
    if issubclass(exc_type, TraceTimeout):
        return Outcome("timeout")
    if issubclass(exc_type, StopTracing):
        return Outcome("steps")
    if issubclass(exc_type, KeyboardInterrupt):
        return Outcome("interrupt", error="KeyboardInterrupt")
    if issubclass(exc_type, SystemExit):
        return Outcome("exit", exit_code=exit_code_of(exc))
    return Outcome("error", error=f"{exc_type.__name__}: {exc}")
