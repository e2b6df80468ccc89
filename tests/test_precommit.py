"""The pre-commit hook, installed by the real pre-commit from this checkout into a throw-away repo."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

from samples import CLIP_BEFORE_UNSCALE as BAD  # noqa: E402  (tests/ is on the path once ROOT is known)
from samples import UNSCALE_THEN_CLIP as GOOD  # noqa: E402


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=check)


@pytest.fixture(scope="module")
def checkout_rev() -> str:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout of ampdoctor")
    rev = _git(ROOT, "rev-parse", "HEAD", check=False)
    if rev.returncode != 0:
        pytest.skip("the checkout has no commit yet")
    tree = _git(ROOT, "ls-tree", "--name-only", "HEAD").stdout.split()
    if ".pre-commit-hooks.yaml" not in tree:
        pytest.skip("the checked-out commit predates the hook definition")
    return rev.stdout.strip()


@pytest.mark.slow
def test_hook_refuses_a_bad_commit_and_accepts_a_clean_one(tmp_path: Path, checkout_rev: str):
    pre_commit = [sys.executable, "-m", "pre_commit"]
    repo = tmp_path / "project"
    repo.mkdir()
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache"), "PRE_COMMIT_COLOR": "never"}
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "test@example.invalid")
    _git(repo, "config", "user.name", "test")
    (repo / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {ROOT.as_posix()}\n    rev: {checkout_rev}\n    hooks:\n      - id: ampdoctor\n",
        encoding="utf-8",
    )
    subprocess.run([*pre_commit, "install"], cwd=repo, env=env, check=True, capture_output=True)

    (repo / "train.py").write_text(BAD, encoding="utf-8")
    _git(repo, "add", ".")
    refused = subprocess.run(["git", "commit", "-m", "bad"], cwd=repo, env=env, capture_output=True, text=True)
    assert refused.returncode != 0, refused.stdout + refused.stderr
    assert "AMP201" in refused.stdout + refused.stderr
    assert _git(repo, "rev-parse", "HEAD", check=False).returncode != 0  # nothing committed

    (repo / "train.py").write_text(GOOD, encoding="utf-8")
    _git(repo, "add", ".")
    accepted = subprocess.run(["git", "commit", "-m", "good"], cwd=repo, env=env, capture_output=True, text=True)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert "ampdoctor" in accepted.stdout + accepted.stderr
