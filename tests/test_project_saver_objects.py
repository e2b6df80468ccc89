"""AMP211 where the trainer is an object and so is the saver: a ``main`` that builds the GAN
module with ``Module(...).to(device)`` (the module holds the GradScaler and both optimizers,
and its step methods use the scaler), builds ``saver = SaveBestModel(...)``, and each epoch
calls ``saver(metric, epoch, model.G, model.D, model.opt_g, model.opt_d)``, whose ``__call__``
hands both optimizers' state to a ``torch.save`` that leaves the scaler's out."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import project_findings, write_project

SAVER = """\
import torch


class SaveBestModel:
    def __init__(self, output_dir="checkpoints"):
        self.best = float("inf")
        self.output_dir = output_dir

    def __call__(self, metric, epoch, generator, discriminator, opt_g, opt_d):
        if metric < self.best:
            self.best = metric
            self.save_checkpoint(epoch, generator, discriminator, opt_g, opt_d, "best.pth")

    def save_checkpoint(self, epoch, generator, discriminator, opt_g, opt_d, filename):
        torch.save(
            {
                "epoch": epoch,
                "generator": generator.state_dict(),
                "discriminator": discriminator.state_dict(),
                "opt_g": opt_g.state_dict(),
                "opt_d": opt_d.state_dict(),
            },
            filename,
        )
"""

TRAIN = """\
import torch
from torch import nn

from saver import SaveBestModel


class GANModule(nn.Module):
    def __init__(self, generator, discriminator):
        super().__init__()
        self.G = generator
        self.D = discriminator
        self.opt_g = torch.optim.AdamW(self.G.parameters())
        self.opt_d = torch.optim.AdamW(self.D.parameters())
        self.grad_scaler = torch.amp.GradScaler("cuda")

    def generator_step(self, x):
        with torch.autocast("cuda"):
            loss = self.D(self.G(x)).mean()
        self.grad_scaler.scale(loss).backward()
        self.grad_scaler.step(self.opt_g)
        self.grad_scaler.update()
        return loss


def main(generator, discriminator, loader, device):
    model = GANModule(generator, discriminator).to(device)
    checkpoint_saver = SaveBestModel("out")
    for epoch in range(10):
        total = 0.0
        for x in loader:
            total += model.generator_step(x).item()
        checkpoint_saver(total, epoch, model.G, model.D, model.opt_g, model.opt_d)
"""

CALL_AT = ("train.py", 32, "AMP211")


def amp211(root: Path) -> set[tuple[str, int, str]]:
    return project_findings(root, ("AMP211",))


def test_the_saver_called_as_a_function_leaves_the_modules_scaler_out(tmp_path: Path):
    write_project(tmp_path, {"saver.py": SAVER, "train.py": TRAIN})
    assert amp211(tmp_path) == {CALL_AT}


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("GANModule(generator, discriminator).to(device)", "GANModule(generator, discriminator)"),
        ("GANModule(generator, discriminator).to(device)", "GANModule(generator, discriminator).cuda()"),
        (
            "        checkpoint_saver(total, epoch, model.G, model.D, model.opt_g, model.opt_d)",
            "        checkpoint_saver.save_checkpoint(epoch, model.G, model.D, model.opt_g, model.opt_d, 'e.pth')",
        ),
    ],
    ids=["no-to", "cuda", "method"],
)
def test_the_same_checkpoint_written_other_ways(tmp_path: Path, old: str, new: str):
    write_project(tmp_path, {"saver.py": SAVER, "train.py": TRAIN.replace(old, new)})
    assert amp211(tmp_path) == {CALL_AT}


IN_ITS_OWN_FILE = (
    ("opt_g, opt_d):", "opt_g, opt_d, scaler=None):"),
    (
        '"best.pth")',
        '"best.pth")\n            if scaler is not None:\n                torch.save(scaler.state_dict(), "scaler.pth")',
    ),
)
IN_THE_CHECKPOINT = (
    ("opt_g, opt_d):", "opt_g, opt_d, scaler=None):"),
    ('opt_d, "best.pth")', 'opt_d, "best.pth", scaler)'),
    ("opt_d, filename):", "opt_d, filename, scaler):"),
    ('"opt_d": opt_d.state_dict(),', '"opt_d": opt_d.state_dict(),\n                "scaler": scaler.state_dict(),'),
)


@pytest.mark.parametrize("edits", [IN_ITS_OWN_FILE, IN_THE_CHECKPOINT], ids=["own-file", "in-checkpoint"])
def test_a_saver_handed_the_scaler_too_is_silent(tmp_path: Path, edits):
    saver = SAVER
    for old, new in edits:
        assert old in saver
        saver = saver.replace(old, new, 1)
    train = TRAIN.replace("model.opt_g, model.opt_d)", "model.opt_g, model.opt_d, model.grad_scaler)")
    write_project(tmp_path, {"saver.py": saver, "train.py": train})
    assert amp211(tmp_path) == set()


def test_a_module_without_a_scaler_is_silent(tmp_path: Path):
    train = TRAIN.replace('        self.grad_scaler = torch.amp.GradScaler("cuda")\n', "").replace(
        "        self.grad_scaler.scale(loss).backward()\n        self.grad_scaler.step(self.opt_g)\n"
        "        self.grad_scaler.update()\n",
        "        loss.backward()\n        self.opt_g.step()\n",
    )
    write_project(tmp_path, {"saver.py": SAVER, "train.py": train})
    assert amp211(tmp_path) == set()


def test_a_disabled_scaler_held_by_the_module_is_none(tmp_path: Path):
    train = TRAIN.replace('torch.amp.GradScaler("cuda")', 'torch.amp.GradScaler("cuda", enabled=False)')
    write_project(tmp_path, {"saver.py": SAVER, "train.py": train})
    assert amp211(tmp_path) == set()
