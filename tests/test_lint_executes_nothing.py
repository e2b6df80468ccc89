"""Lint reads code and never runs it: not the linted files, not a notebook's cells, not a module
in the linted folder named like one lint itself imports."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Each file, if it ran, would leave a marker file beside itself.
SIDE_EFFECT = "open(__file__ + '.ran', 'w').write('ran')\n"
TRAINING = (
    "# -*- coding: latin-1 -*-\n"  # a declared encoding: decoding goes through tokenize
    + SIDE_EFFECT
    + "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
    + "name = '\xe9t\xe9'\n"
)


def plant(folder: Path) -> None:
    (folder / "train.py").write_bytes(TRAINING.encode("latin-1"))
    # Modules the lint and fix paths import lazily: a folder's copy must not shadow them.
    for shadow in ("tokenize.py", "tempfile.py", "difflib.py", "pathspec.py", "ampdoctor.py", "conftest.py"):
        (folder / shadow).write_text(SIDE_EFFECT + "import torch\nscaler = torch.cuda.amp.GradScaler()\n")
    cell = {
        "cell_type": "code",
        "metadata": {},
        "outputs": [],
        "execution_count": None,
        "source": SIDE_EFFECT.replace("__file__", "'nb.ipynb'")
        + "import torch\nscaler = torch.cuda.amp.GradScaler()\n",
    }
    (folder / "nb.ipynb").write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [cell]}))
    (folder / ".gitignore").write_text("*.ran\n")


def markers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".ran"))


def _script() -> str:
    found = shutil.which("ampdoctor", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("the console script is not installed")
    return found


@pytest.mark.slow
@pytest.mark.parametrize(
    "args", [["lint", "."], ["lint", "--no-cache", "--fix", "."], ["lint", "train.py", "nb.ipynb"]]
)
def test_the_console_script_runs_nothing_it_lints(tmp_path, args):
    plant(tmp_path)
    done = subprocess.run([_script(), *args], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr
    assert markers(tmp_path) == []
    if "--fix" in args:
        assert 'torch.amp.GradScaler("cuda")' in (tmp_path / "train.py").read_text(encoding="latin-1")
    else:
        assert "train.py:4:10: AMP401" in done.stdout and "nb.ipynb:cell 1:3:10: AMP401" in done.stdout


def test_the_python_api_runs_nothing_it_lints(tmp_path, monkeypatch):
    from ampdoctor.config import Settings
    from ampdoctor.lint import LintRequest, known_codes, lint_paths

    plant(tmp_path)
    monkeypatch.chdir(tmp_path)
    settings = Settings(root=tmp_path)
    run = lint_paths([tmp_path], LintRequest(settings=settings, codes=settings.enabled_codes(known_codes()), jobs=1))
    assert {f.location.path for f in run.findings} >= {"train.py", "nb.ipynb", "tokenize.py"}
    assert markers(tmp_path) == []
