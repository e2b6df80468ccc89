"""Report files are written whole or not at all (ampdoctor/atomic.py)."""

import errno
import os
import stat

import pytest

from ampdoctor import atomic
from ampdoctor.atomic import write_atomic, write_text_atomic


def test_writes_the_text(tmp_path):
    target = tmp_path / "report.json"
    write_text_atomic(target, '{"ok": true}\n')
    assert target.read_text() == '{"ok": true}\n'
    assert os.listdir(tmp_path) == ["report.json"]


@pytest.mark.parametrize("existing", [None, "old report\n"])
def test_a_failure_halfway_leaves_no_partial_file_and_the_old_one_intact(tmp_path, existing):
    target = tmp_path / "report.json"
    if existing is not None:
        target.write_text(existing)

    def half_then_fail(handle):
        handle.write('{"findings": [')
        handle.flush()  # the half is on disk, in the temporary file
        raise RuntimeError("serialisation failed")

    with pytest.raises(RuntimeError, match="serialisation failed"):
        write_atomic(target, half_then_fail)
    assert os.listdir(tmp_path) == ([] if existing is None else ["report.json"])
    if existing is not None:
        assert target.read_text() == existing


def test_a_failing_rename_leaves_no_temporary_file(tmp_path, monkeypatch):
    def no_space(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", no_space)
    with pytest.raises(OSError):
        write_text_atomic(tmp_path / "report.json", "x" * 100_000)
    assert os.listdir(tmp_path) == []


def test_interrupt_while_writing_leaves_nothing(tmp_path):
    def interrupted(handle):
        handle.write("partial")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomic(tmp_path / "report.json", interrupted)
    assert os.listdir(tmp_path) == []


def test_an_existing_files_permissions_are_kept(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("old")
    os.chmod(target, 0o640)
    write_text_atomic(target, "new")
    assert target.read_text() == "new"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640


def test_a_missing_folder_is_an_oserror_not_a_partial_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_text_atomic(tmp_path / "missing" / "report.json", "x")
    assert os.listdir(tmp_path) == []
