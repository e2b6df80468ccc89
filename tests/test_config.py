"""[tool.ampdoctor] discovery, validation and per-file ignores."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ampdoctor.cli import main
from ampdoctor.config import ConfigError, Settings, find_config, load_settings, matches_glob
from ampdoctor.lint import known_codes

BUGGY = """\
import torch
scaler = torch.amp.GradScaler("cuda")
for x in data:
    with torch.autocast("cuda"):
        loss = model(x)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
"""


def write_project(root: Path, table: str) -> None:
    (root / "pyproject.toml").write_text(f"[project]\nname = 'demo'\n\n[tool.ampdoctor]\n{table}\n", encoding="utf-8")
    (root / "src").mkdir()
    (root / "src" / "train.py").write_text(BUGGY, encoding="utf-8")
    (root / "tests").mkdir()
    (root / "tests" / "test_train.py").write_text(BUGGY, encoding="utf-8")


def lint(root: Path, *args: str):
    return CliRunner().invoke(main, ["lint", "--output-format", "concise", *args], catch_exceptions=False)


def test_config_found_by_walking_up(tmp_path, monkeypatch):
    write_project(tmp_path, 'ignore = ["AMP201"]')
    monkeypatch.chdir(tmp_path / "src")
    assert find_config(Path("train.py")) == (tmp_path / "pyproject.toml").resolve()
    assert lint(tmp_path, "train.py").exit_code == 0
    assert lint(tmp_path, "--isolated", "train.py").exit_code == 1


def test_per_file_ignores_and_exclude(tmp_path, monkeypatch):
    write_project(tmp_path, '[tool.ampdoctor.per-file-ignores]\n"tests/*" = ["AMP2"]')
    monkeypatch.chdir(tmp_path)
    result = lint(tmp_path, ".")
    assert "src/train.py:7:5: AMP201" in result.output
    assert "tests/" not in result.output


def test_exclude_in_config_applies_to_explicit_files_too(tmp_path, monkeypatch):
    write_project(tmp_path, 'exclude = ["tests/**"]')
    monkeypatch.chdir(tmp_path)
    assert "tests/" not in lint(tmp_path, ".").output
    assert lint(tmp_path, "tests/test_train.py").exit_code == 0


def test_fail_on_from_config(tmp_path, monkeypatch):
    write_project(tmp_path, 'fail-on = "error"\nselect = ["AMP4"]')
    (tmp_path / "src" / "old.py").write_text("import torch\ns = torch.cuda.amp.GradScaler()\n")
    monkeypatch.chdir(tmp_path)
    result = lint(tmp_path, "src/old.py")
    assert "AMP401" in result.output and result.exit_code == 0


def test_explicit_config_file(tmp_path, monkeypatch):
    write_project(tmp_path, "")
    other = tmp_path / "strict.toml"
    other.write_text('[tool.ampdoctor]\nselect = ["AMP1"]\n', encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert lint(tmp_path, "--config", str(other), "src/train.py").exit_code == 0
    missing = lint(tmp_path, "--config", "nope.toml", "src/train.py")
    assert missing.exit_code == 2 and "config file not found: nope.toml" in missing.output


@pytest.mark.parametrize(
    "table, message",
    [
        ("selct = ['AMP1']", "tool.ampdoctor.selct: unknown key"),
        ("select = ['AMP9']", "tool.ampdoctor.select: unknown rule code or prefix 'AMP9'"),
        ("select = 'AMP1'", "tool.ampdoctor.select: expected a list of strings"),
        ("fail-on = 'fatal'", "tool.ampdoctor.fail-on: unknown severity 'fatal'"),
        ("fail-on = 3", "tool.ampdoctor.fail-on: expected a string"),
        ("respect-gitignore = 'yes'", "tool.ampdoctor.respect-gitignore: expected true or false"),
        ("per-file-ignores = ['x']", "tool.ampdoctor.per-file-ignores: expected a table"),
        ("[tool.ampdoctor.per-file-ignores]\n'a/*' = ['AMP77']", "unknown rule code or prefix 'AMP77'"),
        ("select = [", "invalid TOML in"),
        ("extend-select = ['AMP1', 2]", "tool.ampdoctor.extend-select: expected a list of strings"),
        ("extend-select = ['NOPE']", "tool.ampdoctor.extend-select: unknown rule code or prefix 'NOPE'"),
        ("ignore = 'AMP1'", "tool.ampdoctor.ignore: expected a list of strings"),
        ("ignore = ['AMP1x']", "tool.ampdoctor.ignore: unknown rule code or prefix 'AMP1x'"),
        ("exclude = 'third_party'", "tool.ampdoctor.exclude: expected a list of strings"),
        ("extend-exclude = [1]", "tool.ampdoctor.extend-exclude: expected a list of strings"),
        (
            "per-file-ignores = { 'a/*' = 'AMP1' }",
            "tool.ampdoctor.per-file-ignores.'a/*': expected a list of rule codes",
        ),
        ("respect-gitignore = 1", "tool.ampdoctor.respect-gitignore: expected true or false"),
        ("fail-on = ['error']", "tool.ampdoctor.fail-on: expected a string"),
        ("[tool.ampdoctor.select]\nx = 1", "tool.ampdoctor.select: expected a list of strings"),
        ("select = ['AMP1']\nselect = ['AMP2']", "(at line 6, column 18)"),
        ("select = ['AMP1'\nfail-on = 'error'", "Unclosed array (at line 6, column 1)"),
        ("select = ['AMP1'", "Unclosed array (at end of document)"),
    ],
)
def test_bad_config_is_one_line_exit_2(tmp_path, monkeypatch, table, message):
    write_project(tmp_path, table)
    monkeypatch.chdir(tmp_path)
    result = lint(tmp_path, "src/train.py")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ampdoctor: error: ")
    assert message in lines[0]


def test_selection_specificity():
    settings = Settings(select=("AMP",), ignore=("AMP2",), extend_select=("AMP201",))
    enabled = settings.enabled_codes(known_codes())
    assert "AMP201" in enabled and "AMP202" not in enabled and "AMP101" in enabled
    assert "AMP000" in Settings(select=("AMP1",)).enabled_codes(known_codes())


def test_glob_matching():
    assert matches_glob("tests/unit/test_x.py", "tests/*")
    assert matches_glob("tests/unit/test_x.py", "tests/**")
    assert matches_glob("pkg/legacy/old.py", "legacy")
    assert matches_glob("a/b/c.py", "*.py")
    assert not matches_glob("src/train.py", "tests/*")


def test_load_settings_reports_the_file(tmp_path):
    path = tmp_path / "pyproject.toml"
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_settings(path, known_codes())


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("tool = 'ampdoctor'\n", None),  # not our table: the defaults apply
        ("[tool]\nampdoctor = 3\n", "tool.ampdoctor in {path} must be a table"),
        ("[tool]\nampdoctor = ['select']\n", "tool.ampdoctor in {path} must be a table"),
        (
            "[tool.ampdoctor\nselect = []\n",
            "invalid TOML in {path}: Expected ']' at the end of a table declaration (at line 1, column 16)",
        ),
        ("[tool.ampdoctor]\nselect = ['AMP1']\u00a0\n", "invalid TOML in {path}: "),
    ],
)
def test_whole_document_errors_are_one_line(tmp_path, monkeypatch, capsys, document, message):
    """Through the plain entry point too: what a pre-commit hook shows."""
    from ampdoctor.entry import main as entry

    (tmp_path / "pyproject.toml").write_text(document, encoding="utf-8")
    (tmp_path / "train.py").write_text(BUGGY, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit:
        entry(["lint", "train.py"])
    err = capsys.readouterr().err
    if message is None:
        assert exit.value.code == 1 and err == ""
        return
    assert exit.value.code == 2
    assert err.count("\n") == 1 and err.startswith("ampdoctor: error: ")
    assert message.format(path=tmp_path / "pyproject.toml") in err


def test_a_config_named_with_a_non_table_tool_is_one_line(tmp_path):
    path = tmp_path / "pyproject.toml"
    path.write_text("tool = ['ampdoctor']\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^tool in .*pyproject.toml must be a table$"):
        load_settings(path, known_codes())
