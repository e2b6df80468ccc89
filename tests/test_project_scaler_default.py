"""AMP210 across functions: ``def train_one_epoch(..., scaler=None)`` opens float16 autocast and
scales the loss only when handed a scaler; when no call in the project passes one, every run is
unscaled float16. Fires only when every call is seen and none passes the scaler."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ampdoctor.config import Settings
from ampdoctor.lint import LintRequest, known_codes, lint_paths

ENGINE = """\
def step(loss, optimizer, scaler=None):
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
    optimizer.zero_grad()
"""

TRAIN = """\
import torch
from torch.amp import GradScaler

import engine


def train_one_epoch(model, loader, optimizer, use_amp=True, scaler: GradScaler | None = None):
    for x, y in loader:
        with torch.autocast("cuda", enabled=use_amp, dtype=DTYPE):
            loss = model(x, y)
        BODY


def main(model, loader, optimizer):
    for _ in range(3):
        CALL
"""

REGION_AT = ("train.py", 9, "AMP210")


def project(root: Path, call: str, extra: dict[str, str] | None = None, **changes: str) -> Path:
    text = TRAIN.replace("CALL", call)
    text = text.replace("BODY", changes.get("body", "engine.step(loss, optimizer, scaler=scaler)"))
    text = text.replace("DTYPE", changes.get("dtype", "torch.float16"))
    files = {"engine.py": ENGINE, "train.py": text, **(extra or {})}
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text('[project]\nname = "p"\n', encoding="utf-8")
    for rel, body in files.items():
        (root / rel).write_text(textwrap.dedent(body), encoding="utf-8")
    return root


def amp210(root: Path, paths=None, project_mode=True) -> set[tuple[str, int, str]]:
    settings = Settings(root=root, project=project_mode)
    codes = settings.enabled_codes(known_codes())
    run = lint_paths(paths or [root], LintRequest(settings, codes, use_cache=False), cwd=root)
    return {(f.location.path, f.location.line, f.code) for f in run.findings if f.code == "AMP210"}


def test_no_call_passes_the_scaler_the_region_is_reported_with_the_call_beside_it(tmp_path: Path):
    root = project(tmp_path, "train_one_epoch(model, loader, optimizer, use_amp=True)")
    settings = Settings(root=root, project=True)
    run = lint_paths([root], LintRequest(settings, settings.enabled_codes(known_codes()), use_cache=False), cwd=root)
    [finding] = [f for f in run.findings if f.code == "AMP210"]
    assert (finding.location.path, finding.location.line) == REGION_AT[:2]
    assert "`scaler`" in finding.message and "train_one_epoch" in finding.message
    assert [(r.path, r.line) for r in finding.related] == [("train.py", 16)]


def test_the_file_alone_is_silent_and_a_changed_file_sees_the_callers(tmp_path: Path):
    root = project(tmp_path, "train_one_epoch(model, loader, optimizer)")
    assert amp210(root, project_mode=False) == set()
    assert amp210(root, [root / "train.py"]) == {REGION_AT}


def test_a_caller_in_another_module_counts_too(tmp_path: Path):
    runner = "from train import train_one_epoch\n\n\ndef run(m, l, o):\n    train_one_epoch(m, l, o)\n"
    root = project(tmp_path, "pass", {"runner.py": runner})
    assert amp210(root) == {REGION_AT}


def test_the_helper_may_run_the_backward_itself(tmp_path: Path):
    body = "(scaler.scale(loss) if scaler is not None else loss).backward()\n        optimizer.step()"
    root = project(tmp_path, "train_one_epoch(model, loader, optimizer)", body=body)
    assert amp210(root) == {REGION_AT}


@pytest.mark.parametrize(
    "call",
    [
        "train_one_epoch(model, loader, optimizer, scaler=GradScaler())",
        "train_one_epoch(model, loader, optimizer, True, GradScaler())",
        "train_one_epoch(model, loader, optimizer, True, trainer.scaler)",
        "train_one_epoch(model, loader, optimizer, **options)",
        "train_one_epoch(*arguments)",
    ],
    ids=["keyword", "positional-call", "positional-name", "double-star", "star"],
)
def test_a_call_that_passes_or_may_pass_a_scaler_keeps_it_silent(tmp_path: Path, call: str):
    # A script's top level, outside any loop: a call recorded for what it passes, nothing else.
    script = f"from torch.amp import GradScaler\nfrom train import train_one_epoch\nfrom setup import *\n\n{call}\n"
    root = project(tmp_path, "train_one_epoch(model, loader, optimizer)", {"run.py": script})
    assert amp210(root) == set()


def test_one_passing_call_in_another_module_keeps_it_silent(tmp_path: Path):
    runner = (
        "from torch.amp import GradScaler\nfrom train import train_one_epoch\n\n\n"
        "def run(m, l, o):\n    train_one_epoch(m, l, o, scaler=GradScaler())\n"
    )
    root = project(tmp_path, "train_one_epoch(model, loader, optimizer)", {"runner.py": runner})
    assert amp210(root) == set()


def test_without_any_call_a_library_function_is_left_to_its_users(tmp_path: Path):
    assert amp210(project(tmp_path, "pass")) == set()


@pytest.mark.parametrize(
    "changes",
    [
        {"dtype": "torch.bfloat16"},
        {"body": "scaler = scaler or GradScaler()\n        engine.step(loss, optimizer, scaler=scaler)"},
        {"body": "print(loss.item())"},
    ],
    ids=["bfloat16", "rebound", "no-backward-no-handoff"],
)
def test_a_function_that_is_not_unscaled_float16_training_is_silent(tmp_path: Path, changes: dict[str, str]):
    assert amp210(project(tmp_path, "train_one_epoch(model, loader, optimizer)", **changes)) == set()
