"""An editor's unsaved text linted as its file would be, the project analysis included
(``lint/unsaved.py``, what ``ampdoctor server`` publishes): the other modules come from disk,
this one from the text, and no cache keeps what was made from the text."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ampdoctor.cli import main
from ampdoctor.server.documents import Configurations, lint_text

STEPS = "def backward(scaler, loss):\n    scaler.scale(loss).backward()\n"

TRAIN = """\
import torch
from steps import backward


def train(model, loader, scaler, optimizer):
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x)
{call}
        scaler.step(optimizer)
        scaler.update()
"""
INSIDE = TRAIN.format(call="            backward(scaler, loss)")  # AMP101 through the helper
OUTSIDE = TRAIN.format(call="        backward(scaler, loss)")


def project(tmp_path: Path, train: str) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n", encoding="utf-8")
    (tmp_path / "steps.py").write_text(STEPS, encoding="utf-8")
    (tmp_path / "train.py").write_text(train, encoding="utf-8")
    return tmp_path / "train.py"


def codes(outcome) -> list[tuple[str, int]]:
    return [(f.code, f.location.line) for f in outcome.findings]


def cli_codes(root: Path, monkeypatch) -> list[str]:
    monkeypatch.chdir(root)
    result = CliRunner().invoke(main, ["lint", ".", "--output-format", "concise", "-q"], catch_exceptions=False)
    return [line.split()[1] for line in result.stdout.splitlines()]


def test_the_unsaved_text_is_linted_with_the_other_modules_from_disk(tmp_path):
    path = project(tmp_path, OUTSIDE)  # on disk: clean
    assert codes(lint_text(INSIDE, str(path), Configurations())) == [("AMP101", 9)]
    assert codes(lint_text(OUTSIDE, str(path), Configurations())) == []


def test_what_was_made_from_the_text_is_not_cached_for_the_file(tmp_path, monkeypatch):
    path = project(tmp_path, OUTSIDE)
    assert cli_codes(tmp_path, monkeypatch) == []  # the caches now know the file on disk
    assert codes(lint_text(INSIDE, str(path), Configurations())) == [("AMP101", 9)]
    assert cli_codes(tmp_path, monkeypatch) == []  # still the file on disk
    path.write_text(INSIDE, encoding="utf-8")
    assert cli_codes(tmp_path, monkeypatch) == ["AMP101"]
    assert codes(lint_text(OUTSIDE, str(path), Configurations())) == []
    assert cli_codes(tmp_path, monkeypatch) == ["AMP101"]


def test_project_false_in_the_configuration_keeps_to_the_text(tmp_path):
    path = project(tmp_path, OUTSIDE)
    (tmp_path / "pyproject.toml").write_text("[tool.ampdoctor]\nproject = false\n", encoding="utf-8")
    assert codes(lint_text(INSIDE, str(path), Configurations())) == []


def test_a_file_the_configuration_excludes_gets_no_diagnostics(tmp_path):
    path = project(tmp_path, OUTSIDE)
    (tmp_path / "generated").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.ampdoctor]\nexclude = ["generated"]\n', encoding="utf-8")
    bad = INSIDE.replace("backward(scaler, loss)", "scaler.scale(loss).backward()")
    assert codes(lint_text(bad, str(tmp_path / "generated" / "train.py"), Configurations())) == []
    assert codes(lint_text(bad, str(path), Configurations())) == [("AMP101", 9)]


def test_a_new_buffer_follows_calls_between_its_own_functions(tmp_path):
    source = STEPS + "\n\n" + INSIDE.replace("from steps import backward\n", "")
    outcome = lint_text(source, str(tmp_path / "new_file.py"), Configurations())  # not on disk
    assert [code for code, _ in codes(outcome)] == ["AMP101"]


def test_standard_input_named_as_a_project_file_is_linted_in_its_project(tmp_path, monkeypatch):
    project(tmp_path, OUTSIDE)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        main, ["lint", "--stdin-filename", "train.py", "--output-format", "concise", "-q"], input=INSIDE
    )
    assert [line.split()[1] for line in result.stdout.splitlines()] == ["AMP101"]
    assert cli_codes(tmp_path, monkeypatch) == []  # the file on disk, as it is
