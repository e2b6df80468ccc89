"""AMP211 through a save helper whose parameters carry annotations. An annotation that names a
library class (``optimizer: Optimizer`` from ``torch.optim``, ``callbacks: List[BaseCallback]``)
makes no scaler holder of the helper: its checkpoint is judged from the caller that trains with
the scaler, as without the annotation. A parameter annotated with a project class that holds a
scaler (``trainer: Trainer``) still makes the helper one that trains with that scaler, judged
where it writes."""

from __future__ import annotations

import pytest

from ampdoctor.lint import lint_source

HELPER = """\
from typing import List

import torch
from torch.optim import Optimizer


class BaseCallback:
    def on_checkpoint_save(self, checkpoint):
        pass


def save_state(model{model}, optimizer{optimizer}, epoch{epoch}, path, callbacks{callbacks}):
    checkpoint = {{
        "state_dict": model.state_dict(),
        "optimizer_state_dict": optimizer.state_dict(),
        "epoch": epoch,
    }}
    for callback in callbacks:
        callback.on_checkpoint_save(checkpoint)
    torch.save(checkpoint, str(path))


def train_epoch(model, loader, grad_scaler, optimizer):
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        grad_scaler.scale(loss).backward()
        grad_scaler.step(optimizer)
        grad_scaler.update()


def train(model, loader, args, callbacks):
    grad_scaler = torch.amp.GradScaler("cuda", enabled=args.amp)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        train_epoch(model, loader, grad_scaler, optimizer)
        save_state(model, optimizer, epoch, args.path, callbacks)
"""

ANNOTATED = {
    "model": ": torch.nn.Module",
    "optimizer": ": Optimizer",
    "epoch": ": int",
    "callbacks": ": List[BaseCallback]",
}


def amp211(source: str) -> list[int]:
    return [f.location.line for f in lint_source(source, "training.py") if f.code == "AMP211"]


def call_line(source: str) -> int:
    return source.splitlines().index("        save_state(model, optimizer, epoch, args.path, callbacks)") + 1


@pytest.mark.parametrize("annotated", [(), ("optimizer",), ("callbacks",), tuple(ANNOTATED)])
def test_a_helper_with_library_annotations_is_judged_from_its_caller(annotated):
    source = HELPER.format(**{name: ANNOTATED[name] if name in annotated else "" for name in ANNOTATED})
    assert amp211(source) == [call_line(source)]


HOLDER = """\
import torch


class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        self.scaler = torch.amp.GradScaler("cuda")

    def fit(self, loader):
        for x in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.model(x)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            save(self, "last.pt")


def save(trainer: "Trainer", path):
    torch.save({"optimizer": trainer.optimizer.state_dict()}, path)
"""


def test_a_parameter_annotated_with_a_project_class_holding_a_scaler_is_judged_where_it_writes():
    assert amp211(HOLDER) == [
        HOLDER.splitlines().index('    torch.save({"optimizer": trainer.optimizer.state_dict()}, path)') + 1
    ]
