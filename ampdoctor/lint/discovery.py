"""Which files to lint: walk folders, skip the usual noise, honour .gitignore and excludes.

Files named explicitly on the command line are always linted unless a configured ``exclude``
pattern matches them (so a pre-commit hook that passes every staged file still respects the
project's excludes); folders are walked for ``*.py``, ``*.pyi`` and ``*.ipynb``.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..config import matches_glob
from ..records import Record

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


class _IgnoreRule(Record):
    __slots__ = ("regex", "negated", "directory_only")

    def __init__(self, regex: re.Pattern, negated: bool, directory_only: bool) -> None:
        self.regex = regex
        self.negated = negated
        self.directory_only = directory_only


class GitIgnore(Record):
    """The rules of one .gitignore file, matched against paths relative to its folder."""

    __slots__ = ("base", "rules")

    def __init__(self, base: Path, rules: list[_IgnoreRule] | None = None) -> None:
        self.base = base
        self.rules = [] if rules is None else rules

    @classmethod
    def load(cls, folder: Path) -> GitIgnore | None:
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

    def decision(self, relative: str, is_dir: bool) -> bool | None:
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
    """Walks folders with plain strings: per-file ``Path.resolve()`` would dominate a large tree."""

    def __init__(self, root: Path, exclude: Sequence[str] = (), respect_gitignore: bool = True) -> None:
        self.root = os.path.realpath(root)
        self.exclude = tuple(exclude)
        self.respect_gitignore = respect_gitignore
        self._ignores: dict[str, GitIgnore | None] = {}

    def files(self, paths: Sequence[Path]) -> Iterator[Path]:
        seen: set[str] = set()
        for path in paths:
            if path.is_dir():
                found: Iterator[tuple[str, str]] = self._walk(os.path.realpath(path), str(path))
            elif self.exclude and self._is_excluded(os.path.realpath(path)):
                continue
            else:
                found = iter([(os.path.realpath(path), str(path))])
            for key, file in found:
                if key not in seen:
                    seen.add(key)
                    yield Path(file)

    def _relative(self, absolute: str) -> str:
        if absolute.startswith(self.root + os.sep):
            return absolute[len(self.root) + 1 :].replace(os.sep, "/")
        return absolute.replace(os.sep, "/")

    def _is_excluded(self, absolute: str) -> bool:
        relative = self._relative(absolute)
        return any(matches_glob(relative, pattern) for pattern in self.exclude)

    def _walk(self, top: str, shown: str) -> Iterator[tuple[str, str]]:
        """(absolute path, spelling) of the files below ``top`` (absolute, real), spelled below
        ``shown`` (the folder as the user gave it)."""
        inherited = self._ignores_above(top) if self.respect_gitignore else []
        applicable: dict[str, list[tuple[str, GitIgnore]]] = {}
        for folder, dirs, files in os.walk(top):
            parent = applicable.get(os.path.dirname(folder), inherited)
            rules = parent
            if self.respect_gitignore:
                own = self._ignore_for(folder)
                if own is not None:
                    rules = [*parent, (folder, own)]
            applicable[folder] = rules
            spelled = shown if folder == top else os.path.join(shown, folder[len(top) + 1 :])
            kept = []
            for name in sorted(dirs):
                child = f"{folder}{os.sep}{name}"
                if name in DEFAULT_EXCLUDED_DIRS or (self.exclude and self._is_excluded(child)):
                    continue
                if rules and _ignored(rules, child, True):
                    continue
                kept.append(name)
            dirs[:] = kept
            for name in sorted(files):
                if not name.endswith(SUFFIXES):
                    continue
                child = f"{folder}{os.sep}{name}"
                if (self.exclude and self._is_excluded(child)) or (rules and _ignored(rules, child, False)):
                    continue
                yield child, os.path.join(spelled, name)

    def _ignores_above(self, top: str) -> list[tuple[str, GitIgnore]]:
        """.gitignore files of the folders above ``top`` (outermost first)."""
        found = []
        for folder in reversed(Path(top).parents):
            ignore = self._ignore_for(str(folder))
            if ignore is not None:
                found.append((str(folder), ignore))
        return found

    def _ignore_for(self, folder: str) -> GitIgnore | None:
        if folder not in self._ignores:
            self._ignores[folder] = GitIgnore.load(Path(folder))
        return self._ignores[folder]


def _ignored(rules: list[tuple[str, "GitIgnore"]], absolute: str, is_dir: bool) -> bool:
    decision = None
    for base, ignore in rules:  # outer files first, inner ones override
        relative = absolute[len(base) + 1 :].replace(os.sep, "/") if base != os.sep else absolute[1:]
        verdict = ignore.decision(relative, is_dir)
        if verdict is not None:
            decision = verdict
    return bool(decision)
