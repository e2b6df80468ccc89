"""The cyclic garbage collector, paused while files are linted.

Parsing a large module makes hundreds of thousands of ``ast`` nodes and fact records, every one
tracked by the collector, whose automatic passes then walk them again and again while none of
them is garbage yet. On the installed torch tree (2,285 files, two workers, six alternating
cold runs) the lint took 2.04 s (median) with those passes and 1.68 s without them, and 3.15 s
of CPU against 2.5 s; on a tree of eight training repositories, 1.98 s against 1.69 s.

The fact model's reference cycles (a frame and its calls) are broken once a module is checked and
summarized (``AmpFacts.release``), so that reference counting frees its tree and records at once:
a collection then has none of them to walk. On a file of 50,000 lines the young collection after
it took 0.37 s while it held its cycles; on the 31-repository tree each worker spent 0.30 s in
collections, and 0.03 s once the model freed itself. The collections below stay, as a bound on
what cycles other code still makes: what a worker's batch leaves is collected once when the batch
is done, and only when the batch parsed something, so a worker's memory stays bounded by one
batch. A process that lints on its own collects after every few megabytes of parsed source
(``Spending``). A worker's imported modules are moved out of the collector's sight when it
starts (``gc.freeze``), so that collection walks only what the batch made; the project pass
does the same with what the lint pass handed it (``held``).

Freeing costs too: a 50,000-line module's tree and records took 0.15 s to free once it was
checked, a tenth of its run. The console command that lints and ends (``entry.py``) says so
(``ending``); it then keeps the last large module's tree and model (``outlive``) instead of
freeing them, and ends without freeing what it holds (``os._exit`` once its output is flushed):
2.17 -> 2.05 s on that file (medians of seven, alternating). The kept tree goes when the next
module is parsed (``let_go``), so the peak memory is what it was.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """No automatic collection inside the block; the collector is on again after it, as it was."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@contextmanager
def held() -> Iterator[None]:
    """What the process holds when the block starts is out of the collector's sight inside it
    (``gc.freeze``), and back in it after. The project pass starts with every file's results
    and summaries in hand, none of them garbage: the first collection it made walked them all
    (150 ms on the 31-repository tree, in the main process and again in its forked child, whose
    pages it also copied). Not where something is frozen already (by the application that
    called us): ``gc.unfreeze`` would let that go too."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


# A module's source from which its tree is kept to the end in a run that ends (``outlive``):
# freeing a smaller one costs less than 10 ms.
_KEEP_FROM = 100_000
_ending = False
_kept: list[object] = []


def ending(ends: bool = True) -> None:
    """This process lints and ends (``ends``): what it would free last may be left to its end.
    ``ends=False``: it goes on (``--watch``)."""
    global _ending
    _ending = ends


def outlive(size: int, *objects: object) -> None:
    """In a process that ends after the lint (``ending``), keep ``objects`` (a checked module of
    ``size`` characters: its tree and model, cycles already broken) instead of freeing them now,
    out of the collector's sight; elsewhere, nothing (they are freed as usual)."""
    if not _ending or size < _KEEP_FROM:
        return
    _kept[:] = objects
    gc.freeze()


def let_go() -> None:
    """Free what ``outlive`` kept (before another module is parsed: one kept tree at a time)."""
    if _kept:
        _kept.clear()


def worker_started() -> None:
    """In a new worker process: what it holds so far lives as long as it does."""
    gc.freeze()


def collect() -> None:
    """Reclaim the cycles a batch left (a parsed module's facts)."""
    gc.collect()


# Characters of parsed source after which a long run in one process reclaims what they left:
# the youngest generation only (what was made since the last time: the modules parsed since, and
# what of them survives, which moves on and is not walked again), so that each parse is walked
# once whatever the run holds; and, rarely, everything. A pre-commit run of a few files never
# reaches them and pays for no collection. Measured on the project pass of the 31-repository
# tree, which parses 2.5 MB of source in the main process: its peak memory was 221 MB when only
# the 4 MB budget collected (never reached there) and 144 MB with the young generation collected
# every 256 kB, for no measurable time.
_YOUNG_BUDGET = 256_000
_PARSED_BUDGET = 4_000_000


class Spending:
    """Counts the source a process has parsed and collects each time it passes a budget."""

    def __init__(self) -> None:
        self.parsed = 0
        self.young = 0

    def parsed_source(self, characters: int) -> None:
        self.parsed += characters
        self.young += characters
        if self.parsed >= _PARSED_BUDGET:
            self.parsed = self.young = 0
            gc.collect()
        elif self.young >= _YOUNG_BUDGET:
            self.young = 0
            gc.collect(0)
