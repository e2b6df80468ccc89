"""AMP201 where the clip is written out as an in-place clamp of each gradient
(``param.grad.data.clamp_(-clip, clip)``): in the step itself, and in a ``clip_gradient``
helper of another module that the step calls after the scaled backward. A clamp after
``unscale_``, a clamp of the weights (``p.data.clamp_``, WGAN's weight clipping) and a clamp
outside any scaled step are silent; no fix is offered (the line before a clamp inside a loop
over the parameters would unscale once per parameter)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from helpers import lint_text, project_findings, write_project

STEP = """\
import torch

scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x)
    scaler.scale(loss).backward()
    for p in model.parameters():
        if p.grad is not None:
            p.grad.data.clamp_(-1.0, 1.0)
    scaler.step(optimizer)
    scaler.update()
"""


def amp201(source: str) -> list[tuple[int, bool]]:
    return [(f.location.line, f.fix is not None) for f in lint_text(textwrap.dedent(source)) if f.code == "AMP201"]


@pytest.mark.parametrize(
    "clamp", ["p.grad.data.clamp_(-1.0, 1.0)", "p.grad.clamp_(min=-1.0, max=1.0)", "p.grad.clip_(-1.0, 1.0)"]
)
def test_a_clamp_of_scaled_gradients_is_a_clip_before_unscale(clamp):
    assert amp201(STEP.replace("p.grad.data.clamp_(-1.0, 1.0)", clamp)) == [(10, False)]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("    for p in model.parameters():", "    scaler.unscale_(optimizer)\n    for p in model.parameters():"),
        ("p.grad.data.clamp_(-1.0, 1.0)", "p.data.clamp_(-0.01, 0.01)"),
        ("scaler.scale(loss).backward()", "loss.backward()"),
    ],
    ids=["unscaled-first", "weights", "not-scaled"],
)
def test_a_clamp_of_true_gradients_or_of_weights_is_silent(old, new):
    assert amp201(STEP.replace(old, new)) == []


HELPER = """\
import torch


def clip_gradient(optimizer, grad_clip):
    for group in optimizer.param_groups:
        for param in group["params"]:
            if param.grad is not None:
                param.grad.data.clamp_(-grad_clip, grad_clip)
"""

TRAIN = """\
import torch

from utils import clip_gradient


def train(model, loader, optimizer, clip):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        scaler.scale(loss).backward()
        clip_gradient(optimizer, clip)
        scaler.step(optimizer)
        scaler.update()
"""


def test_a_clamping_helper_of_another_module_called_on_scaled_gradients(tmp_path: Path):
    write_project(tmp_path, {"utils.py": HELPER, "train.py": TRAIN})
    assert project_findings(tmp_path, ("AMP201",)) == {("train.py", 12, "AMP201")}


def test_the_helper_called_after_unscale_is_silent(tmp_path: Path):
    train = TRAIN.replace("        clip_gradient(", "        scaler.unscale_(optimizer)\n        clip_gradient(")
    write_project(tmp_path, {"utils.py": HELPER, "train.py": train})
    assert project_findings(tmp_path, ("AMP201",)) == set()
