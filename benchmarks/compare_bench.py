"""What ``ampdoctor trace --compare float32`` costs and what it finds, on this machine.

    python benchmarks/compare_bench.py [--steps N] [--repeats R] [--case NAME ...]

For each case (a small training script written to a temporary folder) the benchmark runs, R
times alternated, ``ampdoctor trace SCRIPT --steps N`` and ``ampdoctor trace SCRIPT --steps N
--compare float32``, and reports the median wall-clock time of each command (the cost of the
comparison: two traced runs instead of one, plus the profiled iterations) and, from the last
comparison's JSON report, what it found: the float32 and mixed-precision medians per iteration,
the verdict, the memory change and the causes (AMP512-AMP514) it ranked.

Cases:
- ``mlp``: Linear(1024, 4096) -> GELU -> Linear(4096, 1024), batch 512, bfloat16 autocast;
- ``unaligned``: the same with widths 1000/4100 (no dimension a multiple of 8);
- ``small-avx2``: Linear(256, 1024) -> GELU -> Linear(1024, 256), batch 512, with torch and
  oneDNN limited to AVX2 (``ATEN_CPU_CAPABILITY=avx2``, ``ONEDNN_MAX_CPU_ISA=AVX2``): a CPU
  without bfloat16 hardware (smaller, because emulated bfloat16 is slow).

Rows are printed as each case ends.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear({d}, {h}), nn.GELU(), nn.Linear({h}, {d}))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(512, {d})
for step in range(1000):
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    loss.backward()
    optimizer.step()
"""

CASES = {
    "mlp": ({"d": 1024, "h": 4096}, {}),
    "unaligned": ({"d": 1000, "h": 4100}, {}),
    "small-avx2": ({"d": 256, "h": 1024}, {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}),
}


def run(command: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(
        command, cwd=cwd, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    args = parser.parse_args()
    import torch

    print(
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, torch {torch.__version__}, "
        f"CPU capability {torch.backends.cpu.get_cpu_capability()}"
    )
    print(f"--steps {args.steps}, {args.repeats} repeats alternated, median wall-clock of each command\n")
    header = ("case", "trace s", "--compare s", "cost", "float32 ms/it", "mixed ms/it", "verdict", "memory", "causes")
    print(" | ".join(header), flush=True)
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        for name in args.case or list(CASES):
            sizes, env = CASES[name]
            script = folder / f"{name}.py"
            script.write_text(SCRIPT.format(**sizes))
            base = [
                sys.executable,
                "-m",
                "ampdoctor",
                "trace",
                str(script),
                "--steps",
                str(args.steps),
                "--no-lint",
                "--no-progress",
                "--fail-on",
                "never",
            ]
            report = folder / f"{name}.json"
            plain, compared = [], []
            for _ in range(args.repeats):
                plain.append(run(base, env, folder))
                compared.append(run([*base, "--compare", "float32", "--json", str(report)], env, folder))
            data = json.loads(report.read_text())["compare"]
            runs = data["runs"]
            speed = data["speedup"]
            verdict = (
                "no measurable difference"
                if not data["measurable"]
                else f"{speed:.2f}x faster"
                if speed >= 1
                else f"{1 / speed:.2f}x slower"
            )
            memory = f"{data['memory_change']:+.0%}" if data["memory_change"] is not None else "-"
            causes = (
                ", ".join(
                    f"{c['code']} {c['share']:.0%}" if c["share"] is not None else c["code"] for c in data["causes"]
                )
                or "-"
            )
            a, b = statistics.median(plain), statistics.median(compared)
            row = (
                name,
                f"{a:.1f}",
                f"{b:.1f}",
                f"{b / a:.2f}x",
                f"{1000 * runs['float32']['median_seconds']:.0f}",
                f"{1000 * runs['mixed']['median_seconds']:.0f}",
                verdict,
                memory,
                causes,
            )
            print(" | ".join(row), flush=True)


if __name__ == "__main__":
    main()
