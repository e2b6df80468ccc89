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


# Measured from a fresh interpreter, as the benchmark runs: Linux counts a process's peak from
# before its exec too, so a run started by a large process (the test session) would report at
# least that process's size.
MEASURE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("lint_bench", sys.argv[1])
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
runs = [bench.run_once([sys.executable, "-c", code], ".") for code in (sys.argv[2], "pass")]
print(json.dumps([[run.wall, run.cpu, run.peak_mb] for run in runs]))
"""


def test_a_run_counts_the_processes_it_waited_for(tmp_path: Path):
    import json
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", MEASURE, str(SCRIPT), CHILD], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    (wall, cpu, peak), (_wall, _cpu, small_peak) = json.loads(out.stdout)
    assert peak >= 120
    assert cpu > 0.02
    assert wall >= 0.0
    assert small_peak < peak - 60


def test_a_series_reports_the_median_and_the_spread():
    bench = _bench()
    runs = [bench.Run(wall, cpu, peak) for wall, cpu, peak in [(3.0, 5.0, 100.0), (1.0, 2.0, 140.0), (2.0, 4.0, 90.0)]]
    series = bench.Series(runs)
    assert (series.wall, series.low, series.high) == (2.0, 1.0, 3.0)
    assert series.cpu == 4.0
    assert series.peak_mb == 140.0
