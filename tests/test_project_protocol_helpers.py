"""A scaler wrapper whose step method leaves the update to a private method of its own
(``self._grad_scaler.step(opt); return self._update_scale()``): the update is part of the step's
protocol for its callers (``function_parts._scaler_protocol``), so a trainer calling the wrapper's
step does not step without updating. Where the private method does not update, it does."""

from __future__ import annotations

from pathlib import Path

from helpers import project_findings

WRAPPER = """\
import torch


class LossScaler:
    def __init__(self):
        self._grad_scaler = torch.amp.GradScaler("cuda")

    def backward(self, loss):
        self._grad_scaler.scale(loss).backward()

    def unscale_grads_(self, optimizer):
        self._grad_scaler.unscale_(optimizer)

    def run_optimizer_step(self, optimizer):
        self._grad_scaler.step(optimizer)
        return self._update_scale()

    def _update_scale(self):
        before = self._grad_scaler.get_scale()
        self._grad_scaler.update()
        return self._grad_scaler.get_scale() < before
"""

TRAINER = """\
import torch

from scaler import LossScaler


class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.loss_scaler = LossScaler()

    def run(self, loader):
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = torch.nn.functional.mse_loss(self.model(x), y)
            self.loss_scaler.backward(loss)
            self.loss_scaler.unscale_grads_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.loss_scaler.run_optimizer_step(self.optimizer)
            self.optimizer.zero_grad()
"""


def project(root: Path, wrapper: str) -> Path:
    root.mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "p"\n', encoding="utf-8")
    (root / "scaler.py").write_text(wrapper, encoding="utf-8")
    (root / "trainer.py").write_text(TRAINER, encoding="utf-8")
    return root


def test_an_update_in_a_private_method_the_step_calls_is_the_steps_own(tmp_path: Path):
    assert project_findings(project(tmp_path / "a", WRAPPER), ("AMP202",)) == set()


def test_a_private_method_that_does_not_update_leaves_the_step_without_one(tmp_path: Path):
    logging_only = WRAPPER.replace("        self._grad_scaler.update()\n", "")
    found = project_findings(project(tmp_path / "b", logging_only), ("AMP202",))
    assert found == {("trainer.py", 19, "AMP202")}


def test_a_second_update_on_a_path_of_its_own_is_the_methods_business(tmp_path: Path):
    # After an overflow below a floor, the private method updates again to the floor.
    floored = WRAPPER.replace(
        "        return self._grad_scaler.get_scale() < before\n",
        "        if self._grad_scaler.get_scale() < 1.0:\n            self._grad_scaler.update(1.0)\n"
        "        return self._grad_scaler.get_scale() < before\n",
    )
    assert floored != WRAPPER
    assert project_findings(project(tmp_path / "c", floored), ("AMP202",)) == set()
