"""The pre-commit case: ``ampdoctor lint one_changed_file.py`` inside a large project.

    python benchmarks/project_bench.py [--files 3000] [--repeats 7]
    python benchmarks/project_bench.py --tree TREE --file REL [--repeats 7]

Builds a synthetic project (a ``pyproject.toml``, a ``.git`` folder, packages of model, data and
utility modules, training scripts that use a GradScaler and checkpoint through helpers in other
modules) in a temporary folder, then times the installed ``ampdoctor`` command as a fresh
process, as a pre-commit hook runs it, on one training script:

Two files: a training script (its calls resolve into a checkpoint helper) and an update helper
(judged by its callers: every module that names it is summarized). For each:

* cold: no cache at all (the project's summaries are made on this run);
* warm: the same file changed by one line, every other file unchanged since the cache was written;
* warm, ``project = false`` in the project's ``pyproject.toml``: the file alone, for comparison
  (the configuration key rather than ``--no-project``, so that both runs take the console
  command's fast path without click).

With ``--tree``, a copy of TREE (a real project, or public repositories side by side in a folder
with a ``.git`` marker) takes the synthetic project's place, and REL (relative to TREE) is the
changed file.

ampdoctor's modules are byte-compiled first, as after ``pip install``. Prints a Markdown table
of medians (and minimums) in milliseconds. Nothing is asserted.
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

TRAIN = '''\
"""Training script {i}."""
import argparse

import torch
from torch import nn

from pkg.common.ckpt_{k} import save_checkpoint
from pkg.common.update import clip_and_step
from pkg.models.net_{m} import Net{m}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    model = Net{m}().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(args.epochs):
        for x, y in []:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = nn.functional.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            clip_and_step(model, optimizer, scaler)
            optimizer.zero_grad(set_to_none=True)
        save_checkpoint(model, optimizer, scaler, epoch, "out")


if __name__ == "__main__":
    main()
'''
CKPT = """\
import os

import torch


def save_checkpoint(model, optimizer, scaler, epoch, out_dir):
    state = {{"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(),
             "epoch": epoch}}
    torch.save(state, os.path.join(out_dir, "ckpt_{k}.pt"))


def load_checkpoint(model, optimizer, scaler, path):
    state = torch.load(path, map_location="cpu")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scaler.load_state_dict(state["scaler"])
    return state["epoch"]
"""
UPDATE = """\
import torch


def clip_and_step(model, optimizer, scaler, max_norm=1.0):
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
"""
MODEL = """\
import torch
from torch import nn


class Block{m}(nn.Module):
    def __init__(self, dim=256):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, dim * 4)
        self.fc2 = nn.Linear(dim * 4, dim)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


class Net{m}(nn.Module):
    def __init__(self, depth=4, dim=256, classes=10):
        super().__init__()
        self.blocks = nn.Sequential(*[Block{m}(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        return self.head(self.blocks(x).mean(dim=1))
"""
UTIL = '''\
"""Helpers {i}: parsing, small data structures, formatting."""
import json
import os
import re
from collections import defaultdict

_PATTERN = re.compile(r"(\\w+)=(\\S+)")


def parse_pairs(text):
    return dict(_PATTERN.findall(text))


def group_by(items, key):
    groups = defaultdict(list)
    for item in items:
        groups[key(item)].append(item)
    return dict(groups)


class Registry{i}:
    def __init__(self):
        self._items = {{}}

    def register(self, name):
        def wrap(obj):
            self._items[name] = obj
            return obj
        return wrap

    def get(self, name):
        return self._items[name]


def read_config(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def ensure_dir(path):
    os.makedirs(path, exist_ok=True)
    return path


def format_row(values, width=12):
    return " | ".join(str(v).rjust(width) for v in values)
'''


def build(root: Path, files: int) -> Path:
    """A project of ``files`` Python files; returns the training script that will be changed."""
    (root / ".git").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "synthetic"\nversion = "0"\n', encoding="utf-8")
    scripts = max(files // 75, 1)
    helpers = scripts
    models = max(files // 15, 1)
    written = 0
    for package in ("pkg", "pkg/common", "pkg/models", "pkg/utils", "scripts"):
        (root / package).mkdir(parents=True, exist_ok=True)
        if package.startswith("pkg"):
            (root / package / "__init__.py").write_text("", encoding="utf-8")
            written += 1
    for k in range(helpers):
        (root / f"pkg/common/ckpt_{k}.py").write_text(CKPT.format(k=k), encoding="utf-8")
    (root / "pkg/common/update.py").write_text(UPDATE, encoding="utf-8")
    written += 1
    for m in range(models):
        (root / f"pkg/models/net_{m}.py").write_text(MODEL.format(m=m), encoding="utf-8")
    for i in range(scripts):
        (root / f"scripts/train_{i}.py").write_text(TRAIN.format(i=i, k=i % helpers, m=i % models), encoding="utf-8")
    written += helpers + models + scripts
    i = 0
    while written < files:
        folder = root / f"pkg/utils/group_{i // 100}"
        if not folder.exists():
            folder.mkdir()
            (folder / "__init__.py").write_text("", encoding="utf-8")
            written += 1
        (folder / f"util_{i}.py").write_text(UTIL.format(i=i), encoding="utf-8")
        written += 1
        i += 1
    return root / "scripts" / "train_0.py"


def timed(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return (time.perf_counter() - start) * 1000


def run_rows(exe: str, root: Path, target: Path, repeats: int) -> list[tuple[str, list[float]]]:
    """Cold, warm, and warm without the project analysis, for one changed file."""
    rel = str(target.relative_to(root))
    cache = root / ".ampdoctor_cache"
    original = target.read_text(encoding="utf-8")

    def cold() -> float:
        shutil.rmtree(cache, ignore_errors=True)
        return timed([exe, "lint", rel], root)

    def warm() -> float:
        timed([exe, "lint", rel], root)  # fill the cache for this configuration
        past = time.time() - 10  # older than the cache by more than its racy margin
        for path in root.rglob("*.py"):
            os.utime(path, (past, past))
        timed([exe, "lint", rel], root)  # record the new times
        target.write_text(original + f"# edit {time.monotonic_ns()}\n", encoding="utf-8")
        return timed([exe, "lint", rel], root)

    pyproject = root / "pyproject.toml"
    # A real tree (``--tree``) may have none at its top: one is written for the third series.
    project_on = pyproject.read_text(encoding="utf-8") if pyproject.exists() else None
    rows = [(f"`{rel}` cold: no cache", [cold() for _ in range(repeats)])]
    rows.append((f"`{rel}` warm: this file changed, the rest cached", [warm() for _ in range(repeats)]))
    pyproject.write_text((project_on or "") + "\n[tool.ampdoctor]\nproject = false\n", encoding="utf-8")
    rows.append((f"`{rel}` warm, `project = false`: the file alone", [warm() for _ in range(repeats)]))
    if project_on is None:
        pyproject.unlink()
    else:
        pyproject.write_text(project_on, encoding="utf-8")
    target.write_text(original, encoding="utf-8")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--tree", type=Path, help="a real tree to copy instead of the synthetic project")
    parser.add_argument("--file", help="with --tree: the changed file, relative to the tree")
    args = parser.parse_args(argv)
    if (args.tree is None) != (args.file is None):
        parser.error("--tree and --file go together")
    exe = shutil.which("ampdoctor") or os.path.join(os.path.dirname(sys.executable), "ampdoctor")
    import compileall

    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "ampdoctor"), quiet=1)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "project"
        if args.tree is not None:
            shutil.copytree(
                args.tree, root, symlinks=True, ignore=shutil.ignore_patterns(".ampdoctor_cache", ".ruff_cache")
            )
            rows = run_rows(exe, root, root / args.file, args.repeats)
            count = sum(1 for _ in root.rglob("*.py"))
        else:
            target = build(root, args.files)
            count = sum(1 for _ in root.rglob("*.py"))
            rows = run_rows(exe, root, target, args.repeats)
            # A helper whose findings depend on its callers: every module that names it is read.
            rows += run_rows(exe, root, root / "pkg" / "common" / "update.py", args.repeats)
    print(f"{count} Python files; `ampdoctor lint FILE` as a fresh process, {args.repeats} runs each\n")
    print("| run | median ms | min ms |")
    print("|---|---:|---:|")
    for label, times in rows:
        print(f"| {label} | {statistics.median(times):.0f} | {min(times):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
