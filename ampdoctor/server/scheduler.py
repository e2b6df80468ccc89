"""When to lint: off the event loop, the latest text only.

Each open, change or save of a document submits a lint of its text. A change waits a short
while first (``delay``): a burst of keystrokes lints once, after the last. Each submission takes
a ticket; a newer one for the same document supersedes it: the older one's wait is cancelled, and
when its lint is already running in the worker thread its result is dropped. So diagnostics are
published only for the document's latest text, never for an older version after a newer one.

The lints run one at a time in one worker thread: the event loop keeps answering the client
(hovers, code actions, cancellations) while a large file is linted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ..records import Record

# How long a change waits for the next one before its text is linted (seconds).
CHANGE_DELAY = 0.15


class Request(Record):
    """A document's text to lint: ``version`` is the client's (None when it sent none)."""

    __slots__ = ("uri", "version", "text", "path")

    def __init__(self, uri: str, version: int | None, text: str, path: str | None) -> None:
        self.uri = uri
        self.version = version
        self.text = text
        self.path = path


class Scheduler:
    """Runs ``lint(request)`` in a worker thread and hands its result to ``publish(request,
    result)`` on the event loop, unless a newer request for the document came meanwhile;
    ``failed(request, error)`` hears of a lint that raised."""

    def __init__(
        self,
        lint: Callable[[Request], object],
        publish: Callable[[Request, object], None],
        failed: Callable[[Request, BaseException], None],
    ) -> None:
        self._lint = lint
        self._publish = publish
        self._failed = failed
        self._executor: ThreadPoolExecutor | None = None
        self._pending: dict[str, asyncio.Task[None]] = {}
        self._latest: dict[str, int] = {}
        self._tickets = 0

    def submit(self, request: Request, delay: float = 0.0) -> asyncio.Task[None]:
        """Lint ``request`` after ``delay`` seconds, superseding the document's earlier requests."""
        ticket = self._supersede(request.uri)
        task = asyncio.get_running_loop().create_task(self._run(request, ticket, delay))
        self._pending[request.uri] = task
        task.add_done_callback(lambda done: self._done(request.uri, done))
        return task

    def forget(self, uri: str) -> None:
        """A closed document: nothing pending for it is published."""
        self._supersede(uri)
        self._latest.pop(uri, None)

    def is_latest(self, uri: str, ticket: int) -> bool:
        return self._latest.get(uri) == ticket

    def close(self) -> None:
        for task in self._pending.values():
            task.cancel()
        self._pending.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def _supersede(self, uri: str) -> int:
        self._tickets += 1
        self._latest[uri] = self._tickets
        earlier = self._pending.pop(uri, None)
        if earlier is not None:
            earlier.cancel()
        return self._tickets

    def _done(self, uri: str, task: asyncio.Task[None]) -> None:
        if self._pending.get(uri) is task:
            del self._pending[uri]

    async def _run(self, request: Request, ticket: int, delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        if not self.is_latest(request.uri, ticket):
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ampdoctor-lint")
        try:
            result = await asyncio.get_running_loop().run_in_executor(self._executor, self._lint, request)
        except Exception as exc:
            if self.is_latest(request.uri, ticket):
                self._failed(request, exc)
            return
        if self.is_latest(request.uri, ticket):
            self._publish(request, result)
