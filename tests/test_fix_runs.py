"""fixtures/fixes: CPU training scripts with fixable mistakes. ``--fix --unsafe-fixes`` must leave
code that runs: every finding it fixed gone on re-lint, nothing new, a second run a no-op, and
the fixed script training to its end (bit for bit as before where the fix only renames).

A fix that a site cannot take safely (a clip per model in a loop, a clip every micro-batch) is
not offered: the file is left as it was and the finding stays."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import expected_pairs

from ampdoctor.cli import main

FIXES = Path(__file__).resolve().parent.parent / "fixtures" / "fixes"

# name -> (codes whose findings the fixes remove, codes left for a person, the losses stay equal)
CASES = {
    "two_clips_one_optimizer.py": ({"AMP201"}, set(), False),
    "clip_per_model_loop.py": (set(), {"AMP201"}, True),
    "clip_every_micro_step.py": (set(), {"AMP201"}, True),
    "missing_update_and_clip.py": ({"AMP201", "AMP202"}, set(), False),
    "deprecated_cpu_api.py": ({"AMP401"}, set(), True),
    "mask_and_device.py": ({"AMP301", "AMP106"}, set(), False),
    "backward_in_autocast.py": ({"AMP101"}, set(), False),
}


def _lint(*args: str) -> list[dict]:
    run = CliRunner().invoke(main, ["lint", "--isolated", "--output-format", "json", *args], catch_exceptions=False)
    assert run.exit_code in (0, 1), run.output
    return json.loads(run.stdout)


def _fixed_copy(tmp_path: Path, name: str) -> tuple[Path, str]:
    target = tmp_path / name
    shutil.copy(FIXES / name, target)
    before = target.read_text(encoding="utf-8")
    _lint("--fix", "--unsafe-fixes", str(target))
    return target, before


def test_every_fixture_is_covered():
    assert {p.name for p in FIXES.glob("*.py")} == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixture_reports_its_marked_mistakes(name: str):
    source = (FIXES / name).read_text(encoding="utf-8")
    found = sorted((item["line"], item["code"]) for item in _lint(str(FIXES / name)))
    assert found == expected_pairs(source)


@pytest.mark.parametrize("name", sorted(CASES))
def test_fix_removes_what_it_fixes_adds_nothing_and_is_idempotent(tmp_path: Path, name: str):
    fixed_codes, kept_codes, _ = CASES[name]
    original = [item["code"] for item in _lint(str(FIXES / name))]
    target, before = _fixed_copy(tmp_path, name)
    after = target.read_text(encoding="utf-8")
    assert (after != before) is bool(fixed_codes)
    remaining = [item["code"] for item in _lint(str(target))]
    assert not set(remaining) & fixed_codes
    assert set(remaining) == kept_codes
    assert all(original.count(code) >= remaining.count(code) for code in remaining), "a fix added a finding"
    _lint("--fix", "--unsafe-fixes", str(target))
    assert target.read_text(encoding="utf-8") == after, "a second --fix changed the file again"


def _run(script: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, str(script)], cwd=script.parent, capture_output=True, text=True, timeout=300, env=env
    )


def _losses(output: str) -> list[float]:
    return [float(line.split()[2]) for line in output.splitlines() if line.startswith("loss ")]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_fixed_script_trains_to_its_end(tmp_path: Path, name: str):
    pytest.importorskip("torch")
    _, _, same_losses = CASES[name]
    original = _run(FIXES / name)
    target, _ = _fixed_copy(tmp_path, name)
    fixed = _run(target)
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    assert fixed.stdout.rstrip().endswith("done")
    losses = _losses(fixed.stdout)
    assert losses and all(math.isfinite(loss) for loss in losses)
    if same_losses:
        assert original.returncode == 0 and _losses(original.stdout) == losses


def _fixed_with_clip_plan(monkeypatch, fixture: str, line) -> tuple[str, int, list]:
    """``--fix`` of a fixture where AMP201's fix inserts ``line(scaler)`` before each clip: the
    fixed text, the number of fixes applied and the findings left."""
    from helpers import all_options

    from ampdoctor.lint.engine import fix_source
    from ampdoctor.lint.fixes import FixPlan, NodeEdit
    from ampdoctor.lint.rules import unscale_and_update

    def plan(self, facts, frame, clip, backward, scaler, optimizer, steps, unscales):
        return FixPlan("unscale", (NodeEdit("line_before", clip.call.statement, line(scaler)),))

    monkeypatch.setattr(unscale_and_update.ClipBeforeUnscale, "_fix", plan)
    source = (FIXES / fixture).read_text(encoding="utf-8")
    fixed, count, findings, _, _ = fix_source(source, "train.py", all_options(fix=True))
    return fixed, count, findings


def test_a_fix_that_would_add_a_finding_is_withheld(monkeypatch):
    """The pass is checked by linting its result: were AMP201 to offer an unscale_ before each of
    two clips, the second would be an AMP206 (unscaled twice); that fix is withheld and its
    finding stays, without a fix."""
    fixed, count, findings = _fixed_with_clip_plan(
        monkeypatch, "two_clips_one_optimizer.py", lambda scaler: f"{scaler}.unscale_(optimizer)"
    )
    assert fixed.count("scaler.unscale_(optimizer)") == 1 and count == 1
    assert "AMP206" not in {f.code for f in findings}


def test_a_fix_that_adds_a_finding_on_its_own_is_withheld_and_its_finding_keeps_no_fix(monkeypatch):
    fixed, count, findings = _fixed_with_clip_plan(
        monkeypatch, "missing_update_and_clip.py", lambda s: f"{s}.unscale_(optimizer); {s}.unscale_(optimizer)"
    )
    assert "unscale_" not in fixed and count == 1  # the AMP202 fix alone went in
    assert "scaler.update()" in fixed
    [clip] = [f for f in findings if f.code == "AMP201"]
    assert clip.fix is None


def test_a_fix_withheld_against_an_earlier_text_is_tried_again_before_the_run_ends():
    # Found by the property test: the last clip's unscale_ was withheld in the first pass (it
    # added a finding beside the other fixes) and applied only by a second --fix.
    from helpers import fix_text

    source = """\
while True:
    with torch.autocast('cuda', dtype=torch.float16):
        scaler.scale(loss).backward()
    for x, y in loader:
        with torch.autocast('cuda', dtype=torch.float16):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.scale(loss).backward()
    with torch.autocast('cuda', dtype=torch.float16):
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.scale(loss).backward()
with torch.autocast('cuda', dtype=torch.float16):
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
"""
    for unsafe in (False, True):
        fixed = fix_text(source, unsafe=unsafe)
        assert fix_text(fixed, unsafe=unsafe) == fixed


def test_a_fix_whose_text_the_compiler_refuses_is_withheld(monkeypatch):
    """A keyword argument given twice parses but does not compile: the pass that makes it is
    undone, that fix withheld (its finding stays, without a fix), and the others go in."""
    fixed, count, findings = _fixed_with_clip_plan(
        monkeypatch, "missing_update_and_clip.py", lambda s: f"{s}.unscale_(optimizer=optimizer, optimizer=optimizer)"
    )
    compile(fixed, "train.py", "exec")
    assert "unscale_" not in fixed and "scaler.update()" in fixed and count == 1
    [clip] = [f for f in findings if f.code == "AMP201"]
    assert clip.fix is None


def test_a_file_that_never_compiled_still_takes_its_fixes():
    from helpers import fix_text

    source = (FIXES / "missing_update_and_clip.py").read_text(encoding="utf-8")
    broken = source + "\n\nreturn None  # outside a function: parses, does not compile\n"
    fixed = fix_text(broken, unsafe=True)
    assert fixed != broken and "scaler.update()" in fixed


PASTED = """
import torch
from torch.cuda.amp import GradScaler, autocast

scaler = GradScaler()


def train(model, x):
    with autocast():
        model(x).sum().backward()
"""


def test_amp401_offers_no_fix_where_another_import_binds_the_same_name():
    """Each import's fix rewrites every use of the names it binds: with the script pasted twice,
    each rewrote them all, and ``--fix`` wrote ``autocast("cuda", enabled="cuda")`` and
    ``GradScaler("cuda", "cuda")``. Which uses are whose is not the text's to say: no fix."""
    from helpers import fix_text, lint_text

    [alone] = [f for f in lint_text(PASTED) if f.code == "AMP401"]
    assert alone.fix is not None
    fixed = fix_text(PASTED, unsafe=True)
    assert "from torch.amp import GradScaler, autocast" in fixed and 'autocast("cuda")' in fixed
    twice = PASTED + PASTED.replace("def train", "def train_again")
    found = [f for f in lint_text(twice) if f.code == "AMP401"]
    assert len(found) == 2 and all(f.fix is None for f in found)
    assert fix_text(twice, unsafe=True).count("from torch.cuda.amp import GradScaler, autocast") == 2
    local = (
        PASTED
        + "\n\ndef evaluate(model, x):\n    from torch.amp import autocast\n\n    with autocast('cuda'):\n        return model(x)\n"
    )
    [beside] = [f for f in lint_text(local) if f.code == "AMP401"]
    assert beside.fix is None


def test_amp401_fixes_an_import_inside_a_function_with_the_uses_of_that_function_only():
    """Two test functions each import ``autocast`` from ``torch.cuda.amp`` (detectron2's tests
    do): each import's fix rewrites its own function's calls, once."""
    from helpers import fix_text, lint_text

    source = (
        "import torch\n\n\n"
        "def test_one(model, x):\n"
        "    from torch.cuda.amp import autocast\n\n"
        "    with autocast():\n"
        "        return model(x)\n\n\n"
        "def test_two(model, x):\n"
        "    from torch.cuda.amp import autocast\n\n"
        "    with autocast(enabled=True):\n"
        "        return model(x)\n"
    )
    found = [f for f in lint_text(source) if f.code == "AMP401"]
    assert len(found) == 2 and all(f.fix is not None for f in found)
    fixed = fix_text(source)
    compile(fixed, "test_e2e.py", "exec")
    assert fixed.count("from torch.amp import autocast") == 2
    assert 'with autocast("cuda"):' in fixed and 'with autocast("cuda", enabled=True):' in fixed
    assert fix_text(fixed) == fixed


def test_amp401_leaves_a_functions_decorator_to_the_scope_around_it():
    from helpers import fix_text

    source = (
        "from torch.amp import autocast\n\n\n"
        '@autocast("cuda")\n'
        "def step(model, x):\n"
        "    from torch.cuda.amp import autocast\n\n"
        "    with autocast():\n"
        "        return model(x)\n"
    )
    fixed = fix_text(source)
    compile(fixed, "step.py", "exec")
    assert '@autocast("cuda")\n' in fixed and 'with autocast("cuda"):' in fixed
    assert "from torch.amp import autocast\n\n\n@" in fixed and "    from torch.amp import autocast" in fixed
