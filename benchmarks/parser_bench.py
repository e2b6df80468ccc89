"""Which parser where: ``ast`` (the lint path) against libcst (the apex migration's codemod).

    python benchmarks/parser_bench.py [--repeats 7]

Measures, on this machine: the import of libcst in a fresh interpreter (against a bare
interpreter), parsing a training script and a large module with ``ast.parse`` and with
``libcst.parse_module``, the migration of the apex fixture (the plan on the ``ast`` plus the
libcst codemod), and ``ampdoctor lint`` on that script with and without ``--diff
--unsafe-fixes`` as fresh processes. Medians of ``--repeats`` runs. Nothing here is asserted:
speed is measured, never tested.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "fixtures" / "lint" / "apex" / "train_two_models_o1.py"


def large_module() -> Path:
    """torch's nn/modules/module.py (found without importing torch), else the fact model."""
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.submodule_search_locations:
        candidate = Path(list(spec.submodule_search_locations)[0]) / "nn" / "modules" / "module.py"
        if candidate.is_file():
            return candidate
    return ROOT / "ampdoctor" / "lint" / "facts.py"


def median_seconds(action, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def process_seconds(command: list[str], repeats: int) -> float:
    return median_seconds(lambda: subprocess.run(command, capture_output=True, check=False), repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    repeats = parser.parse_args().repeats

    import libcst

    from ampdoctor.lint.engine import LintOptions, fix_source

    rows = []
    bare = process_seconds([sys.executable, "-c", "pass"], repeats)
    with_libcst = process_seconds([sys.executable, "-c", "import libcst"], repeats)
    rows.append(("import libcst (fresh interpreter, minus a bare one)", with_libcst - bare))
    for path in (SCRIPT, large_module()):
        text = path.read_text(encoding="utf-8")
        label = f"{path.name} ({len(text.splitlines())} lines)"
        rows.append((f"ast.parse {label}", median_seconds(lambda text=text: ast.parse(text), repeats)))
        rows.append(
            (f"libcst.parse_module {label}", median_seconds(lambda text=text: libcst.parse_module(text), repeats))
        )
    source = SCRIPT.read_text(encoding="utf-8")
    options = LintOptions(frozenset({"AMP402"}), fix=True, unsafe_fixes=True)
    rows.append(
        (
            "lint + migrate the apex script in process (AMP402 only)",
            median_seconds(lambda: fix_source(source, "train.py", options), repeats),
        )
    )
    lint = [sys.executable, "-m", "ampdoctor", "lint", "--isolated", "--no-cache", str(SCRIPT)]
    rows.append(("`ampdoctor lint` the apex script (fresh process)", process_seconds(lint, repeats)))
    rows.append(
        (
            "`ampdoctor lint --diff --unsafe-fixes` the same (fresh process)",
            process_seconds([*lint, "--diff", "--unsafe-fixes"], repeats),
        )
    )

    width = max(len(name) for name, _ in rows)
    print(f"{'measure':<{width}}  median")
    for name, seconds in rows:
        print(f"{name:<{width}}  {seconds * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
