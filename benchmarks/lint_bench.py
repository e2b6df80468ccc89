"""Lint speed: a whole tree cold and warm, one file, and other linters on the same tree.

    python benchmarks/lint_bench.py [TREE] [--vs ruff,torchfix] [--repeats 3] [--torchfix-files 200]

TREE defaults to the installed torch package (found without importing torch). Every command
runs as a fresh process, the way a user or CI runs it; the table reports the median of
``--repeats`` runs and ratios measured in this same run. ampdoctor's cache lives in a
temporary folder, so "cold" never sees an earlier cache and "warm" sees only its own.
TorchFix is slow (minutes for a few hundred files), so by default it runs on the first
``--torchfix-files`` files of the tree and its whole-tree time is extrapolated (and marked so).
ampdoctor's modules are byte-compiled first and the commands run without
PYTHONDONTWRITEBYTECODE, as after ``pip install`` (which compiles them); otherwise every run
would pay for compiling its own sources. The cold runs of ampdoctor and ruff alternate, so a
change in machine load affects both.
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


def run_once(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def timed(command: list[str], cwd: Path, repeats: int) -> float:
    """Median wall time of a command (seconds)."""
    return statistics.median(run_once(command, cwd) for _ in range(repeats))


def timed_together(commands: list[list[str]], cwd: Path, repeats: int) -> list[float]:
    """Median wall times of several commands run in turn, ``repeats`` rounds."""
    times: list[list[float]] = [[] for _ in commands]
    for _ in range(repeats):
        for index, command in enumerate(commands):
            times[index].append(run_once(command, cwd))
    return [statistics.median(t) for t in times]


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
    rows: list[tuple[str, float, str]] = []
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
        ruff_command = [ruff, "check", "--no-cache", "--isolated", "--exit-zero", str(tree)] if ruff else None
        if ruff_command:
            cold, ruff_time = timed_together([cold_command, ruff_command], cwd, args.repeats)
        else:
            cold, ruff_time = timed(cold_command, cwd, args.repeats), float("nan")
        rows.append(("ampdoctor lint, cold (no cache)", cold, ""))
        if ruff_command:
            rows.append(
                ("ruff check (default rules), no cache", ruff_time, f"ampdoctor cold / ruff = {cold / ruff_time:.2f}")
            )
        elif "ruff" in args.vs:
            rows.append(("ruff", float("nan"), "not installed: skipped"))
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
        rows.append((f"ampdoctor lint {ONE_FILE.name} (one file, not cached)", statistics.median(one_times), ""))
        one = timed(plain, cwd, max(args.repeats, 5))
        rows.append((f"ampdoctor lint {ONE_FILE.name} (one file, cached)", one, ""))
        # The commit a hook blocks: the same, on a file with findings to print.
        shutil.copy(BUGGY_FILE, cwd / BUGGY_FILE.name)
        buggy = [*plain[:-1], BUGGY_FILE.name]
        buggy_times = []
        for _ in range(max(args.repeats, 5)):
            clear_cache()
            buggy_times.append(run_once(buggy, cwd))
        rows.append((f"ampdoctor lint {BUGGY_FILE.name} (5 findings, not cached)", statistics.median(buggy_times), ""))
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
                whole = tf * len(files) / max(1, len(sample))
                rows.append((f"TorchFix on {len(sample)} files", tf, f"whole tree extrapolated: {whole:.0f} s"))
            else:
                rows.append(("TorchFix", float("nan"), "not installed: skipped"))

    print(f"Tree: {tree} ({len(files)} files, {size_mib:.1f} MiB)")
    print(
        f"Machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, Python {platform.python_version()}"
    )
    print(
        f"Median of {args.repeats} runs (one file and import: of {max(args.repeats, 5)}); cold runs alternate with ruff's."
    )
    print()
    print("| command | wall (s) | note |")
    print("|---|---|---|")
    for name, seconds, note in rows:
        shown = "-" if seconds != seconds else f"{seconds:.3f}"
        print(f"| {name} | {shown} | {note} |")


if __name__ == "__main__":
    main()
