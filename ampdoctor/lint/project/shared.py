"""Summaries made on demand, shared between the two processes that run the project checks.

The project checks run in this process and, beside it, in a forked child (``forked.py``,
``checks.run_checks``). Both summarize on demand the modules their checks reach and the lint
pass did not summarize; on the 31-repository tree, 136 modules were summarized in both (0.37 s
of work done twice). A summary is a function of the module's bytes, so the process that makes
one first leaves it in a folder both can read, named by the bytes' hash; the other, about to
make the same summary, reads it instead (a pickle: a tenth of the time a parse and summary
take). Which of the two makes a summary changes with timing; the summary does not.

A file is written whole under another name and renamed, so that a reader never sees half of
one; a file that cannot be written or read is made again, as without the folder.
"""

from __future__ import annotations

import os
import pickle

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from .shapes import ModuleSummary


def memory_folder() -> str | None:
    """A folder in memory for the shared summaries (``/dev/shm`` where the system has one this
    process may write in), else None (the temporary folder): a file made there took 0.02 ms, in
    the temporary folder on disk 0.2 ms, and the checks of the 31-repository tree share about 140.
    A memory folder too small for them fails a write, and that summary is made by the other."""
    folder = "/dev/shm"
    return folder if os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK) else None


class SharedSummaries:
    """The summaries one process made on demand, readable by the other, in ``folder``."""

    __slots__ = ("folder",)

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def get(self, key: str) -> tuple[bool, ModuleSummary | None]:
        """Whether a process left the summary of the bytes whose hash is ``key``, and that
        summary (None for bytes that do not parse)."""
        try:
            with open(os.path.join(self.folder, key), "rb") as handle:
                summary: ModuleSummary | None = pickle.load(handle)
        except Exception:  # (none, or one that cannot be read whole: made here instead)
            return False, None
        return True, summary

    def put(self, key: str, summary: ModuleSummary | None) -> None:
        """Leave ``summary`` (of the bytes whose hash is ``key``) for the other process."""
        path = os.path.join(self.folder, key)
        partial = f"{path}.{os.getpid()}.part"
        try:
            with open(partial, "wb") as handle:
                pickle.dump(summary, handle, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(partial, path)
        except OSError:  # a full disk: the other process makes it itself
            try:
                os.unlink(partial)
            except OSError:
                pass
