"""Modules the project checks need not summarize, since their text already answers: AMP211
looks for a scaler built one call away only in modules whose text names a GradScaler, and the
subclass index reads a candidate class's bases from its module's outline. The findings are
those of the walks that summarized them."""

from __future__ import annotations

from pathlib import Path

from helpers import project_findings, summaries_made, write_project

TRAIN = """import torch
from loop import run_epoch
from logs import log_metrics


def main(model, loader, epochs):
    optimizer = torch.optim.AdamW(model.parameters())
    for epoch in range(epochs):
        run_epoch(model, loader, optimizer)
        log_metrics(epoch)
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "last.pt")
"""

LOOP = """import torch


def run_epoch(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""

LOGS = """def log_metrics(epoch):
    print("epoch", epoch)
"""


def test_a_scaler_built_one_call_away_is_found_where_the_text_names_one(tmp_path: Path, monkeypatch):
    write_project(tmp_path, {"train.py": TRAIN, "loop.py": LOOP, "logs.py": LOGS})
    made = summaries_made(monkeypatch)
    assert project_findings(tmp_path, ("AMP211",)) == {("train.py", 11, "AMP211")}
    assert LOGS.encode() not in made  # the other callee's module: no GradScaler in its text


BASE = """import torch


class Trainer:
    def save(self, path):
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}, path)
"""

AMP_TRAINER = """import torch
from base import Trainer


class AmpTrainer(Trainer):
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer
        self.scaler = torch.amp.GradScaler("cuda")

    def step(self, x, y):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.model(x, y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
"""

ELSEWHERE = """from lightning import Trainer


class Quiet(Trainer):
    pass
"""


def test_a_class_named_like_a_base_is_read_from_its_outline(tmp_path: Path, monkeypatch):
    """``Quiet(Trainer)`` names a ``Trainer`` that is a library's: its module is not summarized
    to find that out, and the subclass that holds the scaler is found as before."""
    write_project(tmp_path, {"base.py": BASE, "amp_trainer.py": AMP_TRAINER, "elsewhere.py": ELSEWHERE})
    made = summaries_made(monkeypatch)
    assert project_findings(tmp_path, ("AMP211",)) == {("base.py", 6, "AMP211")}
    assert ELSEWHERE.encode() not in made
