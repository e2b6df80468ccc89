"""Each file's nearest configuration, standalone files, ``extend`` and inline ``--config``."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ampdoctor.cli import main
from ampdoctor.config import matches_glob
from ampdoctor.lint import engine

# AMP201 (clipping scaled gradients) and AMP401 (the deprecated torch.cuda.amp scaler).
BUGGY = """\
import torch
scaler = torch.cuda.amp.GradScaler()
for x in data:
    with torch.autocast("cuda"):
        loss = model(x)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
"""


def lint(*args: str):
    return CliRunner().invoke(main, ["lint", "--output-format", "concise", *args], catch_exceptions=False)


def codes_by_file(output: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for line in output.splitlines():
        parts = line.split(": ")
        if len(parts) > 1 and parts[1].startswith("AMP"):
            found.setdefault(parts[0].rsplit(":", 2)[0], set()).add(parts[1].split()[0])
    return found


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def two_projects(tmp_path, monkeypatch):
    """A parent project selecting AMP4 with two sub-projects: ``a`` selects AMP2, ``b`` AMP4."""
    write(tmp_path / "pyproject.toml", "[tool.ampdoctor]\nselect = ['AMP4']\n")
    write(tmp_path / "top.py", BUGGY)
    write(tmp_path / "a" / "pyproject.toml", "[project]\nname = 'a'\n[tool.ampdoctor]\nselect = ['AMP2']\n")
    write(tmp_path / "a" / "t.py", BUGGY)
    write(tmp_path / "b" / "pyproject.toml", "[tool.ampdoctor]\nselect = ['AMP401']\n")
    write(tmp_path / "b" / "t.py", BUGGY)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("order", [("a/t.py", "b/t.py"), ("b/t.py", "a/t.py")])
def test_each_file_gets_its_own_folders_configuration(two_projects, order):
    found = codes_by_file(lint("--no-cache", *order).output)
    assert found == {"a/t.py": {"AMP201"}, "b/t.py": {"AMP401"}}


def test_a_walk_applies_each_sub_projects_configuration(two_projects):
    found = codes_by_file(lint("--no-cache", ".").output)
    assert found == {"a/t.py": {"AMP201"}, "b/t.py": {"AMP401"}, "top.py": {"AMP401"}}


def test_command_line_options_apply_over_every_configuration(two_projects):
    found = codes_by_file(lint("--no-cache", "--extend-select", "AMP2", ".").output)
    assert found == {"a/t.py": {"AMP201"}, "b/t.py": {"AMP201", "AMP401"}, "top.py": {"AMP201", "AMP401"}}


def test_config_file_and_isolated_override_every_configuration(two_projects):
    write(two_projects / "only2.toml", "select = ['AMP2']\n")
    assert codes_by_file(lint("--no-cache", "--config", "only2.toml", ".").output) == {
        name: {"AMP201"} for name in ("a/t.py", "b/t.py", "top.py")
    }
    assert codes_by_file(lint("--no-cache", "--isolated", ".").output) == {
        name: {"AMP201", "AMP401"} for name in ("a/t.py", "b/t.py", "top.py")
    }


def test_per_file_ignores_exclude_and_fail_on_are_the_sub_projects(two_projects):
    write(
        two_projects / "a" / "pyproject.toml",
        "[tool.ampdoctor]\nselect = ['AMP2', 'AMP4']\nexclude = ['skip/*']\n"
        "[tool.ampdoctor.per-file-ignores]\n'tests/*' = ['AMP2']\n",
    )
    write(two_projects / "a" / "skip" / "x.py", BUGGY)
    write(two_projects / "a" / "tests" / "test_t.py", BUGGY)
    write(two_projects / "tests" / "test_t.py", BUGGY)  # the parent's tests/: not a's
    found = codes_by_file(lint("--no-cache", ".").output)
    assert found["a/tests/test_t.py"] == {"AMP401"}
    assert found["a/t.py"] == {"AMP201", "AMP401"}
    assert "a/skip/x.py" not in found
    assert found["tests/test_t.py"] == {"AMP401"}
    # c's fail-on is error: its warnings (AMP401) alone do not fail the run; b's do.
    write(two_projects / "c" / "ampdoctor.toml", "select = ['AMP4']\nfail-on = 'error'\n")
    write(two_projects / "c" / "t.py", BUGGY)
    assert lint("--no-cache", "c/t.py").exit_code == 0
    assert lint("--no-cache", "c/t.py", "b/t.py").exit_code == 1


def test_a_sub_projects_broken_configuration_is_one_line(two_projects):
    write(two_projects / "b" / "pyproject.toml", "[tool.ampdoctor]\nselect = ['AMP9']\n")
    result = lint("--no-cache", ".")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "ampdoctor: error: b/pyproject.toml: tool.ampdoctor.select: unknown rule code or prefix 'AMP9'"
    ]


@pytest.mark.parametrize("name", ["ampdoctor.toml", ".ampdoctor.toml"])
def test_a_standalone_file_comes_before_pyproject(tmp_path, monkeypatch, name):
    write(tmp_path / "pyproject.toml", "[tool.ampdoctor]\nselect = ['AMP4']\n")
    write(tmp_path / name, "select = ['AMP2']\n")
    write(tmp_path / "t.py", BUGGY)
    monkeypatch.chdir(tmp_path)
    assert codes_by_file(lint("--no-cache", "t.py").output) == {"t.py": {"AMP201"}}


def test_dot_ampdoctor_toml_comes_first(tmp_path, monkeypatch):
    write(tmp_path / ".ampdoctor.toml", "select = ['AMP4']\n")
    write(tmp_path / "ampdoctor.toml", "select = ['AMP2']\n")
    write(tmp_path / "t.py", BUGGY)
    monkeypatch.chdir(tmp_path)
    assert codes_by_file(lint("--no-cache", "t.py").output) == {"t.py": {"AMP401"}}
    # A file that holds only a [tool.ampdoctor] table is read as a pyproject.toml would be.
    write(tmp_path / ".ampdoctor.toml", "[tool.ampdoctor]\nselect = ['AMP2']\n")
    assert codes_by_file(lint("--no-cache", "t.py").output) == {"t.py": {"AMP201"}}
    write(tmp_path / ".ampdoctor.toml", "select = ['AMP2']\n[tool.ampdoctor]\nselect = ['AMP2']\n")
    result = lint("--no-cache", "t.py")
    assert result.exit_code == 2 and "ampdoctor: error: .ampdoctor.toml: tool: unknown key" in result.output


def test_a_nearer_pyproject_without_our_table_is_passed_over(tmp_path, monkeypatch):
    write(tmp_path / "ampdoctor.toml", "select = ['AMP2']\n")
    write(tmp_path / "pkg" / "pyproject.toml", "[project]\nname = 'pkg'\n")
    write(tmp_path / "pkg" / "t.py", BUGGY)
    monkeypatch.chdir(tmp_path)
    assert codes_by_file(lint("--no-cache", "pkg/t.py").output) == {"pkg/t.py": {"AMP201"}}


def test_extend_with_paths_relative_to_the_base(tmp_path, monkeypatch):
    write(
        tmp_path / "pyproject.toml",
        "[tool.ampdoctor]\nselect = ['AMP2', 'AMP4']\nexclude = ['sub/gen/*']\n"
        "[tool.ampdoctor.per-file-ignores]\n'**/legacy_*.py' = ['AMP4']\n",
    )
    write(
        tmp_path / "sub" / "ampdoctor.toml", "extend = '../pyproject.toml'\nextend-select = []\nignore = ['AMP201']\n"
    )
    write(tmp_path / "sub" / "t.py", BUGGY)
    write(tmp_path / "sub" / "legacy_t.py", BUGGY)
    write(tmp_path / "sub" / "gen" / "t.py", BUGGY)
    monkeypatch.chdir(tmp_path)
    found = codes_by_file(lint("--no-cache", "sub").output)
    assert found == {"sub/t.py": {"AMP401"}}  # AMP201 ignored here; legacy_ ignores AMP4; gen excluded
    monkeypatch.chdir(tmp_path / "sub")
    assert codes_by_file(lint("--no-cache", ".").output) == {"t.py": {"AMP401"}}


def test_a_select_in_the_extending_file_starts_afresh(tmp_path, monkeypatch):
    write(tmp_path / "base.toml", "select = ['AMP4']\nignore = ['AMP401']\n")
    write(tmp_path / "ampdoctor.toml", "extend = 'base.toml'\nselect = ['AMP2', 'AMP4']\n")
    write(tmp_path / "t.py", BUGGY)
    monkeypatch.chdir(tmp_path)
    assert codes_by_file(lint("--no-cache", "t.py").output) == {"t.py": {"AMP201", "AMP401"}}


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"ampdoctor.toml": "extend = 'ampdoctor.toml'\n"}, "extend: the configurations extend each other in a cycle"),
        (
            {"ampdoctor.toml": "extend = 'b.toml'\n", "b.toml": "extend = 'ampdoctor.toml'\n"},
            "extend: the configurations extend each other in a cycle",
        ),
        ({"ampdoctor.toml": "extend = 'missing.toml'\n"}, "ampdoctor.toml: extend: no such file: missing.toml"),
        ({"ampdoctor.toml": "extend = 3\n"}, "ampdoctor.toml: extend: expected the path"),
        ({"ampdoctor.toml": "extend = 'b.toml'\n", "b.toml": "selct = []\n"}, "b.toml: selct: unknown key"),
    ],
)
def test_bad_extend_is_one_line(tmp_path, monkeypatch, files, message):
    for name, text in files.items():
        write(tmp_path / name, text)
    write(tmp_path / "t.py", BUGGY)
    monkeypatch.chdir(tmp_path)
    result = lint("t.py")
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith("ampdoctor: error: ") and message in line


def test_double_star_slash_matches_zero_folders():
    assert matches_glob("tests/test_b.py", "tests/**/*.py")
    assert matches_glob("tests/unit/deep/test_b.py", "tests/**/*.py")
    assert matches_glob("test_b.py", "**/test_*.py")
    assert matches_glob("a/b/c/d.py", "a/**/c/**/d.py")
    assert matches_glob("a/c/d.py", "a/**/c/**/d.py")
    assert not matches_glob("src/test_b.py", "tests/**/*.py")
    assert not matches_glob("tests/test_b.txt", "tests/**/*.py")


def test_per_file_ignores_with_double_star_through_the_cli(tmp_path, monkeypatch):
    write(tmp_path / "ampdoctor.toml", "[per-file-ignores]\n'tests/**/*.py' = ['AMP2']\n")
    write(tmp_path / "tests" / "test_b.py", BUGGY)
    monkeypatch.chdir(tmp_path)
    assert codes_by_file(lint("--no-cache", ".").output) == {"tests/test_b.py": {"AMP401"}}


def test_inline_config_overrides(two_projects):
    found = codes_by_file(lint("--no-cache", "--config", "select = ['AMP2']", ".").output)
    assert found == {name: {"AMP201"} for name in ("a/t.py", "b/t.py", "top.py")}
    # repeated, and combined with a file
    write(two_projects / "strict.toml", "select = ['AMP4']\n")
    result = lint("--no-cache", "--config", "strict.toml", "--config", "extend-select = ['AMP201']", "b/t.py")
    assert codes_by_file(result.output) == {"b/t.py": {"AMP201", "AMP401"}}
    result = lint("--no-cache", "--config", "ignore = ['AMP401']", "--config", "fail-on = 'error'", "b/t.py")
    assert result.exit_code == 0 and codes_by_file(result.output) == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("select = [", "--config: 'select = [' is neither a file nor a TOML 'KEY = VALUE' override"),
        ("selct = ['AMP2']", "--config selct: unknown key"),
        ("select = 'AMP2'", "--config select: expected a list of strings"),
        ("select = ['AMP9']", "--config select: unknown rule code or prefix 'AMP9'"),
        ("nope.toml", "config file not found: nope.toml"),
    ],
)
def test_bad_inline_config_is_one_line(two_projects, value, message):
    result = lint("--config", value, "top.py")
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line == f"ampdoctor: error: {message}" or (line.startswith("ampdoctor: error: ") and message in line)


def test_two_config_files_are_refused(two_projects):
    write(two_projects / "x.toml", "select = ['AMP2']\n")
    result = lint("--config", "x.toml", "--config", "pyproject.toml", "top.py")
    assert result.exit_code == 2 and "--config names one configuration file" in result.output


def test_trace_codes_are_accepted_and_select_nothing_lint_runs(tmp_path, monkeypatch):
    write(tmp_path / "t.py", BUGGY)
    monkeypatch.chdir(tmp_path)
    assert lint("--no-cache", "--select", "AMP501", "t.py").exit_code == 0
    write(tmp_path / "ampdoctor.toml", "ignore = ['AMP501', 'AMP5']\n")
    assert codes_by_file(lint("--no-cache", "t.py").output) == {"t.py": {"AMP201", "AMP401"}}
    assert lint("--select", "AMP599x", "t.py").exit_code == 2


def test_changing_a_sub_projects_configuration_lints_only_its_files_again(two_projects, monkeypatch):
    assert lint(".").exit_code == 1  # fills the cache
    linted: list[str] = []
    real = engine.lint_file

    def record(path, *args, **kwargs):
        linted.append(Path(path).as_posix())
        return real(path, *args, **kwargs)

    monkeypatch.setattr(engine, "lint_file", record)
    assert codes_by_file(lint(".").output)["b/t.py"] == {"AMP401"}
    assert linted == []
    write(two_projects / "b" / "pyproject.toml", "[tool.ampdoctor]\nselect = ['AMP2']\n")
    assert codes_by_file(lint(".").output)["b/t.py"] == {"AMP201"}
    assert linted == ["b/t.py"]


def test_isolated_ignores_standalone_files_and_extend(tmp_path, monkeypatch):
    write(tmp_path / "ampdoctor.toml", "extend = 'missing.toml'\n")
    write(tmp_path / "t.py", BUGGY)
    monkeypatch.chdir(tmp_path)
    result = lint("--no-cache", "--isolated", "t.py")
    assert result.exit_code == 1 and codes_by_file(result.output) == {"t.py": {"AMP201", "AMP401"}}
