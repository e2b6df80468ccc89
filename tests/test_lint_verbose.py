"""``ampdoctor lint --verbose``: notes on stderr say what a run read, made and wrote, and the
report is the same with or without them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from helpers import copy_twin


def _lint(root: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ampdoctor", "lint", *options, "train.py", "utils.py"],
        cwd=root,
        capture_output=True,
        text=True,
    )


def _notes(stderr: str) -> list[str]:
    notes = []
    for line in stderr.splitlines():
        match = re.fullmatch(r"ampdoctor: +(\d+) ms  (.+)", line)
        assert match, line  # every line of stderr is a note, stamped with its time
        notes.append(match.group(2))
    return notes


def test_verbose_tells_a_cold_run_from_a_warm_one(tmp_path: Path):
    root = copy_twin("checkpoint_helper", "buggy", tmp_path / "p")
    cold = _lint(root, "-v")
    assert cold.returncode == 1, cold.stderr
    notes = _notes(cold.stderr)
    assert "2 files to check" in notes
    assert "0 files served from the results cache, 2 to lint" in notes
    assert "linted 2 files in this process" in notes
    assert any(n.startswith("results cache written: ") for n in notes)
    assert any(n.startswith("project checks ran on ") and n.endswith(": 1 findings") for n in notes)
    assert any(re.match(r"summaries written: \d+ entries to ", n) for n in notes)

    warm = _lint(root, "--verbose")
    notes = _notes(warm.stderr)
    assert "2 files served from the results cache, 0 to lint" in notes
    assert not any(n.startswith(("linted ", "results cache written")) for n in notes)
    assert any(re.match(r"results cache \S+lint-\w+\.json: 2 entries read \(\d+ KiB\)", n) for n in notes)
    assert any(n.startswith("project checks reused from the cache") for n in notes)
    assert warm.stdout == cold.stdout  # the report itself is the same


def test_without_verbose_stderr_stays_quiet_and_the_report_is_the_same(tmp_path: Path):
    root = copy_twin("checkpoint_helper", "buggy", tmp_path / "p")
    plain = _lint(root, "--no-cache")
    noted = _lint(root, "--no-cache", "-v")
    assert plain.stderr == ""
    assert plain.stdout == noted.stdout and plain.returncode == noted.returncode == 1
    notes = _notes(noted.stderr)
    assert not any("cache" in n for n in notes if not n.startswith("project checks"))
    assert any(n.startswith("project checks ran on ") for n in notes)
