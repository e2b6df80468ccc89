"""Lint time against file size: is every rule and pass linear in the size of the file?

    python benchmarks/scaling_bench.py [--sizes 1,2,4,8,16,32] [--unit 50] [--repeats 3] [--vs ruff]

Writes one file per kind and size into a temporary folder and times ``ampdoctor lint --isolated
--no-cache FILE`` on each as a fresh process (the file is its own project, so the project pass
runs too). A size of ``k`` holds ``k * unit`` copies of the kind's unit, each with its own names:

* ``buggy``: a training function with an AMP mistake on most lines (backward inside autocast,
  clipping scaled gradients, no ``update``, a ``-1e9`` fill), so that every finding's own work
  is repeated;
* ``clean``: the same function written correctly;
* ``classes``: a trainer class holding its scaler in ``self``, a checkpoint method, an attention
  module with a mask fill, a per-epoch helper;
* ``script``: module-level training code (one frame that grows with the file), as notebooks
  exported to scripts are;
* ``pasted``: a whole script pasted again and again, its deprecated ``torch.cuda.amp`` import,
  its model, optimizer and scaler included (every import's fix rewrites every use of the names
  it binds).

Prints, per kind, the lines and seconds of each size and the ratio of each time to the smallest
size's, against the ratio of their sizes (a linear pass keeps the two close; a quadratic one
doubles the ratio with each doubling). With ``--vs ruff``, ruff's time on the largest file too.
Nothing is asserted: speed is measured, never tested.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"

UNITS = {
    "buggy": """
def train_{i}(model, loader, optimizer, scaler):
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            out = model(x)
            loss = F.cross_entropy(out, y)
            scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scores = out.masked_fill(y == 0, -1e9)
        print(loss.item(), scores.sum())
""",
    "clean": """
def train_{i}(model, loader, optimizer, scaler):
    for x, y in loader:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            out = model(x)
            loss = F.cross_entropy(out, y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
""",
    "classes": """
class Attention{i}(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x, mask):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-2, -1)
        scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
        return scores.softmax(-1) @ v


class Trainer{i}:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda")

    def step(self, x, y):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.mse_loss(self.model(x), y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def save(self, path, epoch):
        torch.save(
            {{
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict(),
                "epoch": epoch,
            }},
            path,
        )


def run_epoch_{i}(trainer, loader, epoch):
    for x, y in loader:
        trainer.step(x, y)
    trainer.save(f"ckpt_{i}_{{epoch}}.pt", epoch)
""",
    "script": """
model_{i} = nn.Linear(16, 16)
optimizer_{i} = torch.optim.AdamW(model_{i}.parameters(), lr=1e-3)
scaler_{i} = torch.amp.GradScaler("cuda")
for step_{i} in range(10):
    x_{i} = torch.randn(8, 16)
    with torch.autocast("cuda", dtype=torch.float16):
        loss_{i} = model_{i}(x_{i}).pow(2).mean()
    scaler_{i}.scale(loss_{i}).backward()
    scaler_{i}.step(optimizer_{i})
    scaler_{i}.update()
    optimizer_{i}.zero_grad(set_to_none=True)
torch.save({{"model": model_{i}.state_dict(), "scaler": scaler_{i}.state_dict()}}, "ckpt_{i}.pt")
""",
    "pasted": """
from torch.cuda.amp import GradScaler, autocast

model = nn.Linear(16, 16).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = GradScaler()


def train_{i}(loader):
    for x, y in loader:
        optimizer.zero_grad()
        with autocast():
            loss = F.mse_loss(model(x.cuda()), y.cuda())
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
}


def write(folder: Path, kind: str, copies: int) -> Path:
    path = folder / f"{kind}_{copies}.py"
    path.write_text(HEADER + "".join(UNITS[kind].format(i=i) for i in range(copies)), encoding="utf-8")
    return path


def timed(command: list[str], repeats: int) -> float:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,2,4,8,16,32", help="multiples of --unit copies")
    parser.add_argument("--unit", type=int, default=50, help="copies of a kind's unit in size 1")
    parser.add_argument("--kinds", default=",".join(UNITS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vs", default="", help="ruff: time it on each kind's largest file")
    # the console script beside this interpreter (a virtual environment's), else the one on PATH
    beside = Path(sys.executable).with_name("ampdoctor")
    parser.add_argument("--ampdoctor", default=str(beside) if beside.exists() else shutil.which("ampdoctor"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    ruff = shutil.which("ruff") if "ruff" in args.vs else None
    if not args.ampdoctor or not os.path.exists(args.ampdoctor):
        sys.exit("scaling_bench: no ampdoctor command found; pass --ampdoctor PATH")
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(__file__).resolve().parents[1] / "ampdoctor")])
    print(f"ampdoctor: {args.ampdoctor}; load average {os.getloadavg()[0]:.2f}; {args.repeats} runs, median\n")
    print("| kind | copies | lines | seconds | time ratio | size ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for kind in args.kinds.split(","):
            first = None
            last = None
            for size in sizes:
                path = write(folder, kind, size * args.unit)
                lines = path.read_text(encoding="utf-8").count("\n")
                seconds = timed([args.ampdoctor, "lint", "--isolated", "--no-cache", str(path)], args.repeats)
                first = first or seconds
                last = path
                print(
                    f"| {kind} | {size * args.unit} | {lines} | {seconds:.2f} | {seconds / first:.1f} | {size / sizes[0]:.0f} |"
                )
            if ruff and last is not None:
                seconds = timed([ruff, "check", "--isolated", "--no-cache", "-q", str(last)], args.repeats)
                print(f"| {kind} (ruff) | | | {seconds:.2f} | | |")
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
