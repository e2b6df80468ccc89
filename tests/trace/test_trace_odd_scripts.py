"""Scripts that do what real training scripts do — worker processes, threads, evaluation
between steps, a changed working directory, their own exception hook, argparse, anomaly
detection, hanging — run under ``ampdoctor trace`` as under ``python``, and the report is
written every time. The scripts are in scripts/odd/; most run through the installed command in
a subprocess, because they start processes and threads or end the interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ODD = Path(__file__).resolve().parent / "scripts" / "odd"


def ampdoctor(*args: str, cwd: Path = ODD, timeout: float = 240) -> subprocess.CompletedProcess:
    """``python -m ampdoctor ARGS`` (the installed command's code path) in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "ampdoctor", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def python(*args: str, cwd: Path = ODD) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=240)


def read_report(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.slow
def test_main_module_file_local_import_and_guard_are_exactly_as_under_python(tmp_path):
    plain = python("main_probe.py", "--lr", "3")
    traced = ampdoctor("trace", "main_probe.py", "--steps", "0", "--json", str(tmp_path / "r.json"), "--", "--lr", "3")
    assert plain.returncode == traced.returncode == 0, traced.stderr
    expected = json.loads(plain.stdout.splitlines()[0])
    assert expected["guard"] is True and expected["name"] == "__main__"  # the probe really probes
    assert json.loads(traced.stdout.splitlines()[0]) == expected
    assert read_report(tmp_path / "r.json")["steps"] == 3
