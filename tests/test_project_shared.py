"""Summaries made on demand shared between the two processes of the project checks
(``lint/project/shared.py``): one process reads what the other made of the same bytes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ampdoctor.config import Settings
from ampdoctor.lint import LintRequest, known_codes, lint_paths
from ampdoctor.lint.project import checks
from ampdoctor.lint.project import store as store_module
from ampdoctor.lint.project.shared import SharedSummaries
from ampdoctor.lint.project.store import SummaryStore, content_hash

HELPER = """\
import torch

def save_checkpoint(model, optimizer, path):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
"""


def test_what_is_left_is_read_back_and_what_is_not_is_missing(tmp_path: Path):
    shared = SharedSummaries(str(tmp_path))
    assert shared.get("0" * 32) == (False, None)
    summary = {"functions": {"f": {"params": ["x"], "at": [1, 0, 2, 4]}}}
    shared.put("a" * 32, summary)
    assert shared.get("a" * 32) == (True, summary)
    shared.put("b" * 32, None)  # bytes that do not parse summarize to None: that is an answer too
    assert shared.get("b" * 32) == (True, None)
    assert sorted(os.listdir(tmp_path)) == ["a" * 32, "b" * 32]  # no partial file left behind


def test_a_file_that_cannot_be_read_or_written_is_made_again(tmp_path: Path):
    (tmp_path / ("c" * 32)).write_bytes(b"\x80\x05half a pickle")
    shared = SharedSummaries(str(tmp_path))
    assert shared.get("c" * 32) == (False, None)
    gone = SharedSummaries(str(tmp_path / "removed"))
    gone.put("d" * 32, {"functions": {}})  # (a full disk, a removed folder: nothing raised)
    assert gone.get("d" * 32) == (False, None)


def test_a_store_takes_the_summary_another_made_of_the_same_bytes(tmp_path: Path, monkeypatch):
    (tmp_path / "helper.py").write_text(HELPER, encoding="utf-8")
    shared = SharedSummaries(str(tmp_path / "shared"))
    (tmp_path / "shared").mkdir()
    made = []
    original = store_module.summarize_bytes
    monkeypatch.setattr(store_module, "summarize_bytes", lambda data: made.append(data) or original(data))
    first, second = SummaryStore(tmp_path, None), SummaryStore(tmp_path, None)  # the two processes
    first.shared = second.shared = shared
    summary = first.summary("helper.py")
    assert summary is not None and len(made) == 1 and (first.made, first.taken) == (1, 0)
    assert second.summary("helper.py") == summary
    assert len(made) == 1 and (second.made, second.taken) == (0, 1)  # read, not made again
    # Other bytes under the same name are another key: made, not taken.
    (tmp_path / "helper.py").write_text(HELPER.replace("save_checkpoint", "save_weights"), encoding="utf-8")
    third = SummaryStore(tmp_path, None)
    third.shared = shared
    assert "save_weights" in third.summary("helper.py")["functions"]
    assert len(made) == 2 and content_hash((tmp_path / "helper.py").read_bytes()) in os.listdir(tmp_path / "shared")


def _checkpointing_project(root: Path) -> Path:
    """A training script that checkpoints through a helper without the scaler's state (AMP211)."""
    root.mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "p"\n', encoding="utf-8")
    train = """\
import torch
from utils import save_checkpoint

def train(model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        scaler.scale(model(x)).backward()
        scaler.step(optimizer)
        scaler.update()
    save_checkpoint(model, optimizer, "last.pt")
"""
    (root / "train.py").write_text(train, encoding="utf-8")
    (root / "utils.py").write_text(HELPER, encoding="utf-8")
    return root


def _findings(root: Path) -> list[tuple[str, str]]:
    settings = Settings(root=root)
    request = LintRequest(settings, settings.enabled_codes(known_codes()), use_cache=False, jobs=2)
    return [(f.location.path, f.code) for f in lint_paths([root], request, cwd=root).findings]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks only on Linux")
@pytest.mark.parametrize("in_memory", [False, True])
def test_the_forked_checks_share_a_folder_that_is_gone_after_them(tmp_path: Path, monkeypatch, in_memory: bool):
    import tempfile

    root = _checkpointing_project(tmp_path / "project")
    temporary = tmp_path / "temporary"
    temporary.mkdir()
    if in_memory:  # (a folder standing for /dev/shm)
        monkeypatch.setattr(checks, "memory_folder", lambda: str(temporary))
    else:  # no memory folder: the temporary one
        monkeypatch.setattr(checks, "memory_folder", lambda: None)
        monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    monkeypatch.setattr(checks, "FORK_TARGETS", 1)
    monkeypatch.setattr(checks, "can_fork", lambda: True)
    folders = []
    original = SharedSummaries.__init__

    def seen(self, folder: str) -> None:
        folders.append(folder)
        original(self, folder)

    monkeypatch.setattr(SharedSummaries, "__init__", seen)
    assert _findings(root) == [("train.py", "AMP211")]
    assert len(folders) == 1 and Path(folders[0]).parent == temporary
    assert list(temporary.iterdir()) == []  # removed with what both processes left in it


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks only on Linux")
def test_without_a_temporary_folder_each_process_makes_its_own(tmp_path: Path, monkeypatch):
    import tempfile

    root = _checkpointing_project(tmp_path / "project")
    monkeypatch.setattr(checks, "FORK_TARGETS", 1)
    monkeypatch.setattr(checks, "can_fork", lambda: True)

    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied", "/tmp")

    monkeypatch.setattr(tempfile, "mkdtemp", refused)
    assert _findings(root) == [("train.py", "AMP211")]  # not "the project analysis failed"


def test_the_memory_folder_is_one_this_process_may_write_in(monkeypatch):
    from ampdoctor.lint.project import shared

    monkeypatch.setattr(shared.os.path, "isdir", lambda path: path == "/dev/shm")
    monkeypatch.setattr(shared.os, "access", lambda path, mode: True)
    assert shared.memory_folder() == "/dev/shm"
    monkeypatch.setattr(shared.os, "access", lambda path, mode: False)
    assert shared.memory_folder() is None
    monkeypatch.setattr(shared.os.path, "isdir", lambda path: False)
    monkeypatch.setattr(shared.os, "access", lambda path, mode: True)
    assert shared.memory_folder() is None
