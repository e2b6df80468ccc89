"""File and folder names whose bytes are not UTF-8 (a Linux file system keeps any bytes): lint
reads such files, the project analysis and its caches key them, and every report writes the
names back as the bytes they are, also to a stream that refuses what it cannot encode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "lint" / "buggy_classic_mistakes.py"
NAME = b"tr\xffain.py"


@pytest.fixture
def root(tmp_path: Path) -> bytes:
    """A marked project whose own folder name and one file name hold the byte 0xff."""
    folder = os.fsencode(tmp_path) + b"/stray\xffproject"
    try:
        os.makedirs(folder + b"/.git")
        with open(folder + b"/" + NAME, "wb") as handle:
            handle.write(FIXTURE.read_bytes())
    except (OSError, UnicodeError):
        pytest.skip("the file system refuses names that are not UTF-8")
    with open(folder + b"/pyproject.toml", "wb"):
        pass
    old = time.time() - 60  # outside the caches' racy window: a warm run trusts sizes and times
    for name in (NAME, b"pyproject.toml"):
        os.utime(folder + b"/" + name, (old, old))
    return folder


def lint(root: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    # A strict stdout, as under a UTF-8 locale; AMPDOCTOR_DEBUG makes a failing project pass raise.
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict", "AMPDOCTOR_DEBUG": "1"}
    return subprocess.run(
        [sys.executable, "-m", "ampdoctor", "lint", ".", *args], cwd=root, env=env, capture_output=True, timeout=120
    )


def test_a_name_that_is_not_utf8_is_linted_keyed_and_reported_as_its_bytes(root: bytes):
    first = lint(root, "--output-format", "concise")
    assert first.returncode == 1, first.stderr.decode(errors="replace")
    assert b"Traceback" not in first.stderr and b"project analysis failed" not in first.stderr
    assert NAME + b":18:17: AMP101" in first.stdout
    # the second run is served from both caches, the project checks' findings reused
    second = lint(root, "--output-format", "concise", "--verbose")
    assert second.returncode == 1 and second.stdout == first.stdout
    assert b"project checks reused" in second.stderr


@pytest.mark.parametrize("output_format", ["text", "sarif", "json", "github", "junit"])
def test_every_report_writes_such_a_name(root: bytes, tmp_path: Path, output_format: str):
    shown = lint(root, "--output-format", output_format, "--no-cache")
    assert shown.returncode == 1, shown.stderr.decode(errors="replace")
    written = tmp_path / f"report.{output_format}"
    to_file = lint(root, "--output-format", output_format, "--no-cache", "-o", str(written))
    assert to_file.returncode == 1, to_file.stderr.decode(errors="replace")
    assert written.read_bytes() == shown.stdout
    if output_format == "sarif":
        uris = {
            location["physicalLocation"]["artifactLocation"]["uri"]
            for run in json.loads(shown.stdout)["runs"]
            for result in run["results"]
            for location in result["locations"]
        }
        assert uris == {"tr%FFain.py"}  # the byte, percent-encoded
    elif output_format in ("text", "github"):
        assert NAME in shown.stdout
