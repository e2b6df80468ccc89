"""Notebooks through the whole lint pipeline: cell numbers, fixes written back into the JSON."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from ampdoctor.cli import main

NOTEBOOKS = Path(__file__).resolve().parent.parent / "fixtures" / "lint" / "notebooks"


def lint(*args):
    return CliRunner().invoke(main, ["lint", "--isolated", *args], catch_exceptions=False)


def test_notebook_finding_names_cell_and_line():
    result = lint("--output-format", "json", str(NOTEBOOKS / "buggy_train.ipynb"))
    assert result.exit_code == 1
    (item,) = json.loads(result.output)
    assert item["code"] == "AMP201"
    assert item["cell"] == 5 and item["line"] == 10
    text = lint(str(NOTEBOOKS / "buggy_train.ipynb")).output
    assert ":cell 5:10:9: AMP201" in text
    assert "clip_grad_norm_" in text  # the snippet comes from the cell


def test_clean_notebook():
    assert lint(str(NOTEBOOKS / "clean_train.ipynb")).exit_code == 0


def test_fix_in_notebook_keeps_everything_else(tmp_path):
    target = tmp_path / "nb.ipynb"
    shutil.copy(NOTEBOOKS / "buggy_train.ipynb", target)
    before = json.loads(target.read_text(encoding="utf-8"))
    assert lint("--fix", str(target)).exit_code == 0
    after = json.loads(target.read_text(encoding="utf-8"))
    assert [c["cell_type"] for c in after["cells"]] == [c["cell_type"] for c in before["cells"]]
    assert after["metadata"] == before["metadata"]
    changed = [i for i, (a, b) in enumerate(zip(before["cells"], after["cells"])) if a != b]
    assert changed == [4]
    assert "scaler.unscale_(optimizer)" in "".join(after["cells"][4]["source"])
    assert after["cells"][4].get("outputs") == before["cells"][4].get("outputs")
    assert lint(str(target)).exit_code == 0


def test_invalid_notebook_is_amp000(tmp_path):
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{not json autocast", encoding="utf-8")
    result = lint("--output-format", "concise", str(bad))
    assert result.exit_code == 2
    assert "AMP000" in result.output and "cannot read notebook" in result.output
