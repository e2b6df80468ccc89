"""The cyclic garbage collector is paused while files are linted, and what a batch leaves is
reclaimed (``lint/gc_budget.py``)."""

from __future__ import annotations

import gc
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ampdoctor.config import Settings
from ampdoctor.lint import LintRequest, _Job, _lint_batch, _worker_batch, gc_budget, known_codes, lint_paths

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "lint"


def _jobs(tmp_path: Path) -> list[_Job]:
    names = ("buggy_no_update.py", "clean_nanogpt_style.py")
    for name in names:
        shutil.copy(FIXTURES / name, tmp_path / name)
    return [_Job(tmp_path / name, name, ()) for name in names]


def _request(tmp_path: Path) -> LintRequest:
    return LintRequest(Settings(root=tmp_path), frozenset(known_codes()), jobs=1)


@contextmanager
def _full_collections() -> Iterator[list[str]]:
    """The full collections made inside the block (one entry each)."""
    collections: list[str] = []

    def seen(phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 2:
            collections.append(phase)

    gc.callbacks.append(seen)
    try:
        yield collections
    finally:
        gc.callbacks.remove(seen)


def test_paused_turns_the_collector_off_inside_and_back_on_after():
    assert gc.isenabled()
    with gc_budget.paused():
        assert not gc.isenabled()
        with gc_budget.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block leaves it as it found it
    assert gc.isenabled()


def test_a_worker_batch_leaves_no_cycles_behind(tmp_path: Path):
    jobs = _jobs(tmp_path)
    request = _request(tmp_path)
    gc.collect()
    with gc_budget.paused():  # as in a worker, forked from a process whose collector is off
        results = _lint_batch(jobs, request)
        assert any(result.parsed for result in results)
        assert gc.collect() > 0  # a parsed module's facts hold cycles: uncollected, they stay
        results = _worker_batch(jobs, request)
        assert any(result.parsed for result in results)
        assert gc.collect() == 0


def test_a_long_run_in_one_process_collects_as_it_goes(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(gc_budget, "_PARSED_BUDGET", 1)
    with _full_collections() as collections:
        _lint_batch(_jobs(tmp_path), _request(tmp_path))
    assert len(collections) >= 2  # one per parsed file over the (tiny) budget


def test_a_one_file_run_pays_for_no_full_collection(tmp_path: Path):
    gc.collect()
    with _full_collections() as collections:
        run = lint_paths([_jobs(tmp_path)[0].path], _request(tmp_path), cwd=tmp_path)
    assert run.results and collections == []
    assert gc.isenabled()


def test_the_project_pass_collects_as_it_summarizes(tmp_path: Path, monkeypatch):
    from ampdoctor.lint.project.store import SummaryStore

    _jobs(tmp_path)
    monkeypatch.setattr(gc_budget, "_PARSED_BUDGET", 1)
    store = SummaryStore(tmp_path, None)
    with _full_collections() as collections, gc_budget.paused():  # paused, as in a lint run
        summaries = [store.summary(name) for name in ("buggy_no_update.py", "clean_nanogpt_style.py")]
    assert all(summary is not None for summary in summaries)
    assert len(collections) == 2


def test_the_project_pass_reclaims_each_parse_with_young_collections(tmp_path: Path, monkeypatch):
    # Below the full budget, the modules summarized on demand are reclaimed by collections of
    # the youngest generation (what they parsed, not what the run holds), and they leave no
    # cycles behind for a full collection to find.
    from ampdoctor.lint.project.store import SummaryStore

    _jobs(tmp_path)
    monkeypatch.setattr(gc_budget, "_YOUNG_BUDGET", 1)
    store = SummaryStore(tmp_path, None)
    generations: list[int] = []

    def seen(phase: str, info: dict) -> None:
        if phase == "start":
            generations.append(info["generation"])

    gc.collect()
    gc.callbacks.append(seen)
    try:
        with gc_budget.paused():
            summaries = [store.summary(name) for name in ("buggy_no_update.py", "clean_nanogpt_style.py")]
            leftover = gc.collect()
    finally:
        gc.callbacks.remove(seen)
    assert all(summary is not None for summary in summaries)
    assert generations[:2] == [0, 0]
    assert leftover == 0
