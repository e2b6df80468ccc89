"""AMP101/AMP102 through events dispatched by name (``getattr(callback, event)(self)``) inside
an autocast region an engine makes (``with self.engine.autocast():``), where only some engine
classes autocast (``region_calls.py``): the runner's batch fires ``on_batch_end``, whose handler
runs the engine's scaled backward and step inside the region."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import copy_twin, lint_project, project_findings
from helpers import replace_once as edit

EXPECTED = {("runner.py", 26, "AMP101"), ("runner.py", 26, "AMP102")}


def findings(root: Path, paths=None, project_mode=True) -> set[tuple[str, int, str]]:
    return project_findings(root, ("AMP101", "AMP102"), paths, project_mode)


@pytest.fixture
def buggy(tmp_path: Path) -> Path:
    return copy_twin("event_dispatch", "buggy", tmp_path / "p")


def test_the_batch_call_points_at_the_engine_methods_and_the_region(buggy: Path):
    by_code = {f.code: f for f in lint_project(buggy).findings}
    backward, step = by_code["AMP101"], by_code["AMP102"]
    assert "`self.run_batch(...)`" in backward.message and "MixedEngine.backward_loss" in backward.message
    assert [(r.path, r.line) for r in backward.related] == [("engines.py", 26), ("runner.py", 25)]
    assert "MixedEngine.optimizer_step" in step.message
    assert [(r.path, r.line) for r in step.related] == [("engines.py", 29), ("runner.py", 25)]


def test_file_alone_is_silent_and_a_changed_file_sees_the_callbacks(buggy: Path):
    assert findings(buggy, project_mode=False) == set()
    assert findings(buggy, [buggy / "runner.py"]) == EXPECTED


def test_an_event_no_handler_trains_on_is_silent(buggy: Path):
    edit(buggy / "runner.py", 'self.fire("on_batch_end")', 'self.fire("on_batch_start")')
    assert findings(buggy) == set()


def test_the_event_named_by_keyword_or_inside_the_dispatcher(buggy: Path):
    edit(buggy / "runner.py", 'self.fire("on_batch_end")', 'self.fire(event="on_batch_end")')
    assert findings(buggy) == EXPECTED
    edit(buggy / "runner.py", "getattr(callback, event)(self)", 'getattr(callback, "on_batch_end")(self)')
    edit(buggy / "runner.py", 'self.fire(event="on_batch_end")', 'self.fire(event="ignored")')
    assert findings(buggy) == EXPECTED


def test_engines_that_never_autocast_open_no_region(buggy: Path):
    edit(buggy / "engines.py", 'return torch.autocast("cuda", dtype=torch.float16)', "return contextlib.nullcontext()")
    assert findings(buggy) == set()


def test_the_scaled_backward_counts_only_on_an_engine_that_autocasts(buggy: Path):
    # The engine that autocasts runs a plain backward; the one that scales never autocasts: no
    # engine runs the scaled backward inside its own region.
    edit(
        buggy / "engines.py",
        "    def backward_loss(self, loss):\n        self.scaler.scale(loss).backward()\n\n"
        "    def optimizer_step(self, optimizer):\n        self.scaler.step(optimizer)\n        self.scaler.update()\n",
        "\n\nclass ScalingEngine(Engine):\n    def __init__(self):\n"
        '        self.scaler = torch.amp.GradScaler("cuda")\n\n'
        "    def backward_loss(self, loss):\n        self.scaler.scale(loss).backward()\n\n"
        "    def optimizer_step(self, optimizer):\n        self.scaler.step(optimizer)\n        self.scaler.update()\n",
    )
    assert findings(buggy) == set()


def test_a_handler_that_does_not_say_whose_events_it_handles_is_not_followed(buggy: Path):
    # ``runner`` of unseen class: the method may handle any dispatcher's ``on_batch_end``.
    text = (buggy / "callbacks.py").read_text(encoding="utf-8").replace('runner: "Runner"', "runner")
    (buggy / "callbacks.py").write_text(text, encoding="utf-8")
    assert findings(buggy) == set()


EVALUATOR = """\
from engines import Engine


class Evaluator:
    def __init__(self, model, metrics, engine: Engine):
        self.model = model
        self.metrics = metrics
        self.engine: Engine = engine
        self.output = None

    def fire(self, event):
        for metric in self.metrics:
            getattr(metric, event)(self)

    def eval_batch(self, x):
        self.output = self.model(x)
        self.fire("on_batch_end")

    def evaluate(self, loader):
        for x, _y in loader:
            with self.engine.autocast():
                self.eval_batch(x)
"""


def test_another_dispatchers_events_of_the_same_name_reach_only_its_own_handlers(tmp_path: Path):
    # An evaluator fires ``on_batch_end`` at its metrics inside the engine's autocast: the
    # training callback's ``on_batch_end`` handles the runner's events, not the evaluator's.
    clean = copy_twin("event_dispatch", "clean", tmp_path / "p")
    (clean / "evaluator.py").write_text(EVALUATOR, encoding="utf-8")
    assert findings(clean) == set()
    # Annotated with the evaluator's class, the training callback is one of its handlers.
    edit(clean / "callbacks.py", "    from runner import Runner\n", "    from evaluator import Evaluator as Runner\n")
    assert findings(clean) == {("evaluator.py", 22, "AMP101"), ("evaluator.py", 22, "AMP102")}


def test_an_event_fired_right_inside_the_region(buggy: Path):
    edit(
        buggy / "runner.py",
        "            with self.engine.autocast():\n                self.run_batch(x, y)  # expect: AMP101 AMP102\n",
        "            with self.engine.autocast():\n                self.loss = self.criterion(self.model(x), y)\n"
        '                self.fire("on_batch_end")\n',
    )
    assert findings(buggy) == {("runner.py", 27, "AMP101"), ("runner.py", 27, "AMP102")}
