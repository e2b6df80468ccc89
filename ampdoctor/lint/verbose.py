"""``ampdoctor lint --verbose``: what a run read, made and wrote, and when, on standard error.

Each note is one line, prefixed with the milliseconds since the run began: the files checked,
what the results cache served, where the files were linted, and for the project analysis the
listing, the summaries read from the store against those made in this run, whether the project
checks ran or were reused, and the cache files written. A note is made only in the main process
(the workers lint; they say nothing). Off, ``note`` is one test of a module global.
"""

from __future__ import annotations

import os
import sys
import time

_started: float | None = None


def enable() -> None:
    global _started
    _started = time.perf_counter()


def disable() -> None:
    global _started
    _started = None


def on() -> bool:
    return _started is not None


def note(message: str) -> None:
    if _started is None:
        return
    elapsed = (time.perf_counter() - _started) * 1000
    sys.stderr.write(f"ampdoctor: {elapsed:6.0f} ms  {message}\n")


def size(path: object) -> str:
    """A cache file's size, for a note (``-`` when it cannot be read)."""
    try:
        return f"{os.stat(str(path)).st_size / 1024:.0f} KiB"
    except OSError:
        return "-"
