"""Write a report file so that it is either complete or not there at all.

The text goes to a temporary file in the same folder, which is renamed over the target only
once everything was written and flushed (a rename within one folder is atomic). If anything
fails on the way — serialising, a full disk, Ctrl-C — the temporary file is removed, and a file
that was already at the target keeps its old content. An existing target keeps its permission
bits. Light on purpose (no ``tempfile``): the lint path may use it.
"""

from __future__ import annotations

import os
import stat
import time
from typing import Callable, TextIO


def write_atomic(path: str | os.PathLike[str], write: Callable[[TextIO], object]) -> None:
    """Call ``write(handle)`` on a temporary text file, then rename it to ``path``."""
    target = os.fspath(path)
    folder, name = os.path.split(os.path.abspath(target))
    mode = _existing_mode(target)
    # A name no other process uses; O_EXCL refuses to follow anything already there.
    temp = os.path.join(folder, f".{name}.{os.getpid()}-{time.monotonic_ns()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if mode is None else 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(temp, mode)
        os.replace(temp, target)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    write_atomic(path, lambda handle: handle.write(text))


def _existing_mode(path: str) -> int | None:
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return None
