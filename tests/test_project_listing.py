"""The project's module listing kept between runs (``lint/project/listing.py``): the same files
as a walk, and each change to the tree seen on the next run."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from ampdoctor.config import Settings
from ampdoctor.lint import LintRequest, known_codes, lint_paths
from ampdoctor.lint.project.listing import project_modules

SKIPPED = frozenset({"build", "wandb"})


def _walk(base: Path) -> set[str]:
    """What the project pass listed before it kept a listing: ``os.walk`` with the same cuts."""
    found = set()
    for folder, subfolders, names in os.walk(base):
        subfolders[:] = [d for d in subfolders if d not in SKIPPED and not d.startswith(".")]
        prefix = os.path.relpath(folder, base).replace(os.sep, "/")
        found.update(name if prefix == "." else f"{prefix}/{name}" for name in names if name.endswith(".py"))
    return found


def _age(root: Path, seconds: float = 60) -> None:
    """Every folder's time well before now: out of the window in which a listing is not trusted."""
    old = time.time() - seconds
    for folder, _subfolders, _names in os.walk(root):
        os.utime(folder, (old, old))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    for rel in (
        "train.py",
        "README.md",
        "pkg/__init__.py",
        "pkg/model.py",
        "pkg/deep/er/util.py",
        "build/generated.py",
        "wandb/run.py",
        ".hidden/secret.py",
        "pkg/data.json",
    ):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n")
    return root


def test_the_listing_is_the_walk(tree: Path, tmp_path: Path):
    expected = {"train.py", "pkg/__init__.py", "pkg/model.py", "pkg/deep/er/util.py"}
    assert _walk(tree) == expected
    assert project_modules(str(tree), SKIPPED, 100, None) == expected
    cache = tmp_path / "cache"
    assert project_modules(str(tree), SKIPPED, 100, cache) == expected  # written
    assert project_modules(str(tree), SKIPPED, 100, cache) == expected  # read


@pytest.mark.skipif(sys.platform == "win32", reason="symbolic links")
def test_links_are_treated_as_a_walk_treats_them(tree: Path):
    (tree / "linked_folder").symlink_to(tree / "pkg", target_is_directory=True)
    (tree / "linked.py").symlink_to(tree / "train.py")
    (tree / "dangling.py").symlink_to(tree / "nowhere.py")
    assert project_modules(str(tree), SKIPPED, 100, None) == _walk(tree)
    assert "linked.py" in _walk(tree) and not any(p.startswith("linked_folder/") for p in _walk(tree))


def test_each_change_is_seen_on_the_next_run(tree: Path, tmp_path: Path):
    cache = tmp_path / "cache"
    _age(tree)
    project_modules(str(tree), SKIPPED, 100, cache)
    steps = [
        lambda: (tree / "pkg" / "deep" / "er" / "new.py").write_text("y = 2\n"),  # a file added deep down
        lambda: (tree / "pkg" / "model.py").unlink(),  # a file removed
        lambda: (tree / "pkg" / "deep" / "er" / "new.py").rename(tree / "pkg" / "deep" / "er" / "renamed.py"),
        lambda: (tree / "fresh" / "sub").mkdir(parents=True),  # a folder added, then a file in it
        lambda: (tree / "fresh" / "sub" / "m.py").write_text("z = 3\n"),
        lambda: (
            [p.unlink() for p in (tree / "pkg" / "deep" / "er").iterdir()] and (tree / "pkg" / "deep" / "er").rmdir()
        ),
    ]
    for step in steps:
        step()
        assert project_modules(str(tree), SKIPPED, 100, cache) == _walk(tree)
        _age(tree)  # the next change is then the only thing that moves a folder's time


def test_a_folder_changed_just_before_the_listing_is_listed_again(tree: Path, tmp_path: Path):
    cache = tmp_path / "cache"
    folder = tree / "pkg"
    project_modules(str(tree), SKIPPED, 100, cache)  # the folders' times are recent: not trusted
    recent = folder.stat().st_mtime_ns
    (folder / "late.py").write_text("w = 4\n")
    os.utime(folder, ns=(recent, recent))  # the change landed in the same clock tick
    assert "pkg/late.py" in project_modules(str(tree), SKIPPED, 100, cache)


def test_a_listing_kept_for_other_skipped_folders_is_not_used(tree: Path, tmp_path: Path):
    cache = tmp_path / "cache"
    _age(tree)
    assert "build/generated.py" not in project_modules(str(tree), SKIPPED, 100, cache)
    assert "build/generated.py" in project_modules(str(tree), frozenset({"wandb"}), 100, cache)


@pytest.mark.parametrize(
    "damage",
    [
        "{not json",
        json.dumps({"format": 1, "written_ns": 10**20, "folders": {"": [1, ["pkg"], [5]]}}),
        json.dumps({"format": 1, "written_ns": 10**20, "folders": {"": {"mtime": 1}}}),
        json.dumps({"format": 1, "written_ns": "soon", "folders": {}}),
        json.dumps({"format": 99, "written_ns": 10**20, "folders": {}}),
    ],
)
def test_a_damaged_listing_is_listed_again(tree: Path, tmp_path: Path, damage: str):
    cache = tmp_path / "cache"
    _age(tree)
    project_modules(str(tree), SKIPPED, 100, cache)
    (kept,) = cache.glob("listing-*.json")
    kept.write_text(damage)
    assert project_modules(str(tree), SKIPPED, 100, cache) == _walk(tree)
    assert json.loads(kept.read_text())["format"] == 1  # and written again whole


def test_past_the_limit_there_is_no_listing(tree: Path, tmp_path: Path):
    assert project_modules(str(tree), SKIPPED, 3, tmp_path / "cache") is None
    assert project_modules(str(tree), SKIPPED, 4, tmp_path / "cache") is not None


HELPER = """\
import torch

def save_checkpoint(model, optimizer, path):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
"""

TRAIN = """\
import torch
from utils.checkpoint import save_checkpoint

def train(model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    save_checkpoint(model, optimizer, "last.pt")
"""


def _amp211(root: Path) -> list[int]:
    settings = Settings(root=root)
    request = LintRequest(settings, settings.enabled_codes(known_codes()), use_cache=True)
    run = lint_paths([root / "train.py"], request, cwd=root)
    return [f.location.line for f in run.findings if f.code == "AMP211"]


def test_a_module_added_or_removed_after_a_cached_run_changes_the_findings(tmp_path: Path):
    root = tmp_path / "project"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (root / "train.py").write_text(TRAIN)
    (root / "utils").mkdir()
    _age(root)
    assert _amp211(root) == []  # the helper is nowhere: nothing is known of what it writes
    (root / "utils" / "checkpoint.py").write_text(HELPER)
    assert _amp211(root) == [13]
    _age(root)
    (root / "utils" / "checkpoint.py").unlink()
    assert _amp211(root) == []


def test_only_the_newest_listings_are_kept(tree: Path, tmp_path: Path):
    cache = tmp_path / "cache"
    for index in range(7):
        project_modules(str(tree), SKIPPED | {f"other{index}"}, 100, cache)
    assert len(list(cache.glob("listing-*.json"))) == 4
