"""AMP201 in an update helper whose caller's scaled backward is itself a helper's: a trainer's
loop calls ``self.backward_step(model, scaler, loss)``, which runs ``scaler.scale(loss).backward()``,
then ``self.update_step(model, optim, scaler)``, which clips and steps the scaler it was handed
without ever unscaling it. The clip sees gradients multiplied by the loss scale. Where the loop
unscales between the two calls, or the backward helper unscales itself, the clip is right."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import project_findings, write_project

TRAINER = """\
import torch


class Trainer:
    def __init__(self, grad_clip):
        self.grad_clip = grad_clip

    def train_epoch(self, model, optim, loader, scaler=None):
        for batch in loader:
            loss = model(batch).mean()
            self.backward_step(model, scaler, loss)
            self.update_step(model, optim, scaler)

    def backward_step(self, model, scaler, loss):
        if scaler:
            scaler.scale(loss).backward()
        else:
            loss.backward()

    def update_step(self, model, optim, scaler):
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=self.grad_clip)
        if scaler:
            scaler.step(optim)
            scaler.update()
        else:
            optim.step()
        optim.zero_grad()
"""

TRAIN = """\
import torch

from trainer import Trainer


def main(model, loader):
    optim = torch.optim.AdamW(model.parameters())
    scaler = torch.amp.GradScaler("cuda")
    Trainer(1.0).train_epoch(model, optim, loader, scaler=scaler)
"""

CLIP_AT = ("trainer.py", 21, "AMP201")


def amp201(root: Path) -> set[tuple[str, int, str]]:
    return project_findings(root, ("AMP201",))


def test_the_backward_helper_leaves_the_gradients_scaled_for_the_update_helpers_clip(tmp_path: Path):
    write_project(tmp_path, {"trainer.py": TRAINER, "train.py": TRAIN})
    assert amp201(tmp_path) == {CLIP_AT}


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # the loop unscales between the two calls
        (
            "            self.update_step(model, optim, scaler)",
            "            scaler.unscale_(optim)\n            self.update_step(model, optim, scaler)",
        ),
        # the backward helper unscales before it returns
        (
            "            scaler.scale(loss).backward()",
            "            scaler.scale(loss).backward()\n            scaler.unscale_(self.optim)",
        ),
        # the backward helper is not handed the scaler
        ("self.backward_step(model, scaler, loss)", "self.backward_step(model, None, loss)"),
    ],
    ids=["caller-unscales", "helper-unscales", "other-scaler"],
)
def test_a_clip_after_the_gradients_are_unscaled_or_not_scaled_is_silent(tmp_path: Path, old: str, new: str):
    assert old in TRAINER
    write_project(tmp_path, {"trainer.py": TRAINER.replace(old, new), "train.py": TRAIN})
    assert amp201(tmp_path) == set()
