"""One finding per checkpoint: where the file-local AMP211 already reports a ``torch.save`` (a
module-level GradScaler beside a trainer class whose ``save_weight`` method writes the
optimizer's state), the project analysis does not report it a second time at the call that
reaches it (``self.save_weight(...)`` in the training loop)."""

from __future__ import annotations

from pathlib import Path

from helpers import lint_project, write_project

TRAIN = """\
import torch

scaler = torch.amp.GradScaler("cuda")


class Master:
    def __init__(self, generator, optimizer):
        self.generator = generator
        self.optimizer_g = optimizer

    def train(self, loader):
        for step, x in enumerate(loader):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.generator(x).mean()
            scaler.scale(loss).backward()
            scaler.step(self.optimizer_g)
            scaler.update()
            if step % 100 == 0:
                self.save_weight(step, "best")

    def save_weight(self, iteration, name):
        torch.save(
            {"iteration": iteration, "optimizer_state_dict": self.optimizer_g.state_dict()},
            name + "_generator.pth",
        )
"""


def test_the_checkpoint_is_reported_once_at_its_save(tmp_path: Path):
    write_project(tmp_path, {"train.py": TRAIN})
    lines = TRAIN.splitlines()
    save = lines.index("        torch.save(") + 1
    assert [(f.location.path, f.location.line) for f in lint_project(tmp_path).findings if f.code == "AMP211"] == [
        ("train.py", save)
    ]
    # The file alone says it at the same place.
    assert [f.location.line for f in lint_project(tmp_path, project_mode=False).findings if f.code == "AMP211"] == [
        save
    ]


def test_one_source_text_reports_it_once_too():
    from ampdoctor.lint import lint_source

    assert [f.code for f in lint_source(TRAIN, "train.py")].count("AMP211") == 1
