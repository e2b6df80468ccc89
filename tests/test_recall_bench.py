"""benchmarks/recall_bench.py: it runs, and it scores a tiny corpus exactly (found, false alarm,
miss), per family and overall."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "recall_bench.py"


def _bench():
    spec = importlib.util.spec_from_file_location("recall_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BUGGY = """\
import torch
from torch.cuda.amp import autocast  # expect: AMP401


def forward(model, x):
    return model(x)  # expect: AMP101
"""

CLEAN_WITH_A_FINDING = """\
from torch.cuda.amp import GradScaler
"""


def _corpus(tmp_path: Path) -> Path:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "buggy_one.py").write_text(BUGGY, encoding="utf-8")
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "clean_two.py").write_text(CLEAN_WITH_A_FINDING, encoding="utf-8")
    return tmp_path


def test_scoring_of_a_tiny_corpus(tmp_path: Path):
    bench = _bench()
    per_code, notes, count = bench.score_corpus(_corpus(tmp_path))
    assert count == 2
    table = {
        label: (s.expected, s.findings, s.hits, s.false_alarms, s.misses, s.precision, s.recall)
        for label, s in bench.rows(per_code, by_code=False)
    }
    assert table == {
        "AMP1xx autocast regions": (1, 0, 0, 0, 1, None, 0.0),
        "AMP4xx API and migration": (1, 2, 1, 1, 0, 0.5, 1.0),
        "**overall**": (2, 2, 1, 1, 1, 0.5, 0.5),
    }
    assert sorted(notes) == [
        "false alarm AMP401 nested/clean_two.py:1",
        "miss        AMP101 buggy_one.py:6",
    ]


def test_a_mistake_marked_twice_on_one_line_needs_two_findings():
    bench = _bench()
    expected = Counter({(3, "AMP208"): 2})
    hits, false_alarms, misses = bench.score_file(expected, Counter({(3, "AMP208"): 1, (9, "AMP102"): 1}))
    assert (hits["AMP208"], misses["AMP208"], false_alarms["AMP102"]) == (1, 1, 1)
    assert bench.expected_marks("x = 1\ny = 2  # expect: AMP208, AMP208\n") == Counter({(2, "AMP208"): 2})


def test_the_script_prints_a_markdown_table_and_rejects_a_missing_folder(tmp_path: Path):
    corpus = _corpus(tmp_path / "corpus")
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(corpus), "--by-code", "--details"], capture_output=True, text=True, cwd=ROOT
    )
    assert run.returncode == 0, run.stderr
    assert "| rules | expected | findings | found | false alarms | misses | precision | recall |" in run.stdout
    assert "| **overall** | 2 | 2 | 1 | 1 | 1 | 0.50 | 0.50 |" in run.stdout
    assert "|   AMP401 | 1 | 2 | 1 | 1 | 0 | 0.50 | 1.00 |" in run.stdout
    assert "miss        AMP101 buggy_one.py:6" in run.stdout
    missing = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "absent")], capture_output=True, text=True)
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"error: {tmp_path / 'absent'} is not a folder"
