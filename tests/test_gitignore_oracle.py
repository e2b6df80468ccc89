""".gitignore handling against git itself: in a scratch repository, the files discovery walks
are exactly the untracked, not-ignored files git lists (``git ls-files --others
--exclude-standard``), for hand-picked trees and for generated patterns."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ampdoctor.lint.discovery import SUFFIXES, Discovery

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

# git without the user's or the system's configuration (no global excludes file).
GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def git_repository(root: Path) -> None:
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=GIT_ENV)


def git_lists(root: Path) -> list[str]:
    out = subprocess.run(
        ["git", "-c", "core.quotepath=off", "ls-files", "-z", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
        env=GIT_ENV,
    ).stdout.decode("utf-8")
    return sorted(name for name in out.split("\0") if name.endswith(SUFFIXES))


def walked(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in Discovery(root).files([root]))


def plant(root: Path, files: list[str], ignores: dict[str, str]) -> None:
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n", encoding="utf-8")
    for folder, text in ignores.items():
        path = root / folder / ".gitignore"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


FILES = [
    "train.py",
    "model.py",
    "notes.ipynb",
    "stubs.pyi",
    "logs/run.py",
    "src/logs/run.py",
    "gen/a.py",
    "src/gen/b.py",
    "src/gen.py",
    "keep/a.py",
    "keep/important.py",
    "keep/sub/deep.py",
    "docs/x.py",
    "docs/a/b/x.py",
    "docs/a/y.py",
    "tmp_1.py",
    "pkg/tmp_2.py",
    "pkg/core.py",
    "#hash.py",
    "!bang.py",
    "space .py",
    "ab.py",
    "ac.py",
    "a?.py",
    "a[b].py",
    "lib/inner/keep.py",
    "lib/inner/drop.py",
    "lib/other.py",
    "outer/only_dir/x.py",
    "outer/only_dir.py",
    "data/raw/x.py",
    "data/clean/x.py",
]
IGNORES = {
    "": "\n".join(
        [
            "# a comment, then blank lines",
            "",
            "/logs",  # anchored to this folder: src/logs stays
            "gen/",  # directory-only, any depth
            "keep/*",
            "!keep/important.py",
            "docs/**/x.py",  # ** matches zero or more folders
            "tmp_*.py",
            r"\#hash.py",  # escaped comment character
            r"\!bang.py",  # escaped negation
            r"space\ .py",  # escaped trailing-sensitive space
            "a[bc].py",  # a character class
            "a\\?.py",  # an escaped wildcard: only the file named a?.py
            "**/only_dir/",  # directory-only: the file only_dir.py stays
            "data/*",
            "!data/clean/",
            "trailing.py   ",  # trailing spaces are not part of the pattern
        ]
    )
    + "\n",
    "lib": "*.py\n!inner/\n!inner/keep.py\n",
    "pkg": "!tmp_2.py\n/core.py\n",
}


def test_discovery_walks_what_git_lists(tmp_path):
    git_repository(tmp_path)
    plant(tmp_path, FILES + ["trailing.py"], IGNORES)
    expected = git_lists(tmp_path)
    assert "src/logs/run.py" in expected and "keep/important.py" in expected  # the tree is not trivial
    assert "#hash.py" not in expected and "a?.py" not in expected and "data/clean/x.py" in expected
    assert walked(tmp_path) == expected


def test_a_gitignore_above_the_repository_is_not_read(tmp_path):
    (tmp_path / ".gitignore").write_text("*.py\n", encoding="utf-8")
    repo = tmp_path / "repo"
    git_repository(repo)
    plant(repo, ["train.py", "sub/model.py"], {"sub": "nothing.py\n"})
    assert walked(repo) == git_lists(repo) == ["sub/model.py", "train.py"]
    named = sorted(p.relative_to(repo).as_posix() for p in Discovery(repo).files([repo / "sub"]))
    assert named == ["sub/model.py"]


# Generated trees and patterns: names from a small alphabet, so patterns often hit.
SEGMENTS = ["a", "b", "ab", "x", "*", "?", "a*", "*b", "[ab]", "**"]
name = st.sampled_from(["a", "b", "ab", "x", "ba"])
file_path = (
    st.lists(name, min_size=0, max_size=3)
    .map(lambda parts: "/".join([*parts, ""]))
    .flatmap(lambda folder: st.sampled_from(["a.py", "b.py", "x.py", "ab.ipynb"]).map(lambda leaf: folder + leaf))
)


@st.composite
def pattern(draw) -> str:
    parts = draw(st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=3))
    text = "/".join(parts)
    if draw(st.booleans()) and not text.endswith("**"):
        text += draw(st.sampled_from([".py", "*.py", ""]))
    if draw(st.integers(0, 3)) == 0:
        text = "/" + text
    if draw(st.integers(0, 3)) == 0:
        text += "/"
    if draw(st.integers(0, 3)) == 0:
        text = "!" + text
    return text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    files=st.lists(file_path, min_size=1, max_size=12, unique=True),
    ignores=st.dictionaries(st.sampled_from(["", "a", "b", "a/b", "ab"]), st.lists(pattern(), max_size=5), max_size=3),
)
# Cases found by this test, kept: matching through a parent folder, and the last pattern winning.
@pytest.mark.slow
@example(files=["a/a.py"], ignores={"": ["!/a/", "*/"]})
@example(files=["a/a.py"], ignores={"": ["!/a/", "!*", "/a/"]})
@example(files=["a/a.py"], ignores={"": ["!/a/", "/a/", "!/a/**/"]})
@example(files=["a/b/x.py", "a/y.py"], ignores={"": ["a/**/"]})
@example(files=["a/keep.py", "a/b/x.py"], ignores={"": ["a/**", "!a/keep.py", "*", "!*/"]})
@example(files=["a/a.py"], ignores={"": ["!/a/", "/*/**/"]})
@example(files=["a/b/x.py", "a/y.py", "c/d/e/z.py"], ignores={"": ["*/**/"]})
def test_generated_patterns_agree_with_git(tmp_path_factory, files, ignores):
    root = tmp_path_factory.mktemp("repo")
    # A file and a folder cannot share a name: drop the files that would be folders.
    folders = {"/".join(f.split("/")[:i]) for f in files for i in range(1, f.count("/") + 1)}
    files = [f for f in files if f not in folders]
    git_repository(root)
    plant(root, files, {folder: "\n".join(lines) + "\n" for folder, lines in ignores.items()})
    assert walked(root) == git_lists(root), dict(ignores.items())


@pytest.mark.parametrize("line", ["/**/a/**/", "**/a/**", "/**/a/**", "a/**/", "**/a/**/"])
def test_a_folder_inside_another_of_the_same_name_is_ignored_as_git_ignores_it(tmp_path, line):
    # The expression for "everything inside a folder named a" first matches ``a/x/a/`` up to its
    # own end (the folder itself), though the folder also lies inside the top ``a``.
    git_repository(tmp_path)
    files = ["a/a/a.py", "a/x/a/b.py", "a/top.py", "b/a/c.py", "b/c.py", "keep.py"]
    plant(tmp_path, files, {"": line + "\n"})
    expected = git_lists(tmp_path)
    assert "keep.py" in expected
    assert walked(tmp_path) == expected


def test_a_line_git_cannot_read_is_passed_over_and_the_others_still_count(tmp_path):
    # A trailing backslash escapes nothing: git drops the line (pathspec raises on it).
    git_repository(tmp_path)
    plant(tmp_path, ["train.py", "skip.py", "foo.py", "sub/skip.py"], {"": "foo.py\\\nskip.py\n"})
    expected = git_lists(tmp_path)
    assert expected == ["foo.py", "train.py"]
    assert walked(tmp_path) == expected
