"""Engine calls stand for the engine's scaler calls (``engine_calls.py``): a callback that runs
``runner.engine.backward_loss(...)``, clips, then ``runner.engine.optimizer_step(...)`` clips
gradients an AMP engine has scaled (AMP201); an ``unscale_`` on every batch with the engine's
step every few batches raises on the second (AMP206). Silent where the engine's class is not
certain enough: candidate classes that disagree, a receiver with methods the engine lacks, no
engine with a scaler."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import copy_twin, lint_project, project_findings, summaries_made, write_project
from helpers import replace_once as edit

EXPECTED = {("callbacks.py", 14, "AMP201"), ("callbacks.py", 32, "AMP206")}


def findings(root: Path, paths=None, project_mode=True) -> set[tuple[str, int, str]]:
    return project_findings(root, ("AMP201", "AMP206"), paths, project_mode)


@pytest.fixture
def buggy(tmp_path: Path) -> Path:
    return copy_twin("engine_protocol", "buggy", tmp_path / "p")


def test_the_clip_names_the_engine_scaler_and_points_at_the_engine_methods(buggy: Path):
    [clip] = [f for f in lint_project(buggy).findings if f.code == "AMP201"]
    assert "`runner.engine.scaler.unscale_(runner.optimizer)`" in clip.message
    assert {(r.path, r.line) for r in clip.related} == {("engines.py", 29), ("engines.py", 32)}


def test_file_alone_is_silent_and_a_changed_callback_file_sees_the_engines(buggy: Path):
    assert findings(buggy, project_mode=False) == set()
    assert findings(buggy, [buggy / "callbacks.py"]) == EXPECTED


def test_an_annotated_runner_resolves_the_engine_through_its_field(buggy: Path):
    edit(buggy / "callbacks.py", "def on_batch_end(self, runner):", 'def on_batch_end(self, runner: "Runner"):')
    edit(buggy / "callbacks.py", "from torch.nn.utils", "from runner import Runner\nfrom torch.nn.utils")
    assert findings(buggy) == {(path, line + 1, code) for path, line, code in EXPECTED}


def test_engines_that_disagree_on_the_scaler_field_keep_it_silent(buggy: Path):
    (buggy / "more_engines.py").write_text(
        "import torch\nfrom engines import Engine\n\n\n"
        "class OtherAmpEngine(Engine):\n"
        "    def __init__(self):\n        self.grad_scaler = torch.amp.GradScaler('cuda')\n\n"
        "    def backward_loss(self, loss, model, optimizer):\n        self.grad_scaler.scale(loss).backward()\n\n"
        "    def optimizer_step(self, loss, model, optimizer):\n"
        "        self.grad_scaler.step(optimizer)\n        self.grad_scaler.update()\n",
        encoding="utf-8",
    )
    assert findings(buggy) == set()


def test_a_receiver_with_a_method_no_engine_has_is_not_an_engine(buggy: Path):
    edit(
        buggy / "callbacks.py",
        '        loss = runner.batch_metrics["loss"]\n',
        '        loss = runner.batch_metrics["loss"]\n        runner.engine.sync_buffers(runner.model)\n',
    )
    assert ("callbacks.py", 15, "AMP201") not in findings(buggy)


def test_without_an_engine_that_scales_nothing_is_seeded(buggy: Path):
    edit(buggy / "engines.py", "self.scaler.scale(loss).backward()", "loss.backward()")
    edit(
        buggy / "engines.py",
        "        self.scaler.step(optimizer)\n        self.scaler.update()\n",
        "        optimizer.step()\n",
    )
    assert ("callbacks.py", 14, "AMP201") not in findings(buggy)


def test_a_guarded_step_method_is_no_protocol(buggy: Path):
    # An engine method whose scaler calls sit on a branch of their own is not what each call runs.
    edit(
        buggy / "engines.py",
        "    def backward_loss(self, loss, model, optimizer):\n        self.scaler.scale(loss).backward()\n",
        "    def backward_loss(self, loss, model, optimizer):\n        if self.scaler.is_enabled():\n"
        "            self.scaler.scale(loss).backward()\n        else:\n            loss.backward()\n",
    )
    assert ("callbacks.py", 14, "AMP201") not in findings(buggy)


def test_a_tensor_method_of_the_same_name_as_a_scaling_wrapper_is_not_the_wrapper(tmp_path: Path):
    # ``loss.backward()`` on a tensor, in a project that also has an optimizer wrapper whose
    # ``backward(loss)`` scales: the tensor's own method, never the wrapper's.
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n', encoding="utf-8")
    (tmp_path / "wrapper.py").write_text(
        "import torch\n\n\nclass ScaledOptimizer:\n"
        "    def __init__(self, optimizer):\n        self.optimizer = optimizer\n"
        "        self.scaler = torch.amp.GradScaler('cuda')\n\n"
        "    def backward(self, loss):\n        self.scaler.scale(loss).backward()\n\n"
        "    def step(self):\n        self.scaler.step(self.optimizer)\n        self.scaler.update()\n",
        encoding="utf-8",
    )
    (tmp_path / "train.py").write_text(
        "import torch\nimport torch.nn.functional as F\n\n\n"
        "def compute_loss(model, x, y):\n    with torch.autocast('cuda', dtype=torch.bfloat16):\n"
        "        return F.cross_entropy(model(x), y)\n\n\n"
        "def train(model, optimizer, loader):\n    for x, y in loader:\n"
        "        loss = compute_loss(model, x, y)\n        loss.backward()\n        optimizer.step()\n"
        "        optimizer.zero_grad()\n",
        encoding="utf-8",
    )
    assert [f.code for f in lint_project(tmp_path).findings] == []


STATS_TRAIN = """\
import torch
from builders import make_engine


def train(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    engine = make_engine()
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        scaler.scale(loss).backward()
        engine.update_stats(loss)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""
STATS_BUILDERS = """\
from stats import Stats


def make_engine(optimizer_name="adam"):
    return Stats(optimizer_name)
"""
STATS = """\
class Stats:
    def __init__(self, optimizer_name):
        self.optimizer_name = optimizer_name

    def update_stats(self, loss):
        print(self.optimizer_name, loss)
"""


@pytest.mark.parametrize("scans", [True, False])
def test_a_receiver_is_not_resolved_where_no_method_of_its_names_runs_a_protocol(
    tmp_path: Path, monkeypatch, scans: bool
):
    from ampdoctor.lint.project import checks

    # Where the run may scan the project's files (a whole tree's; here: of any size); a run of a
    # few files (the pre-commit hook) walks the engine's value instead, with its summaries cached.
    monkeypatch.setattr(checks, "SCANNED_TARGETS", 0 if scans else 24)
    write_project(tmp_path, {"train.py": STATS_TRAIN, "builders.py": STATS_BUILDERS, "stats.py": STATS})
    made = summaries_made(monkeypatch)
    # ``engine.update_stats(loss)`` has a protocol's name, but no method of that name in a module
    # that makes or uses a scaler runs one: the engine's value, which runs through builders.py,
    # is not worked out.
    assert project_findings(tmp_path, ("AMP201", "AMP206")) == set()
    assert (STATS_BUILDERS.encode() not in made) is scans
