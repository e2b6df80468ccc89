"""A field of an object that is a dict of shared state (``self.env[...]``, ``self.state[...]``):
what is stored under one key is not in the entry of another. A trainer step that keeps its
optimizers under ``self.env["current_step_optimizers"]`` and reads a network out of
``self.env["generators"]`` writes a model's weights, not an optimizer's state, when it saves
that network; the whole field, and the entry of the key that holds the optimizer, still hold it."""

from __future__ import annotations

from pathlib import Path

from helpers import project_findings, write_project

STEP = """\
import torch


class Step:
    def __init__(self, env):
        self.env = env
        self.scaler = torch.amp.GradScaler("cuda")
        self.optimizers = [torch.optim.AdamW(env["generators"]["g"].parameters())]

    def network(self, name):
        return self.env["generators"][name]

    def forward_backward(self, batch):
        self.env["current_step_optimizers"] = self.optimizers
        net = self.network("g")
        with torch.autocast("cuda", dtype=torch.float16):
            loss = net(batch).mean()
        if not torch.isfinite(loss):
            torch.save(net.state_dict(), "nan_weights.pth")
            raise SystemExit(1)
        self.scaler.scale(loss).backward()

    def step(self):
        for opt in self.optimizers:
            self.scaler.step(opt)
        self.scaler.update()
"""

STATE = """\
import torch


class Trainer:
    def __init__(self, model):
        self.model = model
        self.scaler = torch.amp.GradScaler("cuda")
        self.optimizer = torch.optim.AdamW(model.parameters())
        self.state = {}

    def train_step(self, x):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.model(x).sum()
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def remember(self):
        self.state["optimizer"] = self.optimizer.state_dict()
        self.state["model"] = self.model.state_dict()

    def save(self, path):
        torch.save(self.state, path)

    def save_optimizer(self, path):
        torch.save(self.state["optimizer"], path)

    def save_model(self, path):
        torch.save(self.state["model"], path)
"""


def amp211(root: Path) -> set[tuple[str, int, str]]:
    return project_findings(root, ("AMP211",))


def test_a_network_read_from_shared_state_is_not_the_optimizers_stored_beside_it(tmp_path: Path):
    write_project(tmp_path, {"steps.py": STEP})
    assert amp211(tmp_path) == set()


def test_the_optimizers_key_still_holds_them(tmp_path: Path):
    saved = STEP.replace(
        'torch.save(net.state_dict(), "nan_weights.pth")',
        'torch.save(self.env["current_step_optimizers"][0].state_dict(), "nan.pth")',
    )
    write_project(tmp_path, {"steps.py": saved})
    assert amp211(tmp_path) == {("steps.py", 19, "AMP211")}


def test_a_key_given_by_a_variable_may_be_any_entry(tmp_path: Path):
    write_project(
        tmp_path,
        {
            "steps.py": STEP.replace('self.env["current_step_optimizers"]', "self.env[key]").replace(
                "def forward_backward(self, batch):", "def forward_backward(self, batch, key):"
            )
        },
    )
    assert amp211(tmp_path) == {("steps.py", 19, "AMP211")}


def test_the_whole_field_and_the_optimizers_entry_hold_its_state_the_models_entry_does_not(tmp_path: Path):
    write_project(tmp_path, {"trainer.py": STATE})
    assert amp211(tmp_path) == {("trainer.py", 23, "AMP211"), ("trainer.py", 26, "AMP211")}
