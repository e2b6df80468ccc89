"""fixtures/lint: realistic scripts. Buggy ones mark every planted mistake with ``# expect:``;
clean ones carry no marker and must produce nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import libcst as cst
import pytest
from click.testing import CliRunner
from helpers import expected_pairs, found_pairs

from ampdoctor.cli import main

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "lint"
SCRIPTS = sorted(FIXTURES.glob("*.py"))


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_fixture_reports_exactly_the_planted_mistakes(path: Path):
    source = path.read_text(encoding="utf-8")
    assert found_pairs(source, str(path)) == expected_pairs(source)


def test_clean_fixtures_cover_the_real_world_patterns():
    names = {p.name for p in SCRIPTS if not expected_pairs(p.read_text(encoding="utf-8"))}
    for required in (
        "clean_nanogpt_style.py",
        "clean_scaler_wrapper_class.py",
        "clean_accumulation_clip.py",
        "clean_bf16_no_scaler.py",
        "clean_autocast_disabled_regions.py",
        "protocol_clean_amp_trainer.py",  # detectron2-style AMPTrainer
        "clean_gan_two_optimizers.py",
    ):
        assert required in names


def _lint(args):
    return CliRunner().invoke(main, ["lint", "--isolated", *args], catch_exceptions=False)


@pytest.mark.parametrize("name", ["buggy_classic_mistakes.py", "buggy_no_update.py", "buggy_deprecated_api.py"])
def test_fix_on_buggy_fixture_reparses_and_is_idempotent(tmp_path: Path, name: str):
    target = tmp_path / name
    shutil.copy(FIXTURES / name, target)
    before = target.read_text(encoding="utf-8")
    first = _lint(["--fix", "--output-format", "json", str(target)])
    assert first.exit_code in (0, 1), first.output
    fixed = target.read_text(encoding="utf-8")
    assert fixed != before
    cst.parse_module(fixed)
    _lint(["--fix", str(target)])
    assert target.read_text(encoding="utf-8") == fixed, "a second --fix changed the file again"
    # Every finding with a safe fix is gone; what is left has no fix or an unsafe one.
    rest = _lint(["--output-format", "json", str(target)])
    import json

    assert all(item["fix"] is None or item["fix"]["applicability"] == "unsafe" for item in json.loads(rest.output))


def test_fix_changes_only_the_fixed_lines(tmp_path: Path):
    target = tmp_path / "buggy_classic_mistakes.py"
    shutil.copy(FIXTURES / target.name, target)
    before = target.read_text(encoding="utf-8").splitlines()
    _lint(["--fix", str(target)])
    after = target.read_text(encoding="utf-8").splitlines()
    import difflib

    changed = [
        line
        for line in difflib.unified_diff(before, after, lineterm="", n=0)
        if line[:1] in "+-" and line[:3] not in ("+++", "---")
    ]
    assert changed == [
        "-from torch.cuda.amp import GradScaler, autocast  # expect: AMP401",
        "+from torch.amp import GradScaler, autocast  # expect: AMP401",
        "-scaler = GradScaler()",
        '+scaler = GradScaler("cuda")',
        "-            with autocast():",
        '+            with autocast("cuda"):',
        "+            scaler.unscale_(optimizer)",
    ]


def test_whole_fixture_folder_through_the_cli():
    result = _lint(["--output-format", "concise", str(FIXTURES)])
    assert result.exit_code == 1
    # Subfolders too (apex/: the migration's inputs; apex/migrated/: its results, which are clean).
    planted = sum(len(expected_pairs(p.read_text(encoding="utf-8"))) for p in FIXTURES.rglob("*.py"))
    notebook_findings = 1  # buggy_train.ipynb: clip before unscale_
    assert f"Found {planted + notebook_findings} problems" in result.output


def test_the_float8_fixtures_plant_each_float8_mistake_the_linter_finds_in_one_file():
    planted = {
        code
        for path in SCRIPTS
        if path.name.startswith("float8_buggy")
        for _, code in expected_pairs(path.read_text(encoding="utf-8"))
    }
    assert planted == {"AMP601", "AMP602", "AMP603", "AMP605", "AMP609", "AMP610"}
    clean = [path for path in SCRIPTS if path.name.startswith("float8_clean")]
    assert len(clean) == 2 and not any(expected_pairs(path.read_text(encoding="utf-8")) for path in clean)
