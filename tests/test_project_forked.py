"""The project checks' forked share (``lint/project/forked.py``): the same findings as one
process, what the child summarized kept in the cache, and a child that fails or is left."""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from pathlib import Path

import pytest
from helpers import PROJECTS

from ampdoctor.config import Settings
from ampdoctor.lint import LintRequest, known_codes, lint_paths
from ampdoctor.lint.project import checks, forked
from ampdoctor.lint.project.forked import Forked, ForkFailed

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks only on Linux")


def _every_buggy_twin(root: Path) -> Path:
    """All the buggy fixture projects side by side, as one marked project."""
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'all'\n")
    for project in sorted(p for p in PROJECTS.iterdir() if (p / "buggy").is_dir()):
        shutil.copytree(project / "buggy", root / project.name)
    return root


def _findings(root: Path, jobs: int | None, use_cache: bool = False) -> list[tuple]:
    settings = Settings(root=root)
    request = LintRequest(settings, settings.enabled_codes(known_codes()), use_cache=use_cache, jobs=jobs)
    run = lint_paths([root], request, cwd=root)
    return [
        (f.location.path, f.location.line, f.location.column, f.code, f.message, tuple(f.related)) for f in run.findings
    ]


@pytest.fixture
def forks(monkeypatch):
    """Every project with a target forks (the test runner's timeout thread aside); counts the
    forks."""
    made = []
    original = Forked.__init__

    def counted(self, work):
        made.append(work)
        original(self, work)

    monkeypatch.setattr(checks, "FORK_TARGETS", 1)
    monkeypatch.setattr(checks, "can_fork", lambda: True)
    monkeypatch.setattr(Forked, "__init__", counted)
    return made


def test_the_forked_checks_find_what_one_process_finds(tmp_path, forks):
    root = _every_buggy_twin(tmp_path / "all")
    alone = _findings(root, jobs=1)
    assert not forks
    together = _findings(root, jobs=2)
    assert len(forks) == 1
    assert together == alone
    codes = {finding[3] for finding in alone}
    assert {"AMP211", "AMP201", "AMP205"} <= codes  # the first check's findings and the others'


def _stored_summaries(root: Path) -> dict[str, str]:
    folder = root / ".ampdoctor_cache"
    index = next(p for p in folder.glob("summaries-*.json") if not p.name.endswith("-reports.json"))
    document = json.loads(index.read_text())
    blob = (folder / document["blob"]).read_bytes()
    return {
        rel: blob[entry["span"][0] : entry["span"][0] + entry["span"][1]].decode()
        for rel, entry in document["files"].items()
        if "span" in entry
    }


def test_a_fork_the_system_refuses_leaves_every_check_to_this_process(tmp_path, forks, monkeypatch):
    root = _every_buggy_twin(tmp_path / "all")
    alone = _findings(root, jobs=1)

    def refused(self, work) -> None:  # (``os.fork`` itself also starts the lint's workers)
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(Forked, "__init__", refused)
    assert _findings(root, jobs=2) == alone  # not "the project analysis failed"


def test_what_the_child_summarized_is_kept_in_the_cache(tmp_path, forks):
    root = _every_buggy_twin(tmp_path / "all")
    alone = _findings(root, jobs=1, use_cache=True)
    kept_alone = _stored_summaries(root)
    shutil.rmtree(root / ".ampdoctor_cache")
    together = _findings(root, jobs=2, use_cache=True)
    assert len(forks) == 1
    assert together == alone
    assert _stored_summaries(root) == kept_alone
    # and a second run is served from it with the same findings
    assert _findings(root, jobs=2, use_cache=True) == alone


def test_without_a_cache_the_child_sends_back_its_findings_only(tmp_path, forks, monkeypatch):
    # What the child summarized goes back only to be saved: with --no-cache nothing is sent
    # (on the 31-repository tree, 4.6 MB pickled that this process decoded and dropped).
    root = _every_buggy_twin(tmp_path / "all")
    answers = []
    original = Forked.result

    def recorded(self):
        answers.append(original(self))
        return answers[-1]

    monkeypatch.setattr(Forked, "result", recorded)
    alone = _findings(root, jobs=1)
    assert _findings(root, jobs=2) == alone
    (found, changes), *_ = answers
    assert found and changes == {}
    assert _findings(root, jobs=2, use_cache=True) == alone
    changes = answers[-1][1]
    assert changes  # with a cache, the child's summaries come back to be kept
    # as the JSON text the cache writes, not as objects this process would hold to its end
    assert not [rel for rel, entry in changes.items() if isinstance(entry.get("summary"), dict)]
    assert all(isinstance(json.loads(entry["text"]), dict) for entry in changes.values() if "text" in entry)
    assert any("text" in entry for entry in changes.values())


def test_a_summary_adopted_as_text_is_read_and_saved(tmp_path):
    from ampdoctor.lint.project.store import SummaryStore

    (tmp_path / "helpers.py").write_text("def update(scaler, optimizer):\n    scaler.step(optimizer)\n")
    store = SummaryStore(tmp_path, tmp_path / "cache")
    made = store.summary("helpers.py")
    assert made is not None and "update" in made["functions"]
    child = SummaryStore(tmp_path, tmp_path / "cache")
    child.changed = set()
    assert child.summary("helpers.py") == made
    sent = child.changes()
    assert set(sent) == {"helpers.py"} and "summary" not in sent["helpers.py"]
    # a store that checked the file against its bytes, with no summary yet, takes the text ...
    here = SummaryStore(tmp_path, tmp_path / "cache")
    here.has_class("helpers.py", "scaler")  # (reads and hashes the file)
    assert "summary" not in here.entries["helpers.py"]
    here.adopt(sent)
    assert here.entries["helpers.py"]["text"] == sent["helpers.py"]["text"]
    assert here.summary("helpers.py") == made
    # ... and a store that never checked the file takes the whole entry
    fresh = SummaryStore(tmp_path, tmp_path / "cache")
    fresh.adopt(sent)
    assert fresh.summary("helpers.py") == made
    fresh.save()
    assert SummaryStore(tmp_path, tmp_path / "cache").summary("helpers.py") == made


def test_a_child_that_raises_is_an_error_here():
    def work():
        raise ValueError("no such module")

    with Forked(work) as child, pytest.raises(ForkFailed, match="ValueError: no such module"):
        child.result()


def test_a_child_that_ends_without_answer_is_an_error_here():
    with Forked(lambda: os._exit(3)) as child, pytest.raises(ForkFailed, match="without an answer"):
        child.result()


def test_a_large_answer_comes_back_whole():
    with Forked(lambda: list(range(200_000))) as child:
        assert child.result() == list(range(200_000))


def test_a_child_left_behind_is_ended_and_reaped():
    import time

    with pytest.raises(RuntimeError, match="here"), Forked(lambda: time.sleep(60)) as child:
        pid = child._pid
        raise RuntimeError("an error here while the child works")
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # already reaped: no zombie is left


def test_no_fork_while_another_thread_runs(monkeypatch):
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not forked.can_fork()
    finally:
        stop.set()
        thread.join()
    monkeypatch.setattr(forked.threading, "active_count", lambda: 1)  # the runner's timeout thread
    assert forked.can_fork()


def _square(index: int) -> int:
    return index * index


@pytest.mark.parametrize("count", [1, 2, 7, 400])
def test_two_ends_share_the_pieces_and_leave_none_out(count):
    """The child takes pieces from the front and this process from the back, at the same time:
    every piece has its answer, in order, and the two met (none was left to nobody)."""
    with forked.Ends(count) as ends:
        with Forked(lambda: ends.front(_square)) as child:
            back = ends.back(_square)
            front = child.result()
        assert ends.joined(front, back) == [_square(i) for i in range(count)]
        assert set(range(len(front))) | set(back) == set(range(count))


def test_a_child_that_comes_late_finds_every_piece_taken():
    with forked.Ends(5) as ends:
        back = ends.back(_square)  # this process takes them all before the child starts
        with Forked(lambda: ends.front(_square)) as child:
            front = child.result()
        assert front == [] and sorted(back) == [0, 1, 2, 3, 4]
        assert ends.joined(front, back) == [0, 1, 4, 9, 16]


def test_this_process_coming_late_finds_every_piece_done():
    with forked.Ends(5) as ends:
        with Forked(lambda: ends.front(_square)) as child:
            front = child.result()  # the child is done before this process looks
            back = ends.back(_square)
        assert front == [0, 1, 4, 9, 16] and back == {}
        assert ends.joined(front, back) == front


def _back_while_the_front_is_on_piece_1(ends: forked.Ends, read_late: bool):
    """The child's share played in this process: while it works on piece 1, this process takes
    pieces from the back (reading the front as it was before the child said it took piece 1,
    with ``read_late``). What each did in order, the front's answers and the back's."""
    done: list[tuple[str, int]] = []
    backs: list[dict[int, int]] = []

    def front_work(index: int) -> int:
        done.append(("front", index))
        if index == 1:
            if read_late:
                ends._words[0] = 1  # (the child's word not written yet, as this process reads it)
            backs.append(ends.back(back_work))
            ends._words[0] = 2
        return _square(index)

    def back_work(index: int) -> int:
        done.append(("back", index))
        return _square(index)

    front = ends.front(front_work)
    return done, front, backs[0]


def test_this_process_leaves_the_piece_the_child_is_on():
    """While the child works on piece 1 (a large one, it may be), this process takes only what
    is after it."""
    with forked.Ends(4) as ends:
        done, front, back = _back_while_the_front_is_on_piece_1(ends, read_late=False)
        assert done == [("front", 0), ("front", 1), ("back", 3), ("back", 2)]
        assert front == [0, 1] and back == {3: 9, 2: 4}
        assert ends.joined(front, back) == [0, 1, 4, 9]


def test_a_piece_both_take_at_once_is_done_twice_and_answered_once():
    """Each process reads the other's counter before it takes a piece; read before the other
    wrote it, both take the same piece."""
    with forked.Ends(3) as ends:
        done, front, back = _back_while_the_front_is_on_piece_1(ends, read_late=True)
        assert done == [("front", 0), ("front", 1), ("back", 2), ("back", 1)]
        assert front == [0, 1] and back == {2: 4, 1: 1}
        assert ends.joined(front, back) == [0, 1, 4]
