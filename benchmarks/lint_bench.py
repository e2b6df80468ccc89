"""Lint speed: a whole tree cold and warm, one file, and other linters on the same tree.

    python benchmarks/lint_bench.py [TREE] [--vs ruff,torchfix] [--repeats 3] [--torchfix-files 200]

TREE defaults to the installed torch package (found without importing torch). Every command
runs as a fresh process, the way a user or CI runs it; the table reports the median of
``--repeats`` runs and ratios measured in this same run. ampdoctor's cache lives in a
temporary folder, so "cold" never sees an earlier cache and "warm" sees only its own.
TorchFix is slow (minutes for a few hundred files), so by default it runs on the first
``--torchfix-files`` files of the tree and its whole-tree time is extrapolated (and marked so).
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


def default_tree() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("torch is not installed: pass the tree to lint")
    return Path(list(spec.submodule_search_locations)[0])


def timed(command: list[str], cwd: Path, repeats: int, prepare=None) -> float:
    """Median wall time of a command (seconds)."""
    times = []
    for _ in range(repeats):
        if prepare is not None:
            prepare()
        start = time.perf_counter()
        subprocess.run(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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

    with tempfile.TemporaryDirectory() as work:
        cwd = Path(work)
        cache = cwd / ".ampdoctor_cache"

        def clear_cache() -> None:
            shutil.rmtree(cache, ignore_errors=True)

        cold = timed([*ampdoctor, "--no-cache", str(tree)], cwd, args.repeats)
        rows.append(("ampdoctor lint, cold (no cache)", cold, ""))
        subprocess.run([*ampdoctor, str(tree)], cwd=cwd, stdout=subprocess.DEVNULL, check=False)
        time.sleep(2.5)  # let the files age past the cache's racy-write window
        subprocess.run([*ampdoctor, str(tree)], cwd=cwd, stdout=subprocess.DEVNULL, check=False)
        warm = timed([*ampdoctor, str(tree)], cwd, args.repeats)
        rows.append(("ampdoctor lint, warm cache", warm, ""))
        clear_cache()
        one = timed([*ampdoctor, "--no-cache", str(ONE_FILE)], cwd, max(args.repeats, 5))
        rows.append((f"ampdoctor lint, one file ({ONE_FILE.name}), no cache", one, ""))
        ampdoctor_import = timed([sys.executable, "-c", "import libcst"], cwd, max(args.repeats, 5))
        rows.append(("  of which: python -c 'import libcst'", ampdoctor_import, ""))

        wanted = [name.strip() for name in args.vs.split(",") if name.strip()]
        if "ruff" in wanted:
            ruff = tool("ruff")
            if ruff:
                ruff_time = timed([ruff, "check", "--no-cache", "--isolated", "--exit-zero", str(tree)], cwd, args.repeats)
                rows.append(("ruff check (default rules), no cache", ruff_time, f"ampdoctor cold / ruff = {cold / ruff_time:.2f}"))
            else:
                rows.append(("ruff", float("nan"), "not installed: skipped"))
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
    print(f"Machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print(f"Median of {args.repeats} runs (one file and import: of {max(args.repeats, 5)}).")
    print()
    print("| command | wall (s) | note |")
    print("|---|---|---|")
    for name, seconds, note in rows:
        shown = "-" if seconds != seconds else f"{seconds:.2f}"
        print(f"| {name} | {shown} | {note} |")


if __name__ == "__main__":
    main()
