"""AMP202 across functions: a step function that scales a backward and steps its scaler, updates
it nowhere, and hands it to a helper (a diagnostic that steps and measures the change of the
weights). The module's own AMP202 stays silent where the scaler is handed on; the project pass
reports it when the helper neither updates the scaler nor hands it on, and the step function's
callers do not update it either."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import project_findings, write_project

STEP = """\
import torch

from diag import step_and_measure


def train_step(model, optimizer, scaler, batch, measure):
    with torch.autocast("cuda"):
        loss = model(batch).sum()
    scaler.scale(loss).backward()
    if measure:
        step_and_measure(model, optimizer, scaler)
    else:
        scaler.step(optimizer)
    optimizer.zero_grad()
"""

DIAG = """\
def step_and_measure(model, optimizer, scaler=None):
    before = [p.detach().clone() for p in model.parameters()]
    if scaler:
        scaler.step(optimizer)
    else:
        optimizer.step()
    return [(p - b).norm() for p, b in zip(model.parameters(), before)]
"""

LOOP = """\
import torch

from step import train_step


def train(model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda")
    for i, batch in enumerate(loader):
        train_step(model, optimizer, scaler, batch, i % 100 == 0)


def validate(model, optimizer, loader):
    for batch in loader:
        train_step(model, optimizer, None, batch, False)
"""

STEP_AT = ("step.py", 13, "AMP202")


def amp202(root: Path) -> set[tuple[str, int, str]]:
    return project_findings(root, ("AMP202",))


def test_a_helper_that_steps_without_updating_leaves_the_scaler_never_updated(tmp_path: Path):
    write_project(tmp_path, {"step.py": STEP, "diag.py": DIAG, "loop.py": LOOP})
    assert amp202(tmp_path) == {STEP_AT}


@pytest.mark.parametrize(
    ("name", "old", "new"),
    [
        # the helper updates the scaler it is handed
        ("diag.py", "        scaler.step(optimizer)\n", "        scaler.step(optimizer)\n        scaler.update()\n"),
        # the helper hands it on to code that may update it
        ("diag.py", "        scaler.step(optimizer)\n", "        finish(optimizer, scaler)\n"),
        # the loop updates the scaler after each step
        (
            "loop.py",
            "        train_step(model, optimizer, scaler, batch, i % 100 == 0)\n",
            "        train_step(model, optimizer, scaler, batch, i % 100 == 0)\n        scaler.update()\n",
        ),
        # the loop hands the scaler to something else too
        (
            "loop.py",
            "        train_step(model, optimizer, scaler, batch, i % 100 == 0)\n",
            "        train_step(model, optimizer, scaler, batch, i % 100 == 0)\n        after_step(scaler)\n",
        ),
        # the helper is a library's: the project cannot tell
        ("step.py", "from diag import step_and_measure", "from trainkit import step_and_measure"),
    ],
    ids=["helper-updates", "helper-hands-on", "loop-updates", "loop-hands-on", "library-helper"],
)
def test_an_update_the_project_may_not_see_keeps_it_silent(tmp_path: Path, name: str, old: str, new: str):
    files = {"step.py": STEP, "diag.py": DIAG, "loop.py": LOOP}
    assert old in files[name]
    files[name] = files[name].replace(old, new)
    write_project(tmp_path, files)
    assert amp202(tmp_path) == set()


def test_a_step_function_that_nothing_calls_is_not_judged(tmp_path: Path):
    write_project(tmp_path, {"step.py": STEP, "diag.py": DIAG})
    assert amp202(tmp_path) == set()
