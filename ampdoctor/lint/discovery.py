"""Which files to lint: walk folders, skip the usual noise, honour .gitignore and excludes.

Files named explicitly on the command line are always linted unless a configured ``exclude``
pattern matches them (so a pre-commit hook that passes every staged file still respects the
project's excludes); folders are walked for ``*.py``, ``*.pyi`` and ``*.ipynb``.
"""

from __future__ import annotations

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


class GitIgnore(Record):
    """The patterns of one .gitignore file, matched against paths relative to its folder with
    ``pathspec``'s implementation of git's rules (negation, anchoring, ``**``, directory-only
    patterns, escapes). Imported here, when a walked folder has a .gitignore: linting named
    files never pays for it."""

    __slots__ = ("base", "spec", "any_pattern")

    def __init__(self, base: Path, spec) -> None:
        self.base = base
        self.spec = spec
        self.any_pattern = _any_of(spec.patterns)

    @classmethod
    def load(cls, folder: Path) -> GitIgnore | None:
        path = folder / ".gitignore"
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        import pathspec

        return cls(folder, pathspec.GitIgnoreSpec.from_lines(text.splitlines()))

    def sparing(self, folders: Sequence[str]) -> GitIgnore:
        """This file without the patterns that ignore any of ``folders`` (relative to its base):
        a folder named on the command line is walked even where a .gitignore above ignores it,
        and what ignores the folder itself must not ignore everything in it."""
        import pathspec

        spared = [f"{folder}/" for folder in folders]
        kept = [p for p in self.spec.patterns if not (p.include and any(p.match_file(f) for f in spared))]
        return self if len(kept) == len(self.spec.patterns) else GitIgnore(self.base, pathspec.GitIgnoreSpec(kept))

    def decision(self, relative: str, is_dir: bool) -> bool | None:
        """True ignored, False re-included, None no opinion (the last matching pattern decides)."""
        path = f"{relative}/" if is_dir else relative
        if self.any_pattern is not None and not self.any_pattern.search(path):
            return None  # most paths match no pattern: one search instead of one per pattern
        return self.spec.check_file(path).include


def _any_of(patterns) -> "re.Pattern[str] | None":
    """One expression that matches where any of the patterns does (their group names dropped,
    since an expression may not repeat one); None when they cannot be combined."""
    alternatives = [re.sub(r"\(\?P<\w+>", "(?:", p.regex.pattern) for p in patterns if p.include is not None]
    if not alternatives:
        return re.compile(r"(?!)")
    try:
        return re.compile("|".join(f"(?:{a})" for a in alternatives))
    except re.error:
        return None


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
        inherited = [(base, ignore.sparing(_folders_between(base, top))) for base, ignore in self._ignores_above(top)] \
            if self.respect_gitignore else []
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
        """.gitignore files of the folders above ``top`` (outermost first), up to the root of
        its git repository, as git reads them (all the way up when there is no repository)."""
        found: list[tuple[str, GitIgnore]] = []
        if os.path.exists(os.path.join(top, ".git")):
            return found
        for folder in Path(top).parents:
            ignore = self._ignore_for(str(folder))
            if ignore is not None:
                found.append((str(folder), ignore))
            if os.path.exists(os.path.join(folder, ".git")):
                break
        return found[::-1]

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


def _folders_between(base: str, top: str) -> list[str]:
    """The folders from below ``base`` down to ``top``, relative to ``base``: "a", "a/b", ..."""
    parts = os.path.relpath(top, base).replace(os.sep, "/").split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]
