"""``--timeout SECONDS``: stop a traced script that hangs or never steps, then report.

On the main thread of a POSIX process the stop comes from ``SIGALRM`` (an interval timer): the
signal handler runs even while the script waits in a blocking call (``time.sleep``, a lock, a
queue), which an exception sent to the thread would not interrupt. Elsewhere a timer thread sends
the stop to the session's thread, delivered at its next Python instruction.
"""

from __future__ import annotations

import signal
import threading
from typing import Optional

from .threads import send_exception


class Deadline:
    """A context manager that raises ``stop_type`` in the current thread after ``seconds``."""

    def __init__(self, seconds: Optional[float], stop_type: type[BaseException]) -> None:
        self._seconds = seconds
        self._stop_type = stop_type
        self._saved_handler = None
        self._signal_armed = False
        self._timer: Optional[threading.Timer] = None
        self._thread = threading.get_ident()

    def __enter__(self) -> "Deadline":
        if not self._seconds:
            return self
        if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
            self._saved_handler = signal.signal(signal.SIGALRM, self._expire)
            self._signal_armed = True
            signal.setitimer(signal.ITIMER_REAL, self._seconds)
        else:
            self._timer = threading.Timer(self._seconds, send_exception, (self._thread, self._stop_type))
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc_info) -> None:
        if self._signal_armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._saved_handler if self._saved_handler is not None else signal.SIG_DFL)
            self._signal_armed = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            send_exception(self._thread, None)  # withdraw a stop that fired but was not delivered

    def _expire(self, signum, frame) -> None:
        raise self._stop_type()
