"""AMP303 across functions: a helper returns a model it made float16 and a caller builds an
optimizer over its parameters (``half_returned.py``). Silent where the caller converts it back,
trains another element of what the call returned, or the helper converts a copy it keeps."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import copy_twin, lint_project, project_findings
from helpers import replace_once as edit

ANCHOR = ("models.py", 10, "AMP303")


def run(root: Path, paths=None, project_mode=True):
    return lint_project(root, paths, project_mode)


def amp303(root: Path, paths=None, project_mode=True) -> set[tuple[str, int, str]]:
    return project_findings(root, ("AMP303",), paths, project_mode)


@pytest.fixture
def buggy(tmp_path: Path) -> Path:
    return copy_twin("half_model_helper", "buggy", tmp_path / "p")


def test_the_conversion_is_reported_with_the_optimizer_beside_it(buggy: Path):
    [finding] = [f for f in run(buggy).findings if f.code == "AMP303"]
    assert (finding.location.path, finding.location.line) == ANCHOR[:2]
    assert "`load_denoiser` returns `model` made float16" in finding.message
    assert [(r.path, r.line) for r in finding.related] == [("finetune.py", 10)]


def test_the_helper_alone_is_silent_and_a_changed_helper_sees_its_callers(buggy: Path):
    assert amp303(buggy, project_mode=False) == set()
    assert amp303(buggy, [buggy / "models.py"]) == {ANCHOR}


@pytest.mark.parametrize(
    "old, new",
    [
        ("    model.cuda().train()\n", "    model.float().cuda().train()\n    model.float()\n"),
        ("    model, options = load_denoiser(path)\n", "    options, model = load_denoiser(path)\n"),
        ("    model, options = load_denoiser(path)\n", "    model, options = load_denoiser(path)\n    model = Net()\n"),
    ],
    ids=["converted-back", "other-element", "rebound"],
)
def test_a_caller_that_does_not_train_the_float16_model_is_silent(buggy: Path, old: str, new: str):
    edit(buggy / "finetune.py", old, new)
    assert amp303(buggy) == set()


def test_a_helper_that_returns_a_float32_model_is_silent(buggy: Path):
    edit(buggy / "models.py", "    return model, options\n", "    return model.float(), options\n")
    assert amp303(buggy) == set()
