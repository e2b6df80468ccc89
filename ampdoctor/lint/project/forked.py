"""One piece of the project checks run in a forked copy of this process, beside the rest.

The project checks run after the lint pass, when the worker processes are gone and every core
but one is idle. Their state (the linked project, the summaries made so far, the callers'
index) is large and built in this process, so a child made by ``fork`` starts with all of it
at no cost, runs its share, and sends back what it found through a pipe (pickled), with the
summaries it made, for the cache. Measured on the 31-repository tree (3,647 files, 2 cores),
cold: the checks took 6.5 s in one process and 4.5 s with AMP211's judge, the largest of them,
in the child (see ``checks.run_checks``).

Only where ``fork`` is the platform's own way (Linux) and this process runs no other thread:
a fork copies only the calling thread, and a lock another thread held would stay held.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from typing import Any


def can_fork() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "fork") and threading.active_count() == 1


class ForkFailed(RuntimeError):
    """The child raised (its error, in one line) or ended without an answer."""


class Forked:
    """``work()`` running in a child process; ``result()`` waits for its value. Use as a
    context manager: leaving it without ``result()`` (an error here) ends the child."""

    def __init__(self, work: Callable[[], Any]) -> None:
        import pickle  # (only here: a run that never forks never loads it)

        read, write = os.pipe()
        try:
            pid = os.fork()
        except OSError:  # the system has no process to spare: the caller does the work itself
            os.close(read)
            os.close(write)
            raise
        if pid == 0:  # the child: never returns into the caller's code
            status = 1
            try:
                os.close(read)
                try:
                    answer = ("value", work())
                except BaseException as exc:  # sent to the parent, which raises it as ForkFailed
                    answer = ("error", f"{type(exc).__name__}: {exc}")
                data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(write, "wb") as pipe:
                    pipe.write(data)
                status = 0
            finally:
                os._exit(status)  # no atexit handlers, no flush of buffers the parent owns
        os.close(write)
        self._pid: int | None = pid
        self._read = read

    def result(self) -> Any:
        import pickle

        read, self._read = self._read, -1
        with os.fdopen(read, "rb") as pipe:
            data = pipe.read()
        self._reap()
        try:
            kind, value = pickle.loads(data)
        except Exception:
            raise ForkFailed("the forked check ended without an answer") from None
        if kind == "error":
            raise ForkFailed(value)
        return value

    def _reap(self) -> None:
        if self._pid is not None:
            os.waitpid(self._pid, 0)
            self._pid = None

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._pid is not None:
            import signal

            try:
                os.kill(self._pid, signal.SIGKILL)
            except OSError:
                pass
            if self._read >= 0:
                os.close(self._read)
            self._reap()
