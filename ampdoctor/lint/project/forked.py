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
    from typing import Any, TypeVar

    T = TypeVar("T")


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


class Ends:
    """``count`` pieces of work (by index) shared by this process and a child forked after this
    is made, which need not know beforehand how long the rest of their work takes: the child
    takes the pieces from the front (``front``), this process from the back (``back``), each
    saying in memory they share which piece it takes before it starts on it, until they meet.
    Neither takes a piece the other has said it took; the two may take the last one at the same
    moment, each before it reads what the other wrote, and then both do it (the same answer
    either way). None is left out: a process stops only at a piece the other has taken, and
    finishes every piece it has taken.

    The two counters are 8-byte words of an anonymous shared mapping, each written by one process
    only, in one aligned store (a ``memoryview`` item): the other reads either value, never a
    mix. The front only grows and the back only shrinks, so a value read late makes a process take
    a piece the other took (done twice), never stop short."""

    def __init__(self, count: int) -> None:
        import mmap

        self.count = count
        self._map = mmap.mmap(-1, 16)  # anonymous: shared with the children forked from now on
        self._words = memoryview(self._map).cast("q")
        self._words[0] = 0  # the front: the child has taken the pieces before it
        self._words[1] = count  # the back: this process has taken the pieces from it on

    def front(self, work: Callable[[int], T]) -> list[T]:
        """In the child: pieces 0, 1, ... until one the back has taken; their answers."""
        words = self._words
        done = []
        for index in range(self.count):
            if index >= words[1]:
                break
            words[0] = index + 1
            done.append(work(index))
        return done

    def back(self, work: Callable[[int], T]) -> dict[int, T]:
        """In this process: pieces count-1, count-2, ... until one the front has taken; their
        answers by index."""
        words = self._words
        done = {}
        index = self.count - 1
        while index >= words[0]:
            words[1] = index
            done[index] = work(index)
            index -= 1
        return done

    def joined(self, front: list[T], back: dict[int, T]) -> list[T]:
        """Every piece's answer, in order, from what ``front`` (in the child) and ``back`` did."""
        return front + [back[index] for index in range(len(front), self.count)]

    def close(self) -> None:
        self._words.release()
        self._map.close()

    def __enter__(self) -> Ends:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
