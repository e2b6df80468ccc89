"""AMP211 through a parameter: ``checkpointer.save(...)`` where ``checkpointer`` is handed in by
the function's callers. The method is the project class's that every caller's object has; a
caller that passes anything else (a library's checkpointer, an object the project does not
show) keeps the call unresolved and the rule silent."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import copy_twin, lint_project, project_findings, summaries_made, write_project

ANCHOR = ("engine.py", 22, "AMP211")


def amp211(root: Path, paths=None, project_mode=True) -> set[tuple[str, int, str]]:
    return project_findings(root, ("AMP211",), paths, project_mode)


@pytest.fixture
def buggy(tmp_path: Path) -> Path:
    return copy_twin("checkpointer_parameter", "buggy", tmp_path / "p")


def test_the_callers_object_decides_the_method_and_the_finding_names_the_write(buggy: Path):
    [finding] = [f for f in lint_project(buggy).findings if f.code == "AMP211"]
    assert (finding.location.path, finding.location.line) == ANCHOR[:2]
    assert "`checkpointer.save(...)`" in finding.message
    related = {(r.path, r.line) for r in finding.related}
    assert ("checkpointing.py", 21) in related  # the torch.save in the base class's method
    assert ("engine.py", 7) in related  # the GradScaler
    assert ("engine.py", 23) in related  # the final save: the same checkpoint, one finding


def test_the_engine_alone_does_not_know_the_checkpointer(buggy: Path):
    assert amp211(buggy, project_mode=False) == set()
    assert amp211(buggy, [buggy / "engine.py"]) == {ANCHOR}


@pytest.mark.parametrize(
    "import_line",
    [
        "from fvcore.common.checkpoint import Checkpointer as DetectionCheckpointer",
        "from checkpointing import DetectionCheckpointer as _Unused\nDetectionCheckpointer = make_checkpointer()",
    ],
    ids=["library-class", "unknown-factory"],
)
def test_a_checkpointer_the_project_does_not_show_is_silent(buggy: Path, import_line: str):
    train = buggy / "train.py"
    text = train.read_text(encoding="utf-8")
    train.write_text(text.replace("from checkpointing import DetectionCheckpointer", import_line), encoding="utf-8")
    assert amp211(buggy) == set()


def test_one_caller_with_another_checkpointer_keeps_it_silent(buggy: Path):
    (buggy / "finetune.py").write_text(
        "from fvcore.common.checkpoint import Checkpointer\n"
        "from engine import run_iterations\n\n\n"
        "def finetune(cfg, model, loader, optimizer, scheduler):\n"
        "    run_iterations(cfg, model, loader, optimizer, scheduler, Checkpointer(model), {'iteration': 0})\n",
        encoding="utf-8",
    )
    assert amp211(buggy) == set()


def test_a_checkpointer_that_holds_the_scaler_is_silent(buggy: Path):
    engine = buggy / "engine.py"
    text = engine.read_text(encoding="utf-8")
    text = text.replace(
        '    scaler = torch.amp.GradScaler("cuda") if cfg.amp else None\n',
        '    scaler = torch.amp.GradScaler("cuda") if cfg.amp else None\n    checkpointer.scaler = scaler\n',
    )
    engine.write_text(text, encoding="utf-8")
    checkpointing = buggy / "checkpointing.py"
    text = checkpointing.read_text(encoding="utf-8")
    text = text.replace(
        "        state.update(extra)\n",
        "        state.update(extra)\n        if self.scaler is not None:\n"
        '            state["scaler"] = self.scaler.state_dict()\n',
    ).replace("        self.folder = folder\n", "        self.folder = folder\n        self.scaler = None\n")
    checkpointing.write_text(text, encoding="utf-8")
    assert amp211(buggy) == set()


def test_whether_a_callee_trains_with_its_own_scaler_is_found_once_per_callee(buggy: Path, monkeypatch):
    from ampdoctor.lint.project import checkpoints

    asked: list[tuple[str, str]] = []
    real = checkpoints._Judge._uses_own_scaler

    def counted(self, module: str, function: str) -> bool:
        asked.append((module, function))
        return real(self, module, function)

    monkeypatch.setattr(checkpoints._Judge, "_uses_own_scaler", counted)
    monkeypatch.setattr(checkpoints._Judge, "_trains_itself", _asked_twice(checkpoints._Judge._trains_itself))
    assert amp211(buggy) == {ANCHOR}
    assert asked and len(asked) == len(set(asked))


def _asked_twice(method):
    """The judge's question, asked a second time at each call: the answer must not change."""

    def twice(self, module: str, function: str) -> bool:
        first = method(self, module, function)
        assert method(self, module, function) == first
        return first

    return twice


ANNOTATED_TRAIN = """\
import torch
from report import write_report
from runner import Trainer


def train(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


def log_epoch(trainer: Trainer, epoch):
    write_report(trainer, epoch)
"""
# The same in a class: a method's annotated parameter does not make its class's methods train.
ANNOTATED_CLASS = ANNOTATED_TRAIN.replace(
    "def log_epoch(trainer: Trainer, epoch):\n    write_report(trainer, epoch)\n",
    "class EpochLog:\n    def attach(self, trainer: Trainer):\n        self.trainer = trainer\n\n"
    "    def log_epoch(self, epoch):\n        write_report(self.trainer, epoch)\n",
)
ANNOTATED_RUNNER = """\
import torch


class Trainer:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")
"""
REPORT = """\
import json


def write_report(trainer, epoch):
    with open(f"report{epoch}.json", "w") as handle:
        json.dump({"epoch": epoch}, handle)
"""


@pytest.mark.parametrize("train", [ANNOTATED_TRAIN, ANNOTATED_CLASS], ids=["function", "method"])
def test_a_parameter_of_a_class_that_may_hold_a_scaler_is_no_training_of_its_own(
    tmp_path: Path, monkeypatch, train: str
):
    assert train.count("write_report(") == 1
    write_project(tmp_path, {"train.py": train, "runner.py": ANNOTATED_RUNNER, "report.py": REPORT})
    made = summaries_made(monkeypatch)
    # ``log_epoch`` hands on an object that may hold a scaler, and trains with none: its call of
    # a helper whose name says nothing of a checkpoint is not followed (the helper's module,
    # whose text dumps a report, is not parsed to find that out).
    assert amp211(tmp_path) == set()
    assert REPORT.encode() not in made
