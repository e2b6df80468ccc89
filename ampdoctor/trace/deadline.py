"""``--timeout SECONDS``: stop a traced script that hangs or never steps, then report.

On the main thread of a POSIX process the stop comes from ``SIGALRM`` (an interval timer): the
signal handler runs even while the script waits in a blocking call (``time.sleep``, a lock, a
queue), which an exception sent to the thread would not interrupt. Elsewhere a timer thread sends
the stop to the session's thread, delivered at its next Python instruction.

A stop can be lost: raised while the script runs a ``__del__`` method or a weak-reference
callback (Python prints "Exception ignored" and goes on), or caught by the script's own bare
``except:``. So it is sent again every ``REPEAT`` seconds until it lands (the runner calls
``stop_landed``, or the block ends); it is also held back while the tracer's own bookkeeping runs
a block that must not be cut in half (``holding_stops``). If it still has not landed ``grace`` seconds after the
deadline, a watchdog thread gives up on stopping the script: it calls ``on_give_up`` (which
writes what report it can) and ends the process with exit status 124, so ``--timeout`` always
ends the run.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType
from typing import Any, Callable, Optional, Union

from .threads import send_exception

EXIT_TIMEOUT = 124  # as timeout(1); outcome.py gives the same status to a stop that landed
REPEAT = 0.25

_active: Optional[Deadline] = None


def stop_landed() -> None:
    """The stop reached code that handles it (the runner caught it): send no more."""
    if _active is not None:
        _active.landed = True


# Blocks of the tracer's own bookkeeping that a stop must not cut in half (a dispatch mode
# pushed but not yet recorded, or popped but still recorded): while one runs, the stop waits
# for the next repeat.
_holding = 0


class holding_stops:
    """``with holding_stops():`` no stop lands inside the block; it lands after it, on the next
    repeat (``REPEAT`` seconds)."""

    def __enter__(self) -> None:
        global _holding
        _holding += 1

    def __exit__(self, *exc_info: object) -> None:
        global _holding
        _holding -= 1


class Deadline:
    """A context manager that raises ``stop_type`` in the current thread after ``seconds``, and
    again every ``REPEAT`` seconds until it lands; ``grace`` seconds later the process ends."""

    def __init__(
        self,
        seconds: Optional[float],
        stop_type: type[BaseException],
        grace: Optional[float] = None,
        on_give_up: Optional[Callable[[], None]] = None,
    ) -> None:
        self._seconds = seconds
        self._stop_type = stop_type
        self._grace = grace if grace is not None else min(max(seconds or 0.0, 2.0), 10.0)
        self._on_give_up = on_give_up
        self._saved_handler: Union[Callable[[int, Optional[FrameType]], Any], int, None] = None
        self._signal_armed = False
        self._done = threading.Event()
        self._threads: list[threading.Thread] = []
        self._thread = threading.get_ident()
        self.landed = False

    def __enter__(self) -> Deadline:
        global _active
        if not self._seconds:
            return self
        _active = self
        if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
            self._saved_handler = signal.signal(signal.SIGALRM, self._expire)
            self._signal_armed = True
            signal.setitimer(signal.ITIMER_REAL, self._seconds, REPEAT)
        else:
            self._start(self._send_until_landed)
        self._start(self._watch)
        return self

    def __exit__(self, *exc_info: object) -> None:
        global _active
        self.landed = True
        self._done.set()
        if self._signal_armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._saved_handler if self._saved_handler is not None else signal.SIG_DFL)
            self._signal_armed = False
        for thread in self._threads:
            thread.join()
        self._threads.clear()
        if not self._signal_armed and self._seconds:
            send_exception(self._thread, None)  # withdraw a stop that was sent but not delivered
        if _active is self:
            _active = None

    def _start(self, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name="ampdoctor-deadline", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _expire(self, signum: int, frame: Optional[FrameType]) -> None:
        if not self.landed and not _holding:
            raise self._stop_type()

    def _send_until_landed(self) -> None:
        if self._done.wait(self._seconds):
            return
        while not self.landed:
            if not _holding:
                send_exception(self._thread, self._stop_type)
            if self._done.wait(REPEAT):
                return

    def _watch(self) -> None:
        if self._done.wait((self._seconds or 0.0) + self._grace):  # started only with a deadline
            return
        sys.stderr.write(
            f"ampdoctor trace: the script did not stop within {self._grace:g} s of --timeout "
            "(the stop was swallowed, as in a __del__ method or a bare except:); ending it\n"
        )
        if self._on_give_up is not None:
            try:
                self._on_give_up()
            except BaseException as exc:  # the process ends either way
                sys.stderr.write(f"ampdoctor trace: no report: {type(exc).__name__}: {exc}\n")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_TIMEOUT)
