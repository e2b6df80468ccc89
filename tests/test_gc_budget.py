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


@contextmanager
def _left_for_the_collector() -> Iterator[list[object]]:
    """What a full collection after the block finds unreachable: the cycles the block left."""
    gc.collect()
    found: list[object] = []
    with gc_budget.paused():
        yield found
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            gc.collect()
            found.extend(gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()


def _ours(objects: list[object]) -> list[str]:
    """The syntax nodes and records of ours among ``objects`` (a cycle that holds a module)."""
    import ast

    return sorted(
        {type(o).__name__ for o in objects if isinstance(o, ast.AST) or type(o).__module__.startswith("ampdoctor")}
    )


def test_a_checked_module_frees_itself_without_the_collector():
    # The model's cycles (a frame and its calls) are broken once the module is checked and
    # summarized (``AmpFacts.release``): reference counting frees the tree at once, and the
    # collector has nothing of it to walk.
    from ampdoctor.lint.engine import LintOptions, lint_file

    options = LintOptions(frozenset(known_codes()), False, False, (), summaries=True)
    paths = sorted(FIXTURES.glob("*.py"))
    assert len(paths) > 40
    lint_file(paths[0], paths[0].name, options, None, None)  # the rules' modules, imported once
    with _left_for_the_collector() as left:
        for path in paths:
            result = lint_file(path, path.name, options, None, None)
            assert result.parsed, path.name
    assert _ours(left) == []


def test_a_project_run_leaves_no_model_behind_either(tmp_path: Path):
    # The project pass's own parses: summaries made on demand, and modules checked again with
    # what their callers hand them (``seeds.py``).
    from helpers import PROJECTS, lint_project

    for name in ("backward_in_helper", "checkpoint_helper"):
        shutil.copytree(PROJECTS / name / "buggy", tmp_path / name)
    lint_project(tmp_path / "backward_in_helper")  # imports
    with _left_for_the_collector() as left:
        for name in ("backward_in_helper", "checkpoint_helper"):
            run = lint_project(tmp_path / name)
            assert run.findings
    assert _ours(left) == []


def test_a_model_that_is_not_released_is_found_by_these_tests():
    # The check above can fail: a model left with its cycles is what it finds.
    from ampdoctor.lint.engine import parse_source
    from ampdoctor.lint.facts import build_facts

    source = (FIXTURES / "clean_nanogpt_style.py").read_text(encoding="utf-8")
    with _left_for_the_collector() as left:
        build_facts(parse_source(source), source)
    assert "Frame" in _ours(left) and "CallSite" in _ours(left)


def test_held_keeps_what_exists_out_of_collections_and_gives_it_back():
    gc.collect()
    assert gc.get_freeze_count() == 0
    with gc_budget.held():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_held_leaves_what_the_application_froze_as_it_is():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with gc_budget.held():
            pass
        assert gc.get_freeze_count() == frozen  # not let go, nor frozen again
    finally:
        gc.unfreeze()


# ---- a run that ends: the last large module is left to the end, not freed -----------------


def _large_source(at_least: int = 100_000) -> str:
    """A module of many copies of a buggy training function (each renamed), past ``at_least``."""
    body = (FIXTURES / "buggy_no_update.py").read_text(encoding="utf-8")
    copies = []
    size = 0
    while size < at_least:
        copy = body.replace("def train(", f"def train_{len(copies)}(")
        copies.append(copy)
        size += len(copy)
    return "\n\n".join(copies)


def _check(source: str) -> list[tuple[str, int]]:
    from ampdoctor.lint.engine import LintOptions, check_source

    findings, _suppressed, parsed = check_source(source, "t.py", LintOptions(frozenset(known_codes())))
    assert parsed
    return [(f.code, f.location.line) for f in findings]


def test_a_large_module_is_kept_only_in_a_run_that_ends(monkeypatch):
    import ast

    from ampdoctor.lint.model import AmpFacts

    frozen: list[int] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(1))  # not this test process's objects
    monkeypatch.setattr(gc_budget, "_kept", [])
    source = _large_source()
    monkeypatch.setattr(gc_budget, "_ending", False)
    freed = _check(source)
    assert gc_budget._kept == [] and not frozen  # an API call, a test, the editor server: freed
    monkeypatch.setattr(gc_budget, "_ending", True)
    kept = _check(source)
    assert kept == freed and kept  # the same findings either way
    assert [type(o) for o in gc_budget._kept] == [ast.Module, AmpFacts]
    assert frozen  # out of the collector's sight: a later collection does not walk it
    # A small module is freed as usual, and the large one kept before is let go first.
    _check((FIXTURES / "buggy_no_update.py").read_text(encoding="utf-8"))
    assert gc_budget._kept == []


def test_the_kept_module_is_let_go_before_the_next_parse(monkeypatch):
    from ampdoctor.lint import engine

    monkeypatch.setattr(gc, "freeze", lambda: None)
    monkeypatch.setattr(gc_budget, "_kept", [])
    monkeypatch.setattr(gc_budget, "_ending", True)
    _check(_large_source())
    assert gc_budget._kept
    held_at_parse = []
    parse = engine.parse_source

    def watched(source: str):
        held_at_parse.append(bool(gc_budget._kept))
        return parse(source)

    monkeypatch.setattr(engine, "parse_source", watched)
    _check(_large_source())
    assert held_at_parse == [False]  # never two large trees at once: the peak memory is as before
    assert gc_budget._kept
