"""Lint speed: a whole tree cold and warm, one file, and other linters on the same tree.

    python benchmarks/lint_bench.py [TREE] [--vs ruff,torchfix] [--repeats 3] [--torchfix-files 200]

TREE defaults to the installed torch package (found without importing torch). Every command
runs as a fresh process, the way a user or CI runs it; the table reports, of ``--repeats``
runs, the median wall time and its spread (fastest-slowest), the median CPU time of the process
and those it waited for (its workers, a forked child), and the largest resident set among them
(the peak memory ``/usr/bin/time`` reports; Linux counts a process's peak from before its
``exec`` too, so no run reports less than this script's own size, about 20 MB), with ratios
measured in this same run and the machine's load average before and after. ampdoctor's cache lives in a
temporary folder, so "cold" never sees an earlier cache and "warm" sees only its own.
TorchFix is slow (minutes for a few hundred files), so by default it runs on the first
``--torchfix-files`` files of the tree and its whole-tree time is extrapolated (and marked so).
ampdoctor's modules are byte-compiled first and the commands run without
PYTHONDONTWRITEBYTECODE, as after ``pip install`` (which compiles them); otherwise every run
would pay for compiling its own sources. The cold runs of ampdoctor, ampdoctor with
``--no-project`` and ruff alternate, so a change in machine load affects all three.
Nothing here is asserted: speed is measured, never tested.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ONE_FILE = ROOT / "fixtures" / "lint" / "clean_nanogpt_style.py"
BUGGY_FILE = ROOT / "fixtures" / "lint" / "buggy_no_update.py"  # five findings, printed with snippets


def default_tree() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("torch is not installed: pass the tree to lint")
    return Path(list(spec.submodule_search_locations)[0])


ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


class Run:
    """One run of a command: its wall time, the CPU time of it and the processes it waited for
    (workers, forked children), and the largest resident set among them (NaN where the system
    does not say: ``os.wait4`` is POSIX's)."""

    __slots__ = ("wall", "cpu", "peak_mb")

    def __init__(self, wall: float, cpu: float, peak_mb: float) -> None:
        self.wall = wall
        self.cpu = cpu
        self.peak_mb = peak_mb


def run_once(command: list[str], cwd: Path) -> Run:
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not hasattr(os, "wait4"):
        process.wait()
        return Run(time.perf_counter() - start, float("nan"), float("nan"))
    _pid, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    # ru_maxrss: kilobytes on Linux, bytes on macOS.
    peak = usage.ru_maxrss / (2**20 if sys.platform == "darwin" else 1024)
    return Run(wall, usage.ru_utime + usage.ru_stime, peak)


class Series:
    """The runs of one command: median wall time, its spread, median CPU time, largest peak."""

    def __init__(self, runs: list[Run]) -> None:
        self.runs = runs
        walls = [run.wall for run in runs]
        self.wall = statistics.median(walls)
        self.low, self.high = min(walls), max(walls)
        self.cpu = statistics.median(run.cpu for run in runs)
        self.peak_mb = max(run.peak_mb for run in runs)


def timed(command: list[str], cwd: Path, repeats: int) -> Series:
    return Series([run_once(command, cwd) for _ in range(repeats)])


def timed_together(commands: list[list[str]], cwd: Path, repeats: int) -> list[Series]:
    """Several commands run in turn, ``repeats`` rounds (a change in the machine's load affects
    them all)."""
    runs: list[list[Run]] = [[] for _ in commands]
    for _ in range(repeats):
        for index, command in enumerate(commands):
            runs[index].append(run_once(command, cwd))
    return [Series(r) for r in runs]


def _load() -> str:
    try:
        return "/".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:  # (none on this system)
        return "unknown"


def tool(name: str) -> str | None:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    return found


def python_files(tree: Path) -> list[Path]:
    return sorted(p for p in tree.rglob("*.py") if "__pycache__" not in p.parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tree", nargs="?", type=Path)
    parser.add_argument("--vs", default="ruff,torchfix", help="other linters to time, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--torchfix-files", type=int, default=200)
    args = parser.parse_args()
    tree = (args.tree or default_tree()).resolve()
    files = python_files(tree)
    size_mib = sum(p.stat().st_size for p in files) / 2**20
    ampdoctor = [sys.executable, "-m", "ampdoctor", "lint", "--isolated", "--output-format", "concise"]
    rows: list[tuple[str, Series | None, str]] = []
    load_before = _load()
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(ROOT / "ampdoctor")],
        env=ENV,
        check=False,
        stdout=subprocess.DEVNULL,
    )
    ruff = tool("ruff") if "ruff" in args.vs else None

    with tempfile.TemporaryDirectory() as work:
        cwd = Path(work)
        cache = cwd / ".ampdoctor_cache"

        def clear_cache() -> None:
            shutil.rmtree(cache, ignore_errors=True)

        cold_command = [*ampdoctor, "--no-cache", str(tree)]
        alone_command = [*ampdoctor, "--no-cache", "--no-project", str(tree)]
        ruff_command = [ruff, "check", "--no-cache", "--isolated", "--exit-zero", str(tree)] if ruff else None
        series = timed_together(
            [cold_command, alone_command, *([ruff_command] if ruff_command else [])], cwd, args.repeats
        )
        cold, alone = series[0], series[1]
        ruff_series = series[2] if ruff_command else None
        against = f"{cold.wall / ruff_series.wall:.2f}x ruff" if ruff_series else ""
        rows.append(("ampdoctor lint, cold (no cache)", cold, against))
        alone_against = f"{alone.wall / ruff_series.wall:.2f}x ruff" if ruff_series else ""
        rows.append(("ampdoctor lint --no-project, cold", alone, alone_against))
        if ruff_series:
            rows.append(("ruff check (default rules), no cache", ruff_series, ""))
        elif "ruff" in args.vs:
            rows.append(("ruff", None, "not installed: skipped"))
        run_once([*ampdoctor, str(tree)], cwd)
        time.sleep(2.5)  # let the files age past the cache's racy-write window
        run_once([*ampdoctor, str(tree)], cwd)
        warm = timed([*ampdoctor, str(tree)], cwd, args.repeats)
        rows.append(("ampdoctor lint, warm cache", warm, ""))
        clear_cache()
        # The pre-commit case: ``ampdoctor lint FILE`` on a file the cache has not seen.
        shutil.copy(ONE_FILE, cwd / ONE_FILE.name)
        # The console script, as the pre-commit hook runs it (``python -m`` would add runpy).
        script = Path(sys.executable).with_name("ampdoctor")
        plain = [
            str(script) if script.is_file() else sys.executable,
            *([] if script.is_file() else ["-m", "ampdoctor"]),
            "lint",
            ONE_FILE.name,
        ]
        one_times = []
        for _ in range(max(args.repeats, 5)):
            clear_cache()
            one_times.append(run_once(plain, cwd))
        rows.append((f"ampdoctor lint {ONE_FILE.name} (one file, not cached)", Series(one_times), ""))
        one = timed(plain, cwd, max(args.repeats, 5))
        rows.append((f"ampdoctor lint {ONE_FILE.name} (one file, cached)", one, ""))
        # The commit a hook blocks: the same, on a file with findings to print.
        shutil.copy(BUGGY_FILE, cwd / BUGGY_FILE.name)
        buggy = [*plain[:-1], BUGGY_FILE.name]
        buggy_times = []
        for _ in range(max(args.repeats, 5)):
            clear_cache()
            buggy_times.append(run_once(buggy, cwd))
        rows.append((f"ampdoctor lint {BUGGY_FILE.name} (5 findings, not cached)", Series(buggy_times), ""))
        for code in ("pass", "import ast, enum, json, pathlib, re"):
            floor = timed([sys.executable, "-c", code], cwd, max(args.repeats, 5))
            rows.append((f"  for scale: python -c '{code}'", floor, ""))

        wanted = [name.strip() for name in args.vs.split(",") if name.strip()]
        if "torchfix" in wanted:
            torchfix = tool("torchfix")
            if torchfix:
                sample = files[: args.torchfix_files]
                sample_dir = cwd / "sample"
                for index, path in enumerate(sample):
                    target = sample_dir / f"{index:04d}_{path.name}"
                    target.parent.mkdir(exist_ok=True)
                    shutil.copy(path, target)
                tf = timed([torchfix, str(sample_dir)], cwd, 1)
                whole = tf.wall * len(files) / max(1, len(sample))
                rows.append((f"TorchFix on {len(sample)} files", tf, f"whole tree extrapolated: {whole:.0f} s"))
            else:
                rows.append(("TorchFix", None, "not installed: skipped"))

    print(f"Tree: {tree} ({len(files)} files, {size_mib:.1f} MiB)")
    print(
        f"Machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, Python {platform.python_version()}"
    )
    print(
        f"Median of {args.repeats} runs (one file and import: of {max(args.repeats, 5)}); the cold runs of "
        "ampdoctor, ampdoctor --no-project and ruff alternate."
    )
    print(f"Load average (1/5/15 min) before: {load_before}; after: {_load()}")
    print()
    print("| command | wall (s) | spread (s) | CPU (s) | peak memory (MB) | note |")
    print("|---|---:|---:|---:|---:|---|")
    for name, measured, note in rows:
        if measured is None:
            print(f"| {name} | - | - | - | - | {note} |")
            continue
        print(
            f"| {name} | {measured.wall:.3f} | {measured.low:.2f}-{measured.high:.2f} | {measured.cpu:.2f} "
            f"| {measured.peak_mb:.0f} | {note} |"
        )


if __name__ == "__main__":
    main()
