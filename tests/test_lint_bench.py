"""benchmarks/lint_bench.py: what it reports of a run (wall time, the CPU time of the process and
of those it waited for, the largest resident set among them) and of a series (median, spread)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "lint_bench.py"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the peak is read as Linux reports it"),
]


def _bench():
    spec = importlib.util.spec_from_file_location("lint_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# A parent that waits for a child process holding 120 MB and spending CPU time: what the run
# reports is the child's peak and both processes' CPU time.
CHILD = """
import subprocess, sys
code = "b = bytearray(120 * 2**20); b[::4096] = b'x' * len(b[::4096]); sum(range(3_000_000))"
subprocess.run([sys.executable, "-c", code], check=True)
"""


def test_a_run_counts_the_processes_it_waited_for(tmp_path: Path):
    bench = _bench()
    run = bench.run_once([sys.executable, "-c", CHILD], tmp_path)
    assert run.peak_mb >= 120
    assert run.cpu > 0.02
    assert run.wall >= 0.0
    small = bench.run_once([sys.executable, "-c", "pass"], tmp_path)
    assert small.peak_mb < run.peak_mb - 60


def test_a_series_reports_the_median_and_the_spread():
    bench = _bench()
    runs = [bench.Run(wall, cpu, peak) for wall, cpu, peak in [(3.0, 5.0, 100.0), (1.0, 2.0, 140.0), (2.0, 4.0, 90.0)]]
    series = bench.Series(runs)
    assert (series.wall, series.low, series.high) == (2.0, 1.0, 3.0)
    assert series.cpu == 4.0
    assert series.peak_mb == 140.0
