"""Every lint CLI path through click's runner (the installed entry point: test_entry_point.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from samples import CLIP_BEFORE_UNSCALE as BUGGY
from samples import UNSCALE_THEN_CLIP as CLEAN

from ampdoctor import __version__
from ampdoctor.cli import main


def invoke(*args, cwd: Path | None = None, env=None):
    runner = CliRunner()
    if cwd is None:
        return runner.invoke(main, list(args), env=env, catch_exceptions=False)
    with runner.isolated_filesystem(temp_dir=cwd):
        return runner.invoke(main, list(args), env=env, catch_exceptions=False)


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "train.py").write_text(BUGGY, encoding="utf-8")
    (tmp_path / "clean.py").write_text(CLEAN, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_version_and_help():
    assert invoke("--version").output.strip() == f"ampdoctor, version {__version__}"
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("lint", "rules", "rule"):
        assert command in result.output


def test_text_report_ruff_style(project):
    result = invoke("lint", "train.py")
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0].startswith("train.py:8:5: AMP201 gradients are clipped")
    assert "8 |     torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)" in result.output
    assert "^^^^" in result.output
    assert "help: Insert `scaler.unscale_(optimizer)` before the clip" in result.output
    assert "Found 1 problem (1 fixable with --fix)." in result.output
    assert "ampdoctor rule AMP201" in result.output
    assert "\x1b[" not in result.output  # not a terminal: no colour


def test_clean_file_exits_zero(project):
    result = invoke("lint", "clean.py")
    assert result.exit_code == 0
    assert "All checks passed!" in result.output


def test_default_path_is_the_current_folder(project):
    result = invoke("lint", "--output-format", "concise")
    assert result.exit_code == 1
    assert result.output.startswith("train.py:8:5: AMP201")


def test_json_is_the_documented_interface(project):
    result = invoke("lint", "--output-format", "json", "train.py")
    data = json.loads(result.output)
    assert len(data) == 1
    item = data[0]
    for key in ("code", "severity", "message", "path", "line", "column", "end_line", "end_column", "fix", "cell"):
        assert key in item
    assert (item["code"], item["severity"], item["path"], item["line"], item["column"]) == (
        "AMP201",
        "error",
        "train.py",
        8,
        5,
    )
    assert item["end_line"] == 8 and item["end_column"] == 60
    assert item["cell"] is None
    assert item["fix"]["applicability"] == "safe"
    assert item["fix"]["edits"] == [
        {"line": 8, "column": 1, "end_line": 8, "end_column": 1, "content": "    scaler.unscale_(optimizer)\n"}
    ]


def test_sarif_and_github_formats(project):
    sarif = json.loads(invoke("lint", "--output-format", "sarif", "train.py").output)
    assert sarif["version"] == "2.1.0"
    run = sarif["runs"][0]
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == ["AMP201"]
    assert run["results"][0]["locations"][0]["physicalLocation"]["region"]["startLine"] == 8
    github = invoke("lint", "--output-format", "github", "train.py").output
    assert github.startswith("::error file=train.py,line=8,col=5,")


def test_output_file(project):
    result = invoke("lint", "--output-format", "json", "-o", "report.json", "train.py")
    assert result.exit_code == 1
    assert json.loads((project / "report.json").read_text())[0]["code"] == "AMP201"


def test_fail_on_threshold(project):
    (project / "warn.py").write_text("import torch\nscaler = torch.cuda.amp.GradScaler()\n", encoding="utf-8")
    assert invoke("lint", "warn.py").exit_code == 1
    assert invoke("lint", "--fail-on", "error", "warn.py").exit_code == 0
    assert invoke("lint", "--fail-on", "info", "warn.py").exit_code == 1


def test_select_ignore_and_prefixes(project):
    assert invoke("lint", "--ignore", "AMP201", "train.py").exit_code == 0
    assert invoke("lint", "--ignore", "AMP2", "train.py").exit_code == 0
    assert invoke("lint", "--select", "AMP1", "train.py").exit_code == 0
    assert invoke("lint", "--select", "AMP1", "--extend-select", "AMP201", "train.py").exit_code == 1
    # The more specific code wins over the prefix.
    assert invoke("lint", "--ignore", "AMP2", "--select", "AMP201", "train.py").exit_code == 1
    assert invoke("lint", "--select", "AMP101,AMP201", "train.py").exit_code == 1


def test_unknown_code_is_a_usage_error(project):
    result = invoke("lint", "--select", "AMP9", "train.py")
    assert result.exit_code == 2
    assert result.output.strip() == "ampdoctor: error: --select: unknown rule code or prefix 'AMP9'"


def test_missing_path_is_a_usage_error(project):
    result = invoke("lint", "nowhere.py")
    assert result.exit_code == 2
    assert "no such file or folder: nowhere.py" in result.output


def test_unparsable_file_reports_amp000_and_other_files_still_checked(project):
    (project / "broken.py").write_text("import torch\nwith torch.autocast('cuda')\n    pass\n", encoding="utf-8")
    result = invoke("lint", "--output-format", "concise", ".")
    assert result.exit_code == 2
    assert "broken.py:2:28: AMP000 [error] cannot parse: expected ':'" in result.output
    assert "train.py:8:5: AMP201" in result.output


def test_non_utf8_file_is_amp000(project):
    (project / "latin.py").write_bytes(b"# autocast\nname = '\xe9t\xe9'\n")
    result = invoke("lint", "--output-format", "concise", "latin.py")
    assert result.exit_code == 2
    assert "AMP000" in result.output and "UTF-8" in result.output


def test_declared_encoding_is_honoured(project):
    (project / "latin.py").write_bytes(b"# -*- coding: latin-1 -*-\n# autocast\nname = '\xe9t\xe9'\n")
    assert invoke("lint", "latin.py").exit_code == 0


def test_fix_writes_and_diff_does_not(project):
    diff = invoke("lint", "--diff", "train.py")
    assert diff.exit_code == 1
    assert "+    scaler.unscale_(optimizer)" in diff.output
    assert (project / "train.py").read_text() == BUGGY
    fixed = invoke("lint", "--fix", "train.py")
    assert fixed.exit_code == 0, fixed.output
    assert "Fixed 1 problem" in fixed.output
    assert (project / "train.py").read_text() == CLEAN
    assert invoke("lint", "--diff", "train.py").exit_code == 0


def test_fix_keeps_file_mode(project):
    path = project / "train.py"
    path.chmod(0o640)
    invoke("lint", "--fix", "train.py")
    assert path.stat().st_mode & 0o777 == 0o640
    assert not [p for p in project.iterdir() if p.name.startswith(".train.py")]


def test_show_suppressed(project):
    text = BUGGY.replace("1.0)\n", "1.0)  # noqa: AMP201\n")
    (project / "train.py").write_text(text, encoding="utf-8")
    result = invoke("lint", "--show-suppressed", "train.py")
    assert result.exit_code == 0
    assert "1 suppressed" in result.output


def test_exclude_option(project):
    (project / "sub").mkdir()
    (project / "sub" / "more.py").write_text(BUGGY, encoding="utf-8")
    result = invoke("lint", "--output-format", "concise", "--exclude", "sub", "--exclude", "train.py", ".")
    assert result.exit_code == 0, result.output


def test_no_color_env_and_forced_color(project):
    coloured = invoke("lint", "train.py", env={"FORCE_COLOR": "1", "NO_COLOR": ""})
    assert "\x1b[" in coloured.output
    plain = invoke("lint", "train.py", env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert "\x1b[" not in plain.output


def test_rules_listing_and_rule_page():
    listing = invoke("rules")
    assert listing.exit_code == 0
    assert "AMP201" in listing.output and "clip-before-unscale" in listing.output
    from ampdoctor.catalog import all_rules

    lines = listing.output.splitlines()
    assert len(lines) == len(all_rules()), "piped: one unwrapped line per rule"
    assert lines[0].startswith("AMP000") and lines[0].endswith("so it was not checked.")
    data = json.loads(invoke("rules", "--output-format", "json").output)
    entry = next(r for r in data if r["code"] == "AMP201")
    assert entry == {
        "code": "AMP201",
        "name": "clip-before-unscale",
        "severity": "error",
        "fixable": "safe",
        "origin": "lint",
        "summary": entry["summary"],
    }
    page = invoke("rule", "AMP201")
    assert page.exit_code == 0
    assert "What it does" in page.output and "scaler.unscale_(optimizer)" in page.output
    by_name = invoke("rule", "clip-before-unscale")
    assert by_name.output == page.output
    # Piped: the page's text, without padding to a console width or the tests' markers.
    assert not [line for line in page.output.splitlines() if line != line.rstrip()]
    assert "# expect" not in page.output and "```python\n" in page.output


def test_unknown_rule_page():
    result = invoke("rule", "AMP999")
    assert result.exit_code == 2
    assert "unknown rule 'AMP999'" in result.output
