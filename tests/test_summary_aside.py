"""A large module's value flows made in a forked child while the rules run
(``project/summary.py`` ``start_summary``): the same summary and findings as in one process, a
child that fails made up for here, and none left behind."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from ampdoctor.config import Settings
from ampdoctor.lint import LintRequest, engine, known_codes, lint_paths
from ampdoctor.lint.engine import parse_source
from ampdoctor.lint.facts import build_facts
from ampdoctor.lint.project import forked, summary, values
from ampdoctor.lint.project.forked import Forked, ForkFailed

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks only on Linux")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "lint"


@pytest.fixture
def forks(monkeypatch):
    """Every module counts as large, and forks (the test runner's timeout thread aside); the
    children's process ids."""
    pids: list[int] = []
    original = Forked.__init__

    def counted(self, work):
        original(self, work)
        pids.append(self._pid)

    monkeypatch.setattr(summary, "FLOWS_ASIDE_FROM", 1)
    monkeypatch.setattr(forked, "can_fork", lambda: True)
    monkeypatch.setattr(Forked, "__init__", counted)
    return pids


def _facts(name: str):
    source = (FIXTURES / name).read_text(encoding="utf-8")
    return build_facts(parse_source(source), source)


NAMES = ["clean_nanogpt_style.py", "buggy_classic_mistakes.py", "clean_scaler_wrapper_class.py"]


@pytest.mark.parametrize("name", NAMES)
def test_the_flows_made_aside_are_those_made_here(forks, name):
    here = summary.start_summary(_facts(name))()
    assert not forks
    aside = summary.start_summary(_facts(name), aside=True)()
    assert len(forks) == 1
    assert aside == here
    assert aside["flows"]


def test_a_child_that_cannot_answer_is_made_up_for_here(forks, monkeypatch):
    def failed(self):
        self._reap()
        raise ForkFailed("the forked check ended without an answer")

    monkeypatch.setattr(Forked, "result", failed)
    name = NAMES[0]
    assert summary.start_summary(_facts(name), aside=True)() == summary.summarize(_facts(name))
    assert len(forks) == 1


def test_a_run_that_lints_alone_with_cores_to_spare_makes_the_flows_aside(tmp_path, forks):
    for name in NAMES:
        (tmp_path / name).write_bytes((FIXTURES / name).read_bytes())

    def findings(jobs: int) -> list[tuple]:
        settings = Settings(root=tmp_path)
        request = LintRequest(settings, settings.enabled_codes(known_codes()), use_cache=False, jobs=jobs)
        run = lint_paths([tmp_path], request, cwd=tmp_path)
        return [(f.location.path, f.location.line, f.code, f.message) for f in run.findings]

    alone = findings(jobs=1)  # one core asked for: nothing is forked
    assert not forks and alone
    assert findings(jobs=2) == alone  # three files, linted here: each module's flows aside
    assert len(forks) == len(NAMES)


def test_rules_that_fail_leave_no_child_behind(tmp_path, forks, monkeypatch):
    def broken(facts, codes):
        raise RuntimeError("a defect")

    monkeypatch.setattr(engine, "_reports", broken)
    path = tmp_path / "train.py"
    path.write_bytes((FIXTURES / NAMES[0]).read_bytes())
    options = engine.LintOptions(frozenset(known_codes()), summaries=True, spare_core=True)
    with pytest.raises(RuntimeError):
        engine.check_source(path.read_text(encoding="utf-8"), str(path), options, [])
    assert len(forks) == 1
    with pytest.raises(ChildProcessError):
        os.waitpid(forks[0], os.WNOHANG)  # reaped: the summary was finished all the same


def test_a_fork_the_system_refuses_leaves_the_flows_to_this_process(forks, monkeypatch):
    def refused() -> int:
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(os, "fork", refused)
    name = NAMES[1]
    assert summary.start_summary(_facts(name), aside=True)() == summary.summarize(_facts(name))
    assert not forks


def test_a_refused_fork_leaves_no_pipe_open(monkeypatch):
    def refused() -> int:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", refused)
    before = set(os.listdir("/proc/self/fd"))
    with pytest.raises(OSError):
        Forked(lambda: None)
    assert set(os.listdir("/proc/self/fd")) == before


def _made_here(monkeypatch, child_waits_for: Path | None = None) -> list[int]:
    """The indexes of the flows made in this process (``FlowMaker``), not in a child; with
    ``child_waits_for``, the child waits for that file to appear (this process makes it once it
    has taken the pieces it could) before its first flow."""
    here = os.getpid()
    made: list[int] = []
    original = values.FlowMaker.__call__

    def counted(self, index):
        if os.getpid() == here:
            made.append(index)
        elif child_waits_for is not None and not made:
            deadline = time.monotonic() + 10
            while not child_waits_for.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            made.append(-1)  # (the child's copy of the list: it waits once)
        return original(self, index)

    monkeypatch.setattr(values.FlowMaker, "__call__", counted)
    if child_waits_for is not None:
        back = forked.Ends.back

        def then_signal(self, work):
            done = back(self, work)
            child_waits_for.touch()
            return done

        monkeypatch.setattr(forked.Ends, "back", then_signal)
    return made


def _kept_ends(monkeypatch) -> list[forked.Ends]:
    """The ``forked.Ends`` made from now on."""
    shared: list[forked.Ends] = []
    made_ends = forked.Ends.__init__

    def kept(self, count):
        made_ends(self, count)
        shared.append(self)

    monkeypatch.setattr(forked.Ends, "__init__", kept)
    return shared


def _until(condition) -> None:
    deadline = time.monotonic() + 10
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def _flowing(facts) -> int:
    """How many flows the summary makes: the module body's and each named function's."""
    return 1 + sum(1 for _f, frame in facts.functions if summary.qualname(frame) is not None)


@pytest.mark.parametrize("name", NAMES)
def test_this_process_makes_the_flows_the_child_has_not_reached(forks, monkeypatch, tmp_path, name):
    """The child makes the call records, then takes the first flow and is slow at it; this
    process, done with the rules at once, takes every other flow, from the last function back,
    and leaves the one the child is on. The summary is the one made in one process."""
    made = _made_here(monkeypatch, child_waits_for=tmp_path / "taken")
    records: list[int] = []
    original = summary.call_records

    def counted(*args):
        records.append(os.getpid())
        return original(*args)

    monkeypatch.setattr(summary, "call_records", counted)
    shared = _kept_ends(monkeypatch)
    facts = _facts(name)
    finish = summary.start_summary(facts, aside=True)
    _until(lambda: shared[0]._words[0] >= 1)  # the child has taken the first flow
    assert not made
    aside = finish()
    assert len(forks) == 1
    assert records == []  # (made in the child)
    assert made == list(reversed(range(1, _flowing(facts))))
    assert aside == summary.summarize(_facts(name))


@pytest.mark.parametrize("name", NAMES)
def test_the_child_makes_every_piece_when_this_process_comes_late(forks, monkeypatch, name):
    made = _made_here(monkeypatch)
    shared = _kept_ends(monkeypatch)
    facts = _facts(name)
    finish = summary.start_summary(facts, aside=True)
    _until(lambda: shared[0]._words[0] == shared[0].count)  # the rules, here, take longer
    aside = finish()
    assert len(forks) == 1 and made == []
    assert aside == summary.summarize(_facts(name))


def test_flows_made_here_before_a_child_failed_are_kept(forks, monkeypatch):
    made = _made_here(monkeypatch)

    def failed(self):
        self._reap()
        raise ForkFailed("the forked check ended without an answer")

    monkeypatch.setattr(Forked, "result", failed)
    name = NAMES[2]
    facts = _facts(name)
    aside = summary.start_summary(facts, aside=True)()
    assert sorted(made) == list(range(_flowing(facts)))  # each made once: the ones from the back kept
    assert aside == summary.summarize(_facts(name))


def test_no_shared_memory_to_be_had_leaves_the_work_to_this_process(forks, monkeypatch):
    def refused(self, count):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(forked.Ends, "__init__", refused)
    name = NAMES[0]
    assert summary.start_summary(_facts(name), aside=True)() == summary.summarize(_facts(name))
    assert not forks
