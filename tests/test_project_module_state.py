"""AMP211 where the model class itself trains with a GradScaler in a field and saves a checkpoint
built key by key from ``self.state_dict()`` and its optimizer's state: a ``torch.nn.Module``
subclass's own ``state_dict()`` holds its parameters and buffers, never a scaler kept in a plain
field (``value_atoms.plain_module``). Where the class may put more in it (its own
``state_dict``, ``get_extra_state``, a second base), the checkpoint may hold the scaler: silent."""

from __future__ import annotations

import textwrap

import pytest

from ampdoctor.lint import lint_source

MODEL = """\
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 4)
        self.optimizer = None
        self.scaler = None

    def setup(self, fp16):
        self.optimizer = torch.optim.Adam(self.parameters())
        if fp16:
            self.scaler = torch.cuda.amp.GradScaler()

    def train_one_step(self, x):
        with torch.cuda.amp.autocast():
            loss = self.net(x).sum()
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def save(self, path):
        weights = self.state_dict()
        if self.optimizer is not None:
            optimizer_state = self.optimizer.state_dict()
        else:
            optimizer_state = None
        checkpoint = {}
        checkpoint["state_dict"] = weights
        checkpoint["optimizer"] = optimizer_state
        torch.save(checkpoint, path)
"""


def amp211(source: str) -> list[int]:
    return [f.location.line for f in lint_source(textwrap.dedent(source), "model.py") if f.code == "AMP211"]


def test_a_modules_own_state_and_its_optimizers_without_the_scaler_is_reported():
    assert amp211(MODEL) == [33]
    (finding,) = [f for f in lint_source(MODEL, "model.py") if f.code == "AMP211"]
    assert "`self.scaler`" in finding.message and [r.line for r in finding.related] == [15]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # the class decides what its state holds
        ("    def save(self, path):", "    def state_dict(self):\n        return {}\n\n    def save(self, path):"),
        (
            "    def save(self, path):",
            "    def get_extra_state(self):\n        return self.scaler\n\n    def save(self, path):",
        ),
        # a second base may bring a state_dict of its own
        ("class Model(nn.Module):", "class Model(nn.Module, Checkpointable):"),
        # the scaler's state is in the checkpoint
        (
            '        checkpoint["optimizer"] = optimizer_state\n',
            '        checkpoint["optimizer"] = optimizer_state\n        checkpoint["scaler"] = self.scaler.state_dict()\n',
        ),
    ],
)
def test_a_state_that_may_hold_the_scaler_is_not_reported(old: str, new: str):
    assert old in MODEL
    assert amp211(MODEL.replace(old, new)) == []


SUBCLASS = """\
from model import Model


class ScaledModel(Model):
    def state_dict(self, *args, **kwargs):
        state = super().state_dict(*args, **kwargs)
        state["scaler"] = self.scaler.state_dict()
        return state
"""


def test_a_subclass_that_adds_to_the_state_may_hold_the_scaler(tmp_path):
    # ``self.state_dict()`` runs the object's own class's: a subclass in another module that
    # puts the scaler's state into it makes the checkpoint complete for its objects.
    from helpers import lint_project

    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n', encoding="utf-8")
    (tmp_path / "model.py").write_text(MODEL, encoding="utf-8")
    assert [(f.location.path, f.location.line) for f in lint_project(tmp_path).findings if f.code == "AMP211"] == [
        ("model.py", 33)
    ]
    (tmp_path / "scaled.py").write_text(SUBCLASS, encoding="utf-8")
    assert [f for f in lint_project(tmp_path).findings if f.code == "AMP211"] == []
    # The same subclass in the model's own module.
    assert amp211(MODEL + "\n\n" + SUBCLASS.replace("from model import Model\n", "")) == []


def test_a_state_dict_hook_may_put_the_scaler_in():
    hooked = MODEL.replace(
        "        self.scaler = None\n",
        "        self.scaler = None\n        self._register_state_dict_hook(lambda module, state, prefix, meta: state)\n",
    )
    assert amp211(hooked) == []
