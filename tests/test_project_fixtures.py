"""fixtures/lint/projects: multi-module projects whose mistakes only show when lint follows a
call into another function or module. Each pattern has a buggy and a clean twin; the buggy one
marks every mistake with ``# expect:`` on the line where it is reported."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import expected_pairs

from ampdoctor.config import Settings
from ampdoctor.lint import LintRequest, known_codes, lint_paths

ROOT = Path(__file__).resolve().parent.parent
PROJECTS = ROOT / "fixtures" / "lint" / "projects"
TWINS = sorted(p for p in PROJECTS.glob("*/*") if p.is_dir())


def lint(paths: list[Path], project: bool = True) -> list:
    settings = Settings(root=ROOT, project=project)
    codes = settings.enabled_codes(known_codes())
    return lint_paths(paths, LintRequest(settings, codes), cwd=ROOT).findings


def expected(folder: Path) -> set[tuple[str, int, str]]:
    found = set()
    for path in folder.rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        found.update((rel, line, code) for line, code in expected_pairs(path.read_text(encoding="utf-8")))
    return found


def found(findings) -> set[tuple[str, int, str]]:
    return {(f.location.path, f.location.line, f.code) for f in findings}


def test_every_pattern_has_a_buggy_and_a_clean_twin_with_marks_only_in_the_buggy_one():
    patterns = sorted({twin.parent.name for twin in TWINS})
    assert len(patterns) >= 6
    for pattern in patterns:
        buggy, clean = PROJECTS / pattern / "buggy", PROJECTS / pattern / "clean"
        assert expected(buggy), pattern
        assert not expected(clean), pattern
        assert (buggy / "pyproject.toml").is_file() and (clean / "pyproject.toml").is_file()


@pytest.mark.parametrize("twin", TWINS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_linting_the_tree_reports_exactly_the_planted_mistakes(twin: Path):
    assert found(lint([twin])) == expected(twin)


@pytest.mark.parametrize("twin", TWINS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_file_list_reports_the_named_files_with_the_rest_of_the_project_behind_them(twin: Path):
    # What a pre-commit hook does: one changed file at a time, the project found above it.
    for path in sorted(twin.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        want = {item for item in expected(twin) if item[0] == rel}
        assert found(lint([path])) == want, rel


@pytest.mark.parametrize("twin", [t for t in TWINS if t.name == "buggy"], ids=lambda p: p.parent.name)
def test_file_local_linting_does_not_see_across_modules(twin: Path):
    assert not found(lint([twin], project=False)) & expected(twin)


def test_checkpoint_finding_points_at_the_helper_and_the_scaler():
    twin = PROJECTS / "checkpoint_helper" / "buggy"
    (finding,) = lint([twin / "train.py"])
    assert finding.code == "AMP211"
    assert "save_checkpoint(...)" in finding.message
    helper, scaler = finding.related
    assert (helper.path, helper.line) == ("fixtures/lint/projects/checkpoint_helper/buggy/utils.py", 15)
    assert "without the scaler's state" in helper.message
    assert (scaler.path, scaler.line) == ("fixtures/lint/projects/checkpoint_helper/buggy/train.py", 22)


def test_clip_in_update_helper_points_at_the_caller_and_its_backward():
    twin = PROJECTS / "update_helper" / "buggy"
    (finding,) = lint([twin / "optim_utils.py"])
    assert finding.code == "AMP201" and finding.location.line == 7
    assert "grad_scaler.unscale_(optimizer)" in finding.message
    call, backward = finding.related
    assert (call.path.rsplit("/", 1)[-1], call.line) == ("train.py", 15)
    assert (backward.path.rsplit("/", 1)[-1], backward.line) == ("train.py", 14)


def test_whole_projects_folder_at_once():
    # Several projects linted together: each call still resolves within its own twin.
    want = set()
    for twin in TWINS:
        want |= expected(twin)
    assert found(lint([PROJECTS])) == want


# ---- through the command line ---------------------------------------------------------------


def _cli(args: list[str], cwd: Path):
    import os

    from click.testing import CliRunner

    from ampdoctor.cli import main

    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(main, ["lint", "--no-cache", *args], catch_exceptions=False)
    finally:
        os.chdir(old)


def test_cli_json_carries_related_locations_of_a_cross_module_finding():
    import json

    twin = PROJECTS / "checkpoint_helper" / "buggy"
    result = _cli(["--output-format", "json", "train.py"], twin)
    assert result.exit_code == 1, result.output
    (item,) = json.loads(result.output)
    assert (item["code"], item["path"], item["line"]) == ("AMP211", "train.py", 37)
    assert [(r["path"], r["line"]) for r in item["related"]] == [("utils.py", 15), ("train.py", 22)]


def test_cli_text_shows_notes_and_no_project_keeps_each_file_on_its_own():
    twin = PROJECTS / "update_helper" / "buggy"
    result = _cli(["optim_utils.py"], twin)
    assert result.exit_code == 1
    assert "note: `optimizer_step` is called here after the scaled backward" in result.output
    assert "  --> train.py:15:13" in result.output
    alone = _cli(["--no-project", "optim_utils.py"], twin)
    assert alone.exit_code == 0, alone.output


def test_config_key_project_false_keeps_each_file_on_its_own(tmp_path: Path):
    import shutil

    twin = tmp_path / "twin"
    shutil.copytree(PROJECTS / "checkpoint_helper" / "buggy", twin)
    assert _cli(["train.py"], twin).exit_code == 1
    with open(twin / "pyproject.toml", "a", encoding="utf-8") as handle:
        handle.write("\n[tool.ampdoctor]\nproject = false\n")
    assert _cli(["train.py"], twin).exit_code == 0
    (twin / "pyproject.toml").write_text('[tool.ampdoctor]\nproject = "no"\n', encoding="utf-8")
    broken = _cli(["train.py"], twin)
    assert broken.exit_code == 2 and "tool.ampdoctor.project: expected true or false" in broken.output


@pytest.mark.slow
def test_installed_command_on_one_changed_file_uses_the_cache_for_the_rest(tmp_path: Path):
    # The pre-commit case: the console command on one file; the second run reads the other
    # modules' summaries from the cache and reports the same.
    import shutil
    import subprocess
    import sys

    twin = tmp_path / "twin"
    shutil.copytree(PROJECTS / "checkpoint_dict_helper" / "buggy", twin)
    exe = Path(sys.executable).with_name("ampdoctor")
    for _ in range(2):
        done = subprocess.run([str(exe), "lint", "engine.py"], cwd=twin, capture_output=True, text=True, check=False)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "engine.py:28:5: AMP211" in done.stdout
        assert "--> lib/checkpoint.py:8:5" in done.stdout
    assert list((twin / ".ampdoctor_cache").glob("summaries-*.json"))


def test_cached_runs_over_different_roots_sharing_one_cache_report_the_same(tmp_path: Path):
    # One cache folder (the settings root) serves runs whose projects differ: a twin alone, and
    # the folder of all projects. Served from the result cache, a file's summary still counts.
    import shutil

    copy = tmp_path / "projects"
    shutil.copytree(PROJECTS, copy)
    settings = Settings(root=tmp_path)
    codes = settings.enabled_codes(known_codes())

    def run(paths):
        findings = lint_paths(paths, LintRequest(settings, codes, use_cache=True), cwd=tmp_path).findings
        return sorted((f.location.path, f.location.line, f.code) for f in findings)

    everything = run([copy])
    assert len(everything) == len(set().union(*(expected(t) for t in TWINS)))
    twin = run([copy / "checkpoint_helper" / "buggy"])
    assert twin == [("projects/checkpoint_helper/buggy/train.py", 37, "AMP211")]
    assert run([copy]) == everything
    assert run([copy / "checkpoint_helper" / "buggy"]) == twin


def test_a_checkpoint_method_judged_by_its_own_file_is_reported_once(tmp_path: Path):
    # The saving method's class holds the scaler (self.scaler): the file's own AMP211 reports the
    # incomplete torch.save there, and the call to the method is not a second finding.
    import shutil

    from ampdoctor.lint import lint_source

    fixture = ROOT / "fixtures" / "lint" / "protocol_buggy_checkpoint_method.py"
    source = fixture.read_text(encoding="utf-8")
    want = set(expected_pairs(source))
    assert want == {(20, "AMP211")}
    assert {(f.location.line, f.code) for f in lint_source(source, "trainer.py")} == want
    (tmp_path / "pyproject.toml").write_text("", encoding="utf-8")
    shutil.copy(fixture, tmp_path / "trainer.py")
    assert {(f.location.line, f.code) for f in lint([tmp_path])} == want


def test_a_warm_cache_from_a_sub_project_keeps_the_whole_tree_findings(tmp_path: Path):
    # One sub-project linted first (its own project root), then the tree above it with the same
    # cache folder (--isolated: the cache sits in the working folder for both): the tree's result cache is warm, and the summaries made under the other
    # root still count, so the cross-module finding is there as it is cold.
    import os
    import shutil

    from click.testing import CliRunner

    from ampdoctor.cli import main

    (tmp_path / "pyproject.toml").write_text("", encoding="utf-8")
    shutil.copytree(PROJECTS / "checkpoint_helper" / "buggy", tmp_path / "apps" / "classifier")
    (tmp_path / "tools.py").write_text("import torch\n\nprint(torch.__version__)\n", encoding="utf-8")
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        runs = [
            CliRunner()
            .invoke(main, ["lint", "--isolated", "--output-format", "concise", *args], catch_exceptions=False)
            .output
            for args in (["apps/classifier"], ["."], ["apps/classifier/train.py"], ["."])
        ]
    finally:
        os.chdir(old)
    for output in runs:
        assert "apps/classifier/train.py:37:9: AMP211" in output, output
