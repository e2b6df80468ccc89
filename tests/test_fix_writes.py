"""``--fix`` on disk: it writes only text that parses, atomically, in the file's own encoding,
byte-order mark, line endings and mode; it never overwrites a file changed since it was read;
a file it cannot write is one line, and the other files are still fixed."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from ampdoctor.cli import main
from ampdoctor.lint import engine, fix_loop
from ampdoctor.lint.engine import FileResult
from ampdoctor.lint.writing import WriteError, write_result

BUGGY = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
FIXED = 'import torch\nscaler = torch.amp.GradScaler("cuda")\n'


def lint(*args: str):
    result = CliRunner().invoke(main, ["lint", "--isolated", "--no-cache", "--jobs", "1", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("ampdoctor: error:")]


@pytest.fixture
def folder(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".ampdoctor")]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (BUGGY.encode(), FIXED.encode()),
        (BUGGY.replace("\n", "\r\n").encode(), FIXED.replace("\n", "\r\n").encode()),
        (b"\xef\xbb\xbf" + BUGGY.encode(), b"\xef\xbb\xbf" + FIXED.encode()),
        (
            b"\xef\xbb\xbf" + BUGGY.replace("\n", "\r\n").encode(),
            b"\xef\xbb\xbf" + FIXED.replace("\n", "\r\n").encode(),
        ),
        (
            b"# -*- coding: latin-1 -*-\nname = '\xe9t\xe9'\n" + BUGGY.encode(),
            b"# -*- coding: latin-1 -*-\nname = '\xe9t\xe9'\n" + FIXED.encode(),
        ),
        (
            b"# coding: cp1252\r\nq = '\x93'\r\n" + BUGGY.replace("\n", "\r\n").encode(),
            b"# coding: cp1252\r\nq = '\x93'\r\n" + FIXED.replace("\n", "\r\n").encode(),
        ),
        (
            b"import torch\nif True:\n\tscaler = torch.cuda.amp.GradScaler()\n",
            b'import torch\nif True:\n\tscaler = torch.amp.GradScaler("cuda")\n',
        ),
    ],
    ids=["lf", "crlf", "bom", "bom-crlf", "latin-1", "cp1252-crlf", "tabs"],
)
def test_fix_keeps_encoding_bom_and_line_endings_and_is_idempotent(folder, before, after):
    path = folder / "train.py"
    path.write_bytes(before)
    path.chmod(0o751)
    result = lint("--fix", "train.py")
    assert result.exit_code == 0 and "Fixed 1 problem" in result.output, result.output
    assert path.read_bytes() == after
    assert path.stat().st_mode & 0o777 == 0o751
    assert leftovers(folder) == []
    again = lint("--fix", "train.py")
    assert again.exit_code == 0 and "Fixed" not in again.output
    assert path.read_bytes() == after


def test_fix_through_a_symlink_changes_the_file_and_keeps_the_link(folder):
    (folder / "real.py").write_text(BUGGY)
    (folder / "link.py").symlink_to("real.py")
    assert lint("--fix", "link.py").exit_code == 0
    assert (folder / "link.py").is_symlink()
    assert (folder / "real.py").read_text() == FIXED


def _lint_then(monkeypatch, action):
    """Run ``action(path)`` right after each file is linted, before anything is written."""
    real = engine.lint_file

    def lint_then_act(path, *args, **kwargs):
        result = real(path, *args, **kwargs)
        action(Path(path))
        return result

    monkeypatch.setattr(engine, "lint_file", lint_then_act)


def test_a_file_changed_on_disk_after_it_was_read_is_not_overwritten(folder, monkeypatch):
    (folder / "edited.py").write_text(BUGGY)
    (folder / "other.py").write_text(BUGGY)
    edit = BUGGY + "# saved by an editor meanwhile\n"

    def save_in_editor(path: Path):
        if path.name == "edited.py":
            path.write_text(edit)

    _lint_then(monkeypatch, save_in_editor)
    result = lint("--fix", ".")
    assert result.exit_code == 2
    assert error_lines(result.output) == [
        "ampdoctor: error: edited.py: not fixed: changed on disk since it was read; not overwritten"
    ]
    assert (folder / "edited.py").read_text() == edit
    assert (folder / "other.py").read_text() == FIXED
    assert leftovers(folder) == []


def test_a_change_between_the_temporary_file_and_the_rename_is_not_overwritten(folder, monkeypatch):
    """The content is compared again just before the rename, after the new text is on disk."""
    path = folder / "train.py"
    path.write_text(BUGGY)
    real_mkstemp = tempfile.mkstemp

    def mkstemp_while_an_editor_saves(*args, **kwargs):
        created = real_mkstemp(*args, **kwargs)
        path.write_text("# rewritten meanwhile\n")
        return created

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp_while_an_editor_saves)
    result = lint("--fix", "train.py")
    assert result.exit_code == 2
    assert error_lines(result.output) == [
        "ampdoctor: error: train.py: not fixed: changed on disk since it was read; not overwritten"
    ]
    assert path.read_text() == "# rewritten meanwhile\n"
    assert leftovers(folder) == []


def test_a_file_deleted_after_it_was_read_is_reported(folder, monkeypatch):
    (folder / "gone.py").write_text(BUGGY)
    _lint_then(monkeypatch, lambda path: path.unlink())
    result = lint("--fix", "gone.py")
    assert result.exit_code == 2
    assert error_lines(result.output) == ["ampdoctor: error: gone.py: not fixed: No such file or directory"]
    assert not (folder / "gone.py").exists()


@pytest.mark.parametrize("failing", ["mkstemp", "replace"])
def test_a_file_that_cannot_be_written_is_reported_and_the_others_are_fixed(folder, monkeypatch, failing):
    """What a read-only folder does (root writes anyway, so the refusal is simulated): the file
    is left as it was, no temporary file remains, the next file is still fixed."""
    (folder / "a_locked.py").write_text(BUGGY)
    (folder / "b_open.py").write_text(BUGGY)
    real_mkstemp, real_replace = tempfile.mkstemp, os.replace

    def refuse_mkstemp(*args, prefix="", **kwargs):
        if "a_locked" in prefix:
            raise PermissionError(13, "Permission denied")
        return real_mkstemp(*args, prefix=prefix, **kwargs)

    def refuse_replace(source, target):
        if str(target).endswith("a_locked.py"):
            raise PermissionError(13, "Permission denied")
        return real_replace(source, target)

    if failing == "mkstemp":
        monkeypatch.setattr(tempfile, "mkstemp", refuse_mkstemp)
    else:
        monkeypatch.setattr(os, "replace", refuse_replace)
    result = lint("--fix", ".")
    assert result.exit_code == 2
    assert error_lines(result.output) == ["ampdoctor: error: a_locked.py: not fixed: Permission denied"]
    assert (folder / "a_locked.py").read_text() == BUGGY
    assert (folder / "b_open.py").read_text() == FIXED
    assert leftovers(folder) == []


@pytest.mark.parametrize("name", ["a_locked.py", "a_locked.ipynb"])
def test_the_findings_of_a_file_that_cannot_be_written_stay_in_the_report(folder, monkeypatch, name):
    """Not written, so not fixed: the report shows what the file as read still holds, the
    findings with a fix included, at their lines as read."""
    if name.endswith(".ipynb"):
        cells = [{"cell_type": "code", "metadata": {}, "source": BUGGY, "outputs": [], "execution_count": None}]
        (folder / name).write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    else:
        (folder / name).write_text(BUGGY)
    (folder / "b_open.py").write_text(BUGGY)
    real_replace = os.replace

    def refuse_replace(source, target):
        if "a_locked" in str(target):
            raise PermissionError(13, "Permission denied")
        return real_replace(source, target)

    monkeypatch.setattr(os, "replace", refuse_replace)
    result = lint("--fix", "--output-format", "json", ".")
    assert result.exit_code == 2
    items = json.loads(result.stdout)
    assert [(item["path"], item["code"], item["line"]) for item in items] == [(name, "AMP401", 2)]
    assert items[0]["fix"] is not None
    assert (folder / "b_open.py").read_text() == FIXED


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder; the test above simulates it")
def test_a_read_only_folder_is_reported(folder):
    locked = folder / "locked"
    locked.mkdir()
    (locked / "train.py").write_text(BUGGY)
    locked.chmod(0o555)
    try:
        result = lint("--fix", "locked/train.py")
    finally:
        locked.chmod(0o755)
    assert result.exit_code == 2
    assert error_lines(result.output) == ["ampdoctor: error: locked/train.py: not fixed: Permission denied"]
    assert (locked / "train.py").read_text() == BUGGY


def test_a_fix_that_would_not_parse_is_never_written(folder, monkeypatch):
    (folder / "train.py").write_text(BUGGY)
    monkeypatch.setattr(fix_loop, "apply_edits", lambda source, edits: source + "def broken(:\n")
    result = lint("--fix", "train.py")
    assert result.exit_code == 2
    assert error_lines(result.output) == [
        "ampdoctor: error: train.py: a fix produced code that does not parse; nothing was written"
    ]
    assert (folder / "train.py").read_text() == BUGGY


@pytest.mark.parametrize("name", ["train.py", "train.ipynb"])
def test_write_result_itself_refuses_text_that_does_not_parse(tmp_path, name):
    """The last guard, independent of how the text was made."""
    path = tmp_path / name
    if name.endswith(".ipynb"):
        from ampdoctor.lint.notebooks import read_notebook

        text = '{"nbformat": 4, "metadata": {}, "cells": [{"cell_type": "code", "metadata": {}, "source": "x = 1"}]}'
        path.write_text(text)
        result = FileResult(name, source="x = (\n", original="x = 1\n", notebook=(text, read_notebook(text)))
    else:
        path.write_text(BUGGY)
        result = FileResult(name, source="x = (\n", original=BUGGY)
    before = path.read_bytes()
    with pytest.raises(WriteError, match="does not parse"):
        write_result(path, result)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_a_notebook_changed_on_disk_is_not_overwritten(folder, monkeypatch):
    cell = '{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": null, "source": %s}'
    import json

    text = json.dumps(
        {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [json.loads(cell % json.dumps(BUGGY))]}, indent=1
    )
    path = folder / "nb.ipynb"
    path.write_text(text)
    _lint_then(monkeypatch, lambda p: p.write_text(text.replace("import torch", "import torch  # edited")))
    result = lint("--fix", "nb.ipynb")
    assert result.exit_code == 2
    assert "nb.ipynb: not fixed: changed on disk since it was read" in error_lines(result.output)[0]
    assert "# edited" in path.read_text() and "torch.cuda.amp.GradScaler" in path.read_text()
    monkeypatch.undo()
    monkeypatch.chdir(folder)
    path.write_text(text)
    assert lint("--fix", "nb.ipynb").exit_code == 0
    assert 'torch.amp.GradScaler(\\"cuda\\")' in path.read_text()


def test_a_line_a_fix_adds_ends_as_the_file_s_lines_do_cr_included(folder):
    """Classic Mac line endings (CR alone) stay CR: an added line gets one too."""
    body = [
        "import torch",
        'scaler = torch.amp.GradScaler("cuda")',
        "for x in data:",
        '    with torch.autocast("cuda"):',
        "        loss = model(x)",
        "    scaler.scale(loss).backward()",
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
        "    scaler.step(opt)",
        "    scaler.update()",
    ]
    (folder / "train.py").write_bytes(("\r".join(body) + "\r").encode())
    result = lint("--fix", "train.py")
    assert result.exit_code == 0, result.output
    data = (folder / "train.py").read_bytes()
    assert b"\n" not in data
    assert b"\r    scaler.unscale_(opt)\r    torch.nn.utils.clip_grad_norm_" in data


def test_a_hard_linked_file_is_fixed_in_place_and_every_link_sees_it(folder):
    (folder / "train.py").write_text(BUGGY)
    os.link(folder / "train.py", folder / "other_name.py")
    inode = os.stat(folder / "train.py").st_ino
    result = lint("--fix", "train.py")
    assert result.exit_code == 0, result.output
    assert os.stat(folder / "train.py").st_ino == inode
    assert (folder / "other_name.py").read_text() == FIXED
    assert leftovers(folder) == []


def test_a_hard_linked_file_changed_since_it_was_read_is_left_alone(folder, monkeypatch):
    from ampdoctor.lint import writing

    (folder / "train.py").write_text(BUGGY)
    os.link(folder / "train.py", folder / "other_name.py")
    real = writing._write_in_place

    def edit_first(path, data, current):
        (folder / "other_name.py").write_text(BUGGY + "# edited\n")
        return real(path, data, current)

    monkeypatch.setattr(writing, "_write_in_place", edit_first)
    result = lint("--fix", "train.py")
    assert result.exit_code == 2
    assert error_lines(result.output) == [
        "ampdoctor: error: train.py: not fixed: changed on disk since it was read; not overwritten"
    ]
    assert (folder / "train.py").read_text() == BUGGY + "# edited\n"


def test_a_folder_of_links_into_the_package_is_fixed_once(folder):
    (folder / "pkg").mkdir()
    (folder / "pkg" / "train.py").write_text(BUGGY)
    (folder / "links").mkdir()
    (folder / "links" / "train.py").symlink_to(folder / "pkg" / "train.py")
    result = lint("--fix", "pkg", "links")
    assert result.exit_code == 0, result.output
    assert error_lines(result.output) == []
    assert (folder / "pkg" / "train.py").read_text() == FIXED
    assert (folder / "links" / "train.py").is_symlink()
