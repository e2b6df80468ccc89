"""AMP208 across modules for one step helper called twice in an iteration: ``apply_step(enc_opt,
scaler)`` then ``apply_step(dec_opt, scaler)`` after one scaled backward, where the helper ends
with ``scaler.update()`` (``update_twice.py``). A helper handed a scaler under a scaler's name and
driving it (``unscale_``, ``step`` with an optimizer) is a scaler's user even though it never
scales a loss itself (``passes.find_scalers_and_optimizers``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import copy_twin, lint_project, project_findings
from helpers import replace_once as edit

EXPECTED = {("optim_utils.py", 9, "AMP208")}


def findings(root: Path, paths=None, project_mode=True) -> set[tuple[str, int, str]]:
    return project_findings(root, ("AMP208",), paths, project_mode)


@pytest.fixture
def buggy(tmp_path: Path) -> Path:
    return copy_twin("shared_step_helper", "buggy", tmp_path / "p")


def test_the_update_in_the_helper_points_at_both_calls(buggy: Path):
    (finding,) = [f for f in lint_project(buggy).findings if f.code == "AMP208"]
    assert "`apply_step`" in finding.message and "twice" in finding.message
    assert [(r.path, r.line) for r in finding.related] == [("train.py", 16), ("train.py", 17)]


def test_file_alone_is_silent_and_a_changed_file_sees_the_callers(buggy: Path):
    assert findings(buggy, project_mode=False) == set()
    assert findings(buggy, [buggy / "optim_utils.py"]) == EXPECTED


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # one optimizer stepped twice: a second step of it, not a second half
        ("apply_step(dec_opt, scaler)", "apply_step(enc_opt, scaler)"),
        # the two calls never run in one iteration
        (
            "            apply_step(enc_opt, scaler)\n            apply_step(dec_opt, scaler)\n",
            "            if step % 2:\n                apply_step(enc_opt, scaler)\n"
            "            else:\n                apply_step(dec_opt, scaler)\n",
        ),
        # two scalers, one per optimizer
        ("apply_step(dec_opt, scaler)", "apply_step(dec_opt, dec_scaler)"),
    ],
)
def test_calls_that_do_not_update_one_scaler_twice_are_silent(buggy: Path, old: str, new: str):
    edit(buggy / "train.py", old, new)
    assert findings(buggy) == set()


def test_a_parameter_not_named_as_a_scaler_is_not_taken_for_one(buggy: Path):
    # ``runner.step(optimizer)`` / ``runner.update()``: any object may have those methods.
    text = (buggy / "optim_utils.py").read_text(encoding="utf-8").replace("scaler", "runner")
    (buggy / "optim_utils.py").write_text(text, encoding="utf-8")
    assert findings(buggy) == set()


def test_an_update_the_caller_can_turn_off_is_not_judged(buggy: Path):
    # ``apply_step(enc_opt, scaler, update=False)`` then ``apply_step(dec_opt, scaler)``: the
    # helper's update is guarded by a parameter, the usual way to update once after the last
    # optimizer. Neither AMP208 nor any rule of the helper's own fires on it.
    edit(
        buggy / "optim_utils.py",
        "def apply_step(optimizer, scaler, max_norm=1.0):",
        "def apply_step(optimizer, scaler, max_norm=1.0, update=True):",
    )
    edit(
        buggy / "optim_utils.py", "    scaler.update()  # expect: AMP208\n", "    if update:\n        scaler.update()\n"
    )
    edit(buggy / "train.py", "apply_step(enc_opt, scaler)", "apply_step(enc_opt, scaler, update=False)")
    assert [f.code for f in lint_project(buggy).findings if f.location.path.endswith("optim_utils.py")] == []


def test_a_loop_handed_the_scaler_that_names_no_gradscaler_is_found(tmp_path: Path):
    # The executor's loop is handed the scaler by the script that makes it; its own text names no
    # GradScaler and scales no loss, yet it calls the step helper twice per iteration.
    root = copy_twin("shared_step_helper", "buggy", tmp_path / "p")
    (root / "train.py").write_text(
        "import torch\n\nfrom executor import run\n\n\n"
        "def main(encoder, decoder, loader):\n"
        "    scaler = torch.amp.GradScaler('cuda')\n"
        "    run(encoder, decoder, loader, scaler)\n",
        encoding="utf-8",
    )
    (root / "executor.py").write_text(
        "import torch\n\nfrom optim_utils import apply_step, backward_step\n\n\n"
        "def run(encoder, decoder, loader, scaler):\n"
        "    enc_opt = torch.optim.AdamW(encoder.parameters())\n"
        "    dec_opt = torch.optim.AdamW(decoder.parameters())\n"
        "    for x, y in loader:\n"
        "        backward_step(encoder, decoder, x, y, scaler)\n"
        "        apply_step(enc_opt, scaler)\n"
        "        apply_step(dec_opt, scaler)\n",
        encoding="utf-8",
    )
    with (root / "optim_utils.py").open("a", encoding="utf-8") as handle:
        handle.write(
            "\n\nimport torch  # noqa: E402\n\n\ndef backward_step(encoder, decoder, x, y, scaler):\n"
            "    with torch.autocast('cuda', dtype=torch.float16):\n"
            "        loss = torch.nn.functional.cross_entropy(decoder(encoder(x)), y)\n"
            "    scaler.scale(loss).backward()\n"
        )
    assert "GradScaler" not in (root / "executor.py").read_text(encoding="utf-8")
    assert findings(root) == EXPECTED
