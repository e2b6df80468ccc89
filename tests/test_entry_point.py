"""The installed ``ampdoctor`` script and ``python -m ampdoctor`` in real subprocesses."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "lint"


def _script() -> str:
    found = shutil.which("ampdoctor", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail("the ampdoctor entry point is not installed next to this interpreter")
    return found


def test_installed_entry_point_lints_and_exits_1():
    result = subprocess.run([_script(), "lint", "--isolated", "--output-format", "concise",
                             str(FIXTURES / "buggy_no_update.py")], capture_output=True, text=True)
    assert result.returncode == 1, result.stderr
    assert "AMP202" in result.stdout
    assert result.stderr == ""


def test_installed_entry_point_clean_file_exits_0():
    result = subprocess.run([_script(), "lint", "--isolated", str(FIXTURES / "clean_gan_two_optimizers.py")],
                            capture_output=True, text=True)
    assert result.returncode == 0
    assert "All checks passed!" in result.stdout


def test_python_dash_m():
    result = subprocess.run([sys.executable, "-m", "ampdoctor", "--version"], capture_output=True, text=True)
    assert result.returncode == 0
    assert result.stdout.startswith("ampdoctor, version ")


def test_usage_error_has_no_traceback():
    result = subprocess.run([_script(), "lint", "--select", "BOGUS", "."], capture_output=True, text=True)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip() == "ampdoctor: error: --select: unknown rule code or prefix 'BOGUS'"
