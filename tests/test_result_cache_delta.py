"""The result cache writes a small delta where a run changed few entries (a pre-commit run on one
file of a large project) and the whole file otherwise; the next run reads the two as one."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ampdoctor.config import Settings
from ampdoctor.lint import LintRequest, cache, engine, known_codes, lint_paths

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "lint"


def _run(root: Path, use_cache: bool = True) -> list[tuple[str, int, str]]:
    settings = Settings(root=root, project=False)
    request = LintRequest(settings=settings, codes=settings.enabled_codes(known_codes()), use_cache=use_cache)
    return sorted((f.location.path, f.location.line, f.code) for f in lint_paths([root], request, cwd=root).findings)


def _tree(root: Path) -> Path:
    for name in ("a.py", "b.py", "c.py"):
        shutil.copy(FIXTURES / "buggy_no_update.py", root / name)
    return root


def _edit(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n{line}\n")


def _files(root: Path) -> tuple[Path, Path]:
    (whole,) = (root / ".ampdoctor_cache").glob("lint-*.json")
    return whole, whole.with_suffix(".delta")


def _linted(monkeypatch) -> list[str]:
    linted: list[str] = []
    real = engine.lint_file

    def record(path, *args, **kwargs):
        linted.append(path.name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(engine, "lint_file", record)
    return linted


def test_one_changed_file_writes_a_delta_that_the_next_run_reads(tmp_path: Path, monkeypatch):
    root = _tree(tmp_path)
    _run(root)
    whole, delta = _files(root)
    before = whole.read_bytes()
    assert not delta.exists()
    _edit(root / "a.py", "x = 1  # edited")
    edited = _run(root)
    assert whole.read_bytes() == before  # not rewritten for one entry
    document = json.loads(delta.read_text())
    assert set(document["files"]) == {"a.py"} and document["base"] == json.loads(before)["written_ns"]
    fresh = _run(root, use_cache=False)
    linted = _linted(monkeypatch)
    assert _run(root) == edited == fresh
    assert linted == []  # a.py served from the delta, the others from the whole file


def test_past_the_delta_limit_the_whole_file_is_written_and_the_delta_dropped(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(cache, "_DELTA_ENTRIES", 1)
    root = _tree(tmp_path)
    _run(root)
    whole, delta = _files(root)
    _edit(root / "a.py", "x = 1")
    _run(root)
    assert delta.exists()
    _edit(root / "b.py", "y = 2")  # with a.py's, two entries: past the limit
    expected = _run(root)
    assert not delta.exists()
    assert {"a.py", "b.py", "c.py"} <= set(json.loads(whole.read_text())["files"])
    linted = _linted(monkeypatch)
    assert _run(root) == expected and linted == []


def test_a_delta_written_over_another_base_is_not_read(tmp_path: Path, monkeypatch):
    root = _tree(tmp_path)
    _run(root)
    whole, delta = _files(root)
    _edit(root / "a.py", "x = 1")
    _run(root)
    assert "a.py" in json.loads(delta.read_text())["files"]
    document = json.loads(whole.read_text())
    document["written_ns"] += 1  # another run rewrote the whole file since
    whole.write_text(json.dumps(document))
    fresh = _run(root, use_cache=False)
    linted = _linted(monkeypatch)
    assert _run(root) == fresh
    assert linted == ["a.py"]  # its entry in the stale delta is not trusted


def test_an_entry_of_the_delta_is_racy_against_its_own_write_time(tmp_path: Path):
    """A file modified just before its entry went into the delta is verified by its bytes,
    however long before that the whole file was written."""
    path = tmp_path / "a.py"
    path.write_text("x = 1\n")
    stat = os.stat(path)
    results = cache.ResultCache(tmp_path, ["AMP101"])
    results.entries["a.py"] = {"key": "k", "findings": [], "suppressed": 0, "stat": [stat.st_size, stat.st_mtime_ns]}
    results.written_ns = stat.st_mtime_ns + 10 * cache.RACY_NS  # the whole file: long after the change
    assert results.by_stat("a.py", stat) is not None
    results._entry_ns["a.py"] = stat.st_mtime_ns + 1  # its delta entry: just after it
    assert results.by_stat("a.py", stat) is None


def test_a_cache_file_is_written_from_pieces_as_they_come_and_atomically(tmp_path: Path):
    made = []

    def pieces():
        for piece in (b"ab", b"", b"cd"):
            made.append(piece)
            yield piece

    target = tmp_path / "blob.bin"
    cache.write_cache_file(target, pieces())
    assert target.read_bytes() == b"abcd" and made == [b"ab", b"", b"cd"]

    def failing():
        yield b"partial"
        raise ValueError("the maker failed")

    try:
        cache.write_cache_file(target, failing())
    except ValueError:
        pass
    else:  # pragma: no cover - the error must reach the caller
        raise AssertionError("the maker's error was swallowed")
    assert target.read_bytes() == b"abcd"  # the old file stands
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blob.bin"]  # no temporary file left
