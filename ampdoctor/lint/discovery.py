"""Which files to lint: walk folders, skip the usual noise, honour .gitignore and excludes.

Files named explicitly on the command line are always linted unless a configured ``exclude``
pattern matches them (so a pre-commit hook that passes every staged file still respects the
project's excludes); folders are walked for ``*.py``, ``*.pyi`` and ``*.ipynb``.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional, Sequence

from ..config import matches_glob

DEFAULT_EXCLUDED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".ampdoctor_cache",
        "__pycache__",
        "build",
        "dist",
        "node_modules",
        "site-packages",
        ".ipynb_checkpoints",
        ".eggs",
    }
)
SUFFIXES = (".py", ".pyi", ".ipynb")


@dataclass
class _IgnoreRule:
    regex: re.Pattern
    negated: bool
    directory_only: bool


@dataclass
class GitIgnore:
    """The rules of one .gitignore file, matched against paths relative to its folder."""

    base: Path
    rules: list[_IgnoreRule] = field(default_factory=list)

    @classmethod
    def load(cls, folder: Path) -> Optional["GitIgnore"]:
        path = folder / ".gitignore"
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        ignore = cls(folder)
        for raw in text.splitlines():
            line = raw.rstrip()
            if not line or line.startswith("#"):
                continue
            negated = line.startswith("!")
            if negated:
                line = line[1:]
            if line.startswith("\\"):
                line = line[1:]
            directory_only = line.endswith("/")
            line = line.rstrip("/")
            if not line:
                continue
            ignore.rules.append(_IgnoreRule(_compile(line), negated, directory_only))
        return ignore

    def decision(self, relative: str, is_dir: bool) -> Optional[bool]:
        """True ignored, False re-included, None no opinion."""
        result = None
        for rule in self.rules:
            if rule.directory_only and not is_dir:
                continue
            if rule.regex.match(relative):
                result = not rule.negated
        return result


def _compile(pattern: str) -> re.Pattern:
    anchored = "/" in pattern
    pattern = pattern.lstrip("/")
    parts = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            parts.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == len(pattern):
            parts.append("/.*")
            i += 3
        elif pattern.startswith("**", i):
            parts.append(".*")
            i += 2
        elif pattern[i] == "*":
            parts.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            parts.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                parts.append(re.escape("["))
                i += 1
            else:
                parts.append(fnmatch.translate(pattern[i : end + 1])[4:-3])
                i = end + 1
        else:
            parts.append(re.escape(pattern[i]))
            i += 1
    body = "".join(parts)
    prefix = "" if anchored else "(?:.*/)?"
    # An exact match on the path itself: parents are judged when the walk reaches them, so a
    # folder the user names explicitly is linted even when a .gitignore above excludes it.
    return re.compile(f"^{prefix}{body}$")


class Discovery:
    def __init__(self, root: Path, exclude: Sequence[str] = (), respect_gitignore: bool = True) -> None:
        self.root = root.resolve()
        self.exclude = tuple(exclude)
        self.respect_gitignore = respect_gitignore
        self._ignores: dict[Path, Optional[GitIgnore]] = {}

    def files(self, paths: Sequence[Path]) -> Iterator[Path]:
        seen: set[Path] = set()
        for path in paths:
            if path.is_dir():
                found = self._walk(path)
            elif self._is_excluded(path):
                continue
            else:
                found = iter([path])
            for file in found:
                key = file.resolve()
                if key not in seen:
                    seen.add(key)
                    yield file

    def _relative(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            return path.as_posix()

    def _is_excluded(self, path: Path) -> bool:
        relative = self._relative(path)
        return any(matches_glob(relative, pattern) for pattern in self.exclude)

    def _walk(self, top: Path) -> Iterator[Path]:
        for folder, dirs, files in os.walk(top):
            here = Path(folder)
            kept_dirs = []
            for name in sorted(dirs):
                child = here / name
                if name in DEFAULT_EXCLUDED_DIRS or self._is_excluded(child) or self._git_ignored(child, True):
                    continue
                kept_dirs.append(name)
            dirs[:] = kept_dirs
            for name in sorted(files):
                if not name.endswith(SUFFIXES):
                    continue
                child = here / name
                if self._is_excluded(child) or self._git_ignored(child, False):
                    continue
                yield child

    def _git_ignored(self, path: Path, is_dir: bool) -> bool:
        if not self.respect_gitignore:
            return False
        absolute = path.resolve()
        decision = None
        # Outer .gitignore files first, inner ones override.
        for folder in reversed([*absolute.parents]):
            ignore = self._ignore_for(folder)
            if ignore is None:
                continue
            relative = absolute.relative_to(folder).as_posix()
            verdict = ignore.decision(relative, is_dir)
            if verdict is not None:
                decision = verdict
        return bool(decision)

    def _ignore_for(self, folder: Path) -> Optional[GitIgnore]:
        if folder not in self._ignores:
            self._ignores[folder] = GitIgnore.load(folder)
        return self._ignores[folder]
