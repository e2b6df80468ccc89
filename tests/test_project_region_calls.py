"""AMP101/AMP102 for calls made inside an autocast context an object holds
(``with self.backend.autocast:``): the functions the call runs, followed through methods held in
fields (``self.steps[stage](...)``) and an AMP backend's scaler calls, run the backward or the
step inside the region (``region_calls.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import copy_twin, lint_project, project_findings
from helpers import replace_once as edit

EXPECTED = {("experiment.py", 35, "AMP101"), ("experiment.py", 35, "AMP102")}


def run(root: Path, paths=None, project_mode=True):
    return lint_project(root, paths, project_mode)


def findings(root: Path, paths=None, project_mode=True) -> set[tuple[str, int, str]]:
    return project_findings(root, ("AMP101", "AMP102"), paths, project_mode)


@pytest.fixture
def buggy(tmp_path: Path) -> Path:
    return copy_twin("held_region_calls", "buggy", tmp_path / "p")


def test_the_call_in_the_region_points_at_the_backward_and_the_region(buggy: Path):
    by_code = {f.code: f for f in run(buggy).findings}
    backward = by_code["AMP101"]
    assert "`self.run_batch(...)`" in backward.message and "MixedBackend.backward_loss" in backward.message
    assert [(r.path, r.line) for r in backward.related] == [("backends.py", 24), ("experiment.py", 34)]
    assert [(r.path, r.line) for r in by_code["AMP102"].related] == [("backends.py", 27), ("experiment.py", 34)]


def test_file_alone_is_silent_and_a_changed_file_sees_the_backends(buggy: Path):
    assert findings(buggy, project_mode=False) == set()
    assert findings(buggy, [buggy / "experiment.py"]) == EXPECTED


def test_a_backend_that_never_autocasts_opens_no_region(buggy: Path):
    edit(buggy / "experiment.py", "MixedBackend() if fp16 else PlainBackend()", "PlainBackend()")
    assert findings(buggy) == set()


def test_fields_that_hold_no_methods_are_not_followed(buggy: Path):
    edit(
        buggy / "experiment.py",
        '{"train": self.train_step, "valid": self.valid_step}',
        '{"train": make_step("train"), "valid": make_step("valid")}',
    )
    assert findings(buggy) == set()


def test_a_helper_that_runs_its_own_backward_two_calls_down(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n', encoding="utf-8")
    (tmp_path / "loop.py").write_text(
        "import torch\n\n\n"
        "def update(model, optimizer, x, y):\n"
        "    loss = torch.nn.functional.mse_loss(model(x), y)\n"
        "    loss.backward()\n    optimizer.step()\n    optimizer.zero_grad()\n\n\n"
        "class Loop:\n"
        "    def __init__(self, model, optimizer):\n"
        "        self.model, self.optimizer = model, optimizer\n"
        "        self.amp = torch.autocast('cuda', dtype=torch.bfloat16)\n\n"
        "    def batch(self, x, y):\n        update(self.model, self.optimizer, x, y)\n\n"
        "    def run(self, loader):\n        for x, y in loader:\n"
        "            with self.amp:\n                self.batch(x, y)\n",
        encoding="utf-8",
    )
    assert findings(tmp_path) == {("loop.py", 22, "AMP101")}


def test_a_held_method_called_in_the_region_is_named_by_the_methods_it_may_be(buggy: Path):
    edit(buggy / "experiment.py", "losses.append(self.run_batch(x, y))", "losses.append(self.steps[self.stage](x, y))")
    [backward] = [f for f in run(buggy).findings if f.code == "AMP101"]
    assert backward.location.line == 35
    assert backward.message.startswith("the call of a method held in a field (`train_step` or `valid_step`) runs")
