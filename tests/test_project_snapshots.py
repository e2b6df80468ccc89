"""AMP211 for checkpoints written as dataclass/NamedTuple snapshots or from a collector of
optimizer states, and AMP205 for a per-iteration method of an object a factory made."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ampdoctor.config import Settings
from ampdoctor.lint import LintRequest, known_codes, lint_paths, lint_source

SNAPSHOT = """\
import torch
from dataclasses import asdict, dataclass


@dataclass
class Snapshot:
    model_state: dict
    optimizer_state: dict
    epoch: int


def train(model, loader, epochs, path):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(epochs):
        for x, y in loader:
            with torch.autocast("cuda"):
                loss = model(x).sub(y).pow(2).mean()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
        snapshot = Snapshot(model.state_dict(), optimizer.state_dict(), epoch)
        torch.save(asdict(snapshot), path)
"""


def codes(source: str) -> list[tuple[int, str]]:
    return [(f.location.line, f.code) for f in lint_source(textwrap.dedent(source), "train.py")]


def test_snapshot_in_one_file_is_reported_at_the_save_with_the_class_and_the_scaler():
    (finding,) = [f for f in lint_source(SNAPSHOT, "train.py") if f.code == "AMP211"]
    assert finding.location.line == 24
    assert "`Snapshot`" in finding.message
    assert [(r.line, r.message) for r in finding.related] == [
        (6, "`Snapshot` has no field that can hold the scaler's state"),
        (14, "the GradScaler whose state is left out"),
    ]


def test_snapshot_saved_as_it_is_or_through_a_named_tuple_is_reported():
    direct = SNAPSHOT.replace("torch.save(asdict(snapshot), path)", "torch.save(snapshot, path)")
    assert (24, "AMP211") in codes(direct)
    named = SNAPSHOT.replace("from dataclasses import asdict, dataclass", "from typing import NamedTuple")
    named = named.replace("@dataclass\nclass Snapshot:", "class Snapshot(NamedTuple):")
    named = named.replace("torch.save(asdict(snapshot), path)", "torch.save(snapshot._asdict(), path)")
    assert (23, "AMP211") in codes(named)


@pytest.mark.parametrize(
    "old, new",
    [
        # a field for the scaler, filled
        ("    epoch: int\n", "    epoch: int\n    scaler_state: dict\n"),
        # a field given what a call made from the scaler returns
        ("Snapshot(model.state_dict(), optimizer.state_dict(), epoch)",
         "Snapshot(model.state_dict(), optimizer.state_dict(), extra(scaler))"),
        # completed after it is built
        ("        torch.save(asdict(snapshot), path)",
         "        snapshot.extra = scaler.state_dict()\n        torch.save(asdict(snapshot), path)"),
        # handed to a helper, with the scaler, before the save
        ("        torch.save(asdict(snapshot), path)",
         "        record(snapshot, scaler)\n        torch.save(asdict(snapshot), path)"),
        # no optimizer state: a weights-only export
        ("Snapshot(model.state_dict(), optimizer.state_dict(), epoch)", "Snapshot(model.state_dict(), None, epoch)"),
        # no scaler in the code
        ('    scaler = torch.amp.GradScaler("cuda")\n', "NO SCALER"),
    ],
)  # fmt: skip
def test_snapshot_that_may_hold_the_scaler_or_needs_none_is_not_reported(old: str, new: str):
    assert old in SNAPSHOT
    source = SNAPSHOT.replace(old, new)
    if new == "NO SCALER":
        source = SNAPSHOT.replace(old, "").replace("scaler.scale(loss).backward()", "loss.backward()")
        source = source.replace("scaler.step(optimizer)", "optimizer.step()").replace(
            "            scaler.update()\n", ""
        )
    if "scaler_state" in new:
        source = source.replace("optimizer.state_dict(), epoch)", "optimizer.state_dict(), epoch, scaler.state_dict())")
    assert "AMP211" not in {code for _line, code in codes(source)}


@pytest.mark.parametrize(
    "old, new",
    [
        # handed to a helper that is not given the scaler: it cannot add its state
        ("        torch.save(asdict(snapshot), path)", "        record(snapshot)\n        torch.save(asdict(snapshot), path)"),
        # a field left to its default, an empty mapping
        ("    epoch: int\n", "    epoch: int\n    extra: dict = field(default_factory=dict)\n"),
    ],
)  # fmt: skip
def test_snapshot_completed_without_the_scaler_is_still_reported(old: str, new: str):
    assert old in SNAPSHOT
    assert (24 + new.count("\n") - old.count("\n"), "AMP211") in codes(SNAPSHOT.replace(old, new))


COLLECTOR = """\
import torch


class AmpStep:
    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda")

    def __call__(self, loss):
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()


class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = torch.optim.AdamW(model.parameters())
        self.update = AmpStep(self.optimizer)

    def optimizer_states(self):
        return {k: v.state_dict() for k, v in vars(self).items() if isinstance(v, torch.optim.Optimizer)}

    def save(self, path, epoch):
        torch.save({"model": self.model.state_dict(), "optim": self.optimizer_states(), "epoch": epoch}, path)
"""


def test_optimizer_states_collected_by_type_leave_the_wrapped_scaler_out():
    (finding,) = [f for f in lint_source(COLLECTOR, "trainer.py") if f.code == "AMP211"]
    assert finding.location.line == 25
    assert "held by `self.update`" in finding.message
    assert [(r.line, r.message) for r in finding.related] == [(7, "the GradScaler whose state is left out")]


def test_collector_through_a_name_or_a_module_function_is_followed():
    named = COLLECTOR.replace(
        '        torch.save({"model": self.model.state_dict(), "optim": self.optimizer_states(),',
        '        states = self.optimizer_states()\n        torch.save({"model": self.model.state_dict(), "optim": states,',
    )
    assert (26, "AMP211") in codes(named)
    function = COLLECTOR.replace(
        "    def optimizer_states(self):\n        return {k: v.state_dict() for k, v in vars(self)",
        "    def unused(self):\n        return {k: v.state_dict() for k, v in vars(self)",
    )
    function += (
        "\n\ndef optimizer_states(owner):\n"
        "    return [v.state_dict() for v in vars(owner).values() if isinstance(v, torch.optim.Optimizer)]\n"
    )
    function = function.replace("self.optimizer_states()", "optimizer_states(self)")
    assert (25, "AMP211") in codes(function)


@pytest.mark.parametrize(
    "old, new",
    [
        # the wrapper's own state is saved too
        ('"epoch": epoch}', '"amp": self.update.state_dict(), "epoch": epoch}'),
        # the filter admits more than optimizers
        ("isinstance(v, torch.optim.Optimizer)", "isinstance(v, (torch.optim.Optimizer, AmpStep))"),
        ("isinstance(v, torch.optim.Optimizer)", "hasattr(v, 'state_dict')"),
        # the wrapper is an optimizer itself: the collector keeps it
        ("class AmpStep:", "class AmpStep(torch.optim.Optimizer):"),
        # the wrapper never trains with its scaler
        ("        self.scaler.scale(loss).backward()\n        self.scaler.step(self.optimizer)\n", "        pass\n"),
        # another value holds the whole object, the scaler's holder among its fields
        ('"epoch": epoch}', '"extra": dict(vars(self)), "epoch": epoch}'),
        # no scaler anywhere
        ('        self.scaler = torch.amp.GradScaler("cuda")\n', "        self.scaler = None\n"),
    ],
)  # fmt: skip
def test_collector_is_not_reported_where_the_scaler_may_be_saved_or_is_unknown(old: str, new: str):
    assert old in COLLECTOR
    assert "AMP211" not in {code for _line, code in codes(COLLECTOR.replace(old, new))}


# ---- AMP205: a method of a factory-made object, called on every iteration -----------------

MODEL = """\
import torch


class {name}:
    def __init__(self, opt):
        self.optimizer = torch.optim.Adam([])

    def optimize_parameters(self):
        scaler = torch.amp.GradScaler("cuda")
        with torch.autocast("cuda"):
            loss = self.net(self.x).mean()
        self.optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(self.optimizer)
        scaler.update()
"""

TRAIN = """\
from models import create_model


def main(opt, dataset):
    model = create_model(opt)
    for epoch in range(opt.n_epochs):
        for data in dataset:
            model.set_input(data)
            model.optimize_parameters()
"""

FACTORY = """\
import importlib


def create_model(opt):
    return getattr(importlib.import_module("models." + opt.model), opt.cls)(opt)
"""


def project(tmp_path: Path, files: dict[str, str]) -> set[tuple[str, int, str]]:
    (tmp_path / "pyproject.toml").write_text("", encoding="utf-8")
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    settings = Settings(root=tmp_path)
    codes = settings.enabled_codes(known_codes())
    findings = lint_paths([tmp_path], LintRequest(settings, codes), cwd=tmp_path).findings
    return {(f.location.path, f.location.line, f.code) for f in findings}


def factory_project(**changes: str) -> dict[str, str]:
    files = {
        "train.py": TRAIN,
        "models/__init__.py": FACTORY,
        "models/a.py": MODEL.format(name="AModel"),
        "models/b.py": MODEL.format(name="BModel"),
    }
    files.update(changes)
    return files


def test_method_of_a_factory_made_model_that_rebuilds_its_scaler_is_reported_at_each_definition(tmp_path: Path):
    assert project(tmp_path, factory_project()) == {("models/a.py", 9, "AMP205"), ("models/b.py", 9, "AMP205")}


def test_abstract_base_method_does_not_count_as_a_definition(tmp_path: Path):
    base = (
        "import torch\n\n\nclass Base:\n    def optimize_parameters(self):\n        raise NotImplementedError\n\n"
        "    def save_networks(self, path):\n        torch.save(self.net.state_dict(), path)\n"
    )
    assert ("models/a.py", 9, "AMP205") in project(tmp_path, factory_project(**{"models/base.py": base}))


@pytest.mark.parametrize(
    "changes",
    [
        # another model's method reuses one scaler: the factory may pick that one
        {"models/b.py": MODEL.format(name="BModel").replace(
            '        scaler = torch.amp.GradScaler("cuda")\n', "        scaler = self.scaler\n")},
        # the loop is not a training loop (one call per fold, a fresh run each time)
        {"train.py": TRAIN.replace("for epoch in range(opt.n_epochs):", "for fold in range(opt.folds):")},
        # called once, after training
        {"train.py": TRAIN.replace("            model.optimize_parameters()\n", "") + "    model.optimize_parameters()\n"},
        # the object's class is named by the call: resolved or a library's, not guessed
        {"train.py": TRAIN.replace("model = create_model(opt)", "model = Pix2Pix(opt)")},
    ],
)  # fmt: skip
def test_factory_made_model_is_silent_where_the_rebuild_is_not_certain(tmp_path: Path, changes: dict[str, str]):
    assert not project(tmp_path, factory_project(**changes))


def test_a_method_name_libraries_define_is_not_followed(tmp_path: Path):
    files = factory_project(
        **{
            "models/a.py": MODEL.format(name="AModel").replace("optimize_parameters", "step"),
            "models/b.py": "",
            "train.py": TRAIN.replace("model.optimize_parameters()", "model.step()"),
        }
    )
    assert not project(tmp_path, files)
