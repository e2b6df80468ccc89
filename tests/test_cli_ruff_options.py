"""The options a ruff user reaches for: --exit-zero, --exit-non-zero-on-fix, --statistics,
--show-fixes, -q/-s, --show-files, --show-settings, standard input, --add-noqa, --watch, the
warning for a run with no Python file, and the file-level ``# ampdoctor: noqa``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from samples import CLIP_BEFORE_UNSCALE as BUGGY
from samples import UNSCALE_THEN_CLIP as CLEAN

from ampdoctor.cli import main

# Two findings on two lines: AMP101 (no safe fix) and AMP201 (a safe fix).
TWO = """\
import torch


def train(model, opt, loader):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x)
            scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
"""


def invoke(*args, input=None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "train.py").write_text(BUGGY, encoding="utf-8")
    (tmp_path / "clean.py").write_text(CLEAN, encoding="utf-8")
    (tmp_path / "two.py").write_text(TWO, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- exit codes ---------------------------------------------------------------------------


def test_exit_zero_reports_but_exits_zero(project):
    result = invoke("lint", "train.py", "--exit-zero")
    assert result.exit_code == 0
    assert "AMP201" in result.stdout


def test_exit_zero_still_exits_two_on_an_unparsable_file(project):
    (project / "broken.py").write_text(BUGGY + "x = (\n", encoding="utf-8")
    assert invoke("lint", "broken.py", "--exit-zero").exit_code == 2


def test_exit_non_zero_on_fix(project):
    assert invoke("lint", "train.py", "--fix").exit_code == 0  # all fixed, nothing left
    (project / "train.py").write_text(BUGGY, encoding="utf-8")
    result = invoke("lint", "train.py", "--fix", "--exit-non-zero-on-fix")
    assert result.exit_code == 1
    assert "scaler.unscale_(optimizer)" in (project / "train.py").read_text(encoding="utf-8")
    # nothing to fix: 0 with the option too
    assert invoke("lint", "clean.py", "--fix", "--exit-non-zero-on-fix").exit_code == 0


# --- what is printed ----------------------------------------------------------------------


def test_statistics_counts_each_code_instead_of_listing(project):
    result = invoke("lint", "two.py", "train.py", "--statistics")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines == ["2  AMP201  [*] clip-before-unscale", "1  AMP101  [ ] backward-in-autocast"]


def test_statistics_as_json(project):
    result = invoke("lint", "two.py", "--statistics", "--output-format", "json")
    data = json.loads(result.stdout)
    assert data == [
        {"code": "AMP101", "name": "backward-in-autocast", "count": 1, "fixable": False},
        {"code": "AMP201", "name": "clip-before-unscale", "count": 1, "fixable": True},
    ]


def test_statistics_of_a_clean_run_print_nothing(project):
    result = invoke("lint", "clean.py", "--statistics")
    assert (result.exit_code, result.stdout) == (0, "")


def test_show_fixes_lists_what_was_fixed(project):
    result = invoke("lint", "two.py", "train.py", "--fix", "--show-fixes")
    assert "Fixed 2 problems:\n- train.py:\n    1 × AMP201 (clip-before-unscale)\n- two.py:\n" in result.stdout
    assert result.exit_code == 1  # the AMP101 of two.py has no safe fix
    without = invoke("lint", "train.py", "--fix")
    assert "× AMP201" not in without.stdout


def test_quiet_prints_findings_without_summary(project):
    result = invoke("lint", "train.py", "-q")
    assert result.exit_code == 1
    assert "train.py:8:5: AMP201" in result.stdout
    assert "Found" not in result.stdout and "Codes:" not in result.stdout
    assert invoke("lint", "clean.py", "--quiet").stdout == ""


def test_silent_prints_nothing_and_keeps_the_exit_code(project):
    result = invoke("lint", "train.py", "-s")
    assert (result.exit_code, result.stdout, result.stderr) == (1, "", "")
    assert invoke("lint", "clean.py", "--silent").exit_code == 0


def test_a_folder_without_python_files_warns(tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    monkeypatch.chdir(tmp_path)
    result = invoke("lint", "empty")
    assert result.exit_code == 0
    assert "no Python files found" in result.stderr
    assert invoke("lint", "empty", "-q").stderr == ""


def test_show_files_lists_what_would_be_checked(project):
    (project / "skipped").mkdir()
    (project / "skipped" / "x.py").write_text("", encoding="utf-8")
    (project / "notes.txt").write_text("", encoding="utf-8")
    result = invoke("lint", ".", "--show-files", "--exclude", "skipped")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == ["clean.py", "train.py", "two.py"]


def test_show_files_applies_each_sub_projects_excludes(project):
    sub = project / "sub"
    sub.mkdir()
    (sub / "pyproject.toml").write_text('[tool.ampdoctor]\nexclude = ["generated"]\n', encoding="utf-8")
    (sub / "generated").mkdir()
    (sub / "generated" / "g.py").write_text("", encoding="utf-8")
    (sub / "kept.py").write_text("", encoding="utf-8")
    (project / "generated").mkdir()
    (project / "generated" / "top.py").write_text("", encoding="utf-8")
    listed = invoke("lint", ".", "--show-files").stdout.splitlines()
    assert "sub/kept.py" in listed and "generated/top.py" in listed
    assert "sub/generated/g.py" not in listed


def test_show_settings_shows_the_configuration_in_force(project):
    (project / "pyproject.toml").write_text('[tool.ampdoctor]\nignore = ["AMP4"]\n', encoding="utf-8")
    result = invoke("lint", "train.py", "--show-settings")
    assert result.exit_code == 0
    assert "pyproject.toml" in result.stdout
    enabled = next(line for line in result.stdout.splitlines() if line.startswith("enabled codes"))
    assert "AMP201" in enabled and "AMP401" not in enabled


# --- standard input -----------------------------------------------------------------------


def test_dash_reads_standard_input(project):
    result = invoke("lint", "-", input=BUGGY)
    assert result.exit_code == 1
    assert "-:8:5: AMP201" in result.stdout


def test_stdin_filename_names_the_findings_and_applies_its_per_file_ignores(project):
    result = invoke("lint", "--stdin-filename", "pkg/train.py", "--output-format", "concise", input=BUGGY)
    assert result.stdout.startswith("pkg/train.py:8:5: AMP201")
    (project / "pyproject.toml").write_text(
        '[tool.ampdoctor]\nper-file-ignores = {"pkg/*.py" = ["AMP201"]}\n', encoding="utf-8"
    )
    result = invoke("lint", "--stdin-filename", "pkg/train.py", input=BUGGY)
    assert result.exit_code == 0


def test_stdin_with_fix_writes_the_fixed_text_to_standard_output(project):
    result = invoke("lint", "-", "--fix", input=BUGGY)
    assert result.exit_code == 0
    assert result.stdout == CLEAN
    assert "Fixed 1 problem" in result.stderr


def test_stdin_with_diff(project):
    result = invoke("lint", "-", "--diff", input=BUGGY)
    assert result.exit_code == 1
    assert "+    scaler.unscale_(optimizer)" in result.stdout


def test_stdin_follows_calls_between_its_own_functions(project):
    source = (
        "import torch\n\n\ndef step(scaler, loss):\n    scaler.scale(loss).backward()\n\n\n"
        "def train(model, loader, scaler):\n    for x in loader:\n"
        '        with torch.autocast("cuda"):\n            step(scaler, model(x))\n'
    )
    result = invoke("lint", "-", "--output-format", "concise", input=source)
    assert "AMP101" in result.stdout


def test_stdin_errors_are_one_line(project):
    result = invoke("lint", "-", input=b"\xff\xfe\x00x")
    assert result.exit_code == 2
    assert "cannot decode" in result.stderr
    assert "Traceback" not in result.output
    result = invoke("lint", "-", "train.py", input=BUGGY)
    assert result.exit_code == 2 and "standard input" in result.stderr


# --- --add-noqa -----------------------------------------------------------------------------


def test_add_noqa_silences_every_finding_and_is_idempotent(project):
    result = invoke("lint", "two.py", "train.py", "--add-noqa")
    assert result.exit_code == 0
    assert "Added 3 noqa directives." in result.stderr
    text = (project / "two.py").read_text(encoding="utf-8")
    assert "            scaler.scale(loss).backward()  # noqa: AMP101\n" in text
    assert "clip_grad_norm_(model.parameters(), 1.0)  # noqa: AMP201\n" in text
    assert invoke("lint", "two.py", "train.py").exit_code == 0
    again = invoke("lint", "two.py", "train.py", "--add-noqa")
    assert "Added 0 noqa directives." in again.stderr
    assert (project / "two.py").read_text(encoding="utf-8") == text


def test_add_noqa_extends_an_existing_directive_and_keeps_comments(project):
    source = BUGGY.replace(
        "clip_grad_norm_(model.parameters(), 1.0)", "clip_grad_norm_(model.parameters(), 1.0)  # noqa: E501"
    ).replace("    scaler.step(optimizer)", "    scaler.step(optimizer)")
    (project / "train.py").write_text(source, encoding="utf-8")
    invoke("lint", "train.py", "--add-noqa")
    assert "1.0)  # noqa: E501, AMP201\n" in (project / "train.py").read_text(encoding="utf-8")
    commented = BUGGY.replace("1.0)\n", "1.0)  # keep the norm small\n")
    (project / "train.py").write_text(commented, encoding="utf-8")
    invoke("lint", "train.py", "--add-noqa")
    assert "1.0)  # keep the norm small  # noqa: AMP201\n" in (project / "train.py").read_text(encoding="utf-8")


def test_add_noqa_keeps_line_endings(project):
    (project / "train.py").write_bytes(BUGGY.replace("\n", "\r\n").encode())
    invoke("lint", "train.py", "--add-noqa")
    data = (project / "train.py").read_bytes()
    assert b"1.0)  # noqa: AMP201\r\n" in data and b"\n" not in data.replace(b"\r\n", b"")


def test_add_noqa_leaves_a_line_that_ends_inside_a_string():
    from ampdoctor.lint.add_noqa import with_directives

    source = 'x = f("""\n  text\n""")\ny = 1\n'
    text, added, skipped = with_directives(source, {1: ["AMP105"], 4: ["AMP103"]})
    assert (added, skipped) == (1, 1)
    assert text == 'x = f("""\n  text\n""")\ny = 1  # noqa: AMP103\n'


def test_add_noqa_refuses_fix(project):
    result = invoke("lint", "train.py", "--add-noqa", "--fix")
    assert result.exit_code == 2 and "--add-noqa" in result.stderr


# --- the file-level directive -------------------------------------------------------------------


def test_file_level_noqa_silences_the_whole_file(project):
    (project / "train.py").write_text("# ampdoctor: noqa\n" + BUGGY, encoding="utf-8")
    result = invoke("lint", "train.py", "--show-suppressed")
    assert result.exit_code == 0
    assert "1 suppressed" in result.stdout


def test_file_level_noqa_with_codes_silences_only_those(project):
    (project / "two.py").write_text(TWO + "# ampdoctor: noqa: AMP201\n", encoding="utf-8")
    result = invoke("lint", "two.py", "--output-format", "concise")
    assert "AMP101" in result.stdout and "AMP201" not in result.stdout


def test_file_level_noqa_must_be_a_comment_of_its_own(project):
    (project / "train.py").write_text(BUGGY + 'NOTE = """\n# ampdoctor: noqa: AMP105\n"""\n', encoding="utf-8")
    (project / "two.py").write_text(TWO.replace("import torch", "import torch  # ampdoctor: noqa"), encoding="utf-8")
    result = invoke("lint", "train.py", "two.py", "--output-format", "concise")
    assert "train.py:8:5: AMP201" in result.stdout
    assert "two.py" in result.stdout


def test_file_level_noqa_silences_the_project_analysis_too(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n", encoding="utf-8")
    (tmp_path / "steps.py").write_text(
        "def backward(scaler, loss):\n    scaler.scale(loss).backward()\n", encoding="utf-8"
    )
    train = (
        "import torch\nfrom steps import backward\n\n\ndef train(model, loader, scaler):\n    for x in loader:\n"
        '        with torch.autocast("cuda"):\n            backward(scaler, model(x))\n'
    )
    (tmp_path / "train.py").write_text(train, encoding="utf-8")
    assert "AMP101" in invoke("lint", ".", "--no-cache", "--output-format", "concise").stdout
    (tmp_path / "train.py").write_text("# ampdoctor: noqa: AMP101\n" + train, encoding="utf-8")
    assert "AMP101" not in invoke("lint", ".", "--no-cache", "--output-format", "concise").stdout


# --- --watch --------------------------------------------------------------------------------


def _read_until(stream, needle: str, deadline: float) -> str:
    seen = ""
    while needle not in seen:
        if time.monotonic() > deadline:
            raise AssertionError(f"{needle!r} not seen in {seen!r}")
        line = stream.readline()
        if not line:
            raise AssertionError(f"the process ended before {needle!r}: {seen!r}")
        seen += line
    return seen


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
def test_watch_lints_again_after_a_change_and_stops_on_ctrl_c(project):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "ampdoctor", "lint", "train.py", "--watch", "--output-format", "concise"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        # Ctrl-C heard as in a terminal, even where the suite runs with SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 60
        first = _read_until(process.stdout, "Found 1 problem", deadline)
        assert "Starting linter in watch mode" in first and "AMP201" in first
        time.sleep(0.1)
        (project / "train.py").write_text(CLEAN, encoding="utf-8")
        second = _read_until(process.stdout, "All checks passed!", deadline)
        assert "File change detected" in second
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_watch_keeps_nothing_to_an_end(project, monkeypatch):
    # The console command that lints and ends leaves a large module's tree to the process's end
    # (lint/gc_budget.py); a watch goes on, so each of its runs frees what it made.
    from ampdoctor.lint import gc_budget, watch
    from ampdoctor.lint.lint_command import run_lint

    monkeypatch.setattr(gc_budget, "_ending", True)
    monkeypatch.setattr(watch, "watch", lambda once, files: 0)
    monkeypatch.chdir(project)
    assert run_lint(paths=[project / "train.py"], watch=True) == 0
    assert gc_budget._ending is False


def test_watch_refuses_fix(project):
    result = invoke("lint", "train.py", "--watch", "--fix")
    assert result.exit_code == 2 and "--watch" in result.stderr


# --- help text ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("code", "word"), [("AMP201", "safe"), ("AMP101", "unsafe"), ("AMP102", "no")])
def test_rule_page_says_fixable_in_the_words_of_the_rules_list(code, word):
    page = invoke("rule", code).stdout.splitlines()[0]
    listed = next(line for line in invoke("rules").stdout.splitlines() if line.startswith(code)).split()
    assert listed[3] == word
    assert f"fixable: {word}" in page


def test_lint_help_says_what_always_exits_two_and_where_exclude_applies():
    text = " ".join(invoke("lint", "--help").stdout.split())
    assert "(AMP000) always makes it 2" in text
    assert "applies to files named on the command line too" in text
