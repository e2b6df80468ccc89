"""Threads in a traced script.

A script may train in a thread other than the one that runs it (the session's thread). The stop
after N iterations is raised in the thread that stepped; that ends the training there, and the
session's thread must stop too, or the script would go on (save, evaluate, train again) after
ampdoctor said it stopped. ``ThreadStops`` delivers the stop to the session's thread as an
asynchronous exception, and keeps ``threading.excepthook`` from printing the stop as a crash of
the training thread.

After the report, threads the script started and left running (a producer feeding a queue
forever) would keep the process alive: ``script_threads_left`` names them so the command can end
the process as the stop intended.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Callable, Optional


class ThreadStops:
    def __init__(self, stop_type: type[BaseException]) -> None:
        self._stop_type = stop_type
        self._session_thread = threading.get_ident()
        self._saved_hook: Optional[Callable[[threading.ExceptHookArgs], object]] = None

    def install(self) -> None:
        self._saved_hook = threading.excepthook
        original, stop_type = self._saved_hook, self._stop_type

        def quiet_stop(args: threading.ExceptHookArgs) -> None:
            if args.exc_type is not None and issubclass(args.exc_type, stop_type):
                return
            original(args)

        threading.excepthook = quiet_stop

    def remove(self) -> None:
        self.cancel()
        if self._saved_hook is not None:
            threading.excepthook = self._saved_hook
            self._saved_hook = None

    @property
    def off_session_thread(self) -> bool:
        return threading.get_ident() != self._session_thread

    def stop_session_thread(self) -> None:
        """Raise the stop in the session's thread at its next Python instruction."""
        send_exception(self._session_thread, self._stop_type)

    def cancel(self) -> None:
        """Withdraw a stop not yet delivered (the script ended by itself meanwhile)."""
        send_exception(self._session_thread, None)


def send_exception(thread_id: int, exc_type: Optional[type[BaseException]]) -> None:
    """Raise ``exc_type`` in the thread at its next Python instruction (None: withdraw)."""
    target = ctypes.py_object(exc_type) if exc_type is not None else None
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), target)


def script_threads_left(before: set[threading.Thread]) -> list[threading.Thread]:
    """Threads started since ``before`` that are alive and would keep the process running."""
    return [
        thread
        for thread in threading.enumerate()
        if thread not in before and thread.is_alive() and not thread.daemon and thread is not threading.current_thread()
    ]
