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

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from ..config_tree import Resolver

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
    """The patterns of one .gitignore file, matched against paths relative to its folder.

    ``pathspec`` reads the patterns (negation, anchoring, ``**``, directory-only patterns,
    escapes, trailing spaces) into regular expressions; it is imported here, when a walked folder
    has a .gitignore, so that linting named files never pays for it. Git's rule is then applied
    as git applies it during a walk: the last pattern that matches a path *itself* decides, and
    a folder that is ignored is not entered, so nothing below it is looked at. (pathspec's own
    matching also lets a pattern match through a parent folder, which a walk must not do: a
    folder named on the command line is linted even when a .gitignore above ignores it.)

    pathspec translates each line (``pattern_to_regex``), and the expressions are compiled only
    when a path needs them: most paths match no pattern, and a first test says so. Compiling
    every pattern, as ``GitIgnoreSpec.from_lines`` does, took about 100 of the 180 ms a warm run
    of the 31-repository tree spent walking it (39 files, about 1,500 patterns). Compiling one
    expression of them all for that first test still took 110 ms of a 300 ms warm run; but 95%
    of those lines name the last part of a path plainly (``build/``, ``*.pyc``, ``.coverage.*``),
    which a path's last part is compared with as a string (``_Tails``), and only the others are
    compiled into the first test's expression.

    Those plain lines are not even translated until a path fits their last part: pathspec's
    translation of the tree's 2,968 lines took 30 ms, a tenth of a warm run. A line git cannot
    read (a trailing backslash) matches nothing, as git has it, and the lines around it still
    count.
    """

    __slots__ = ("base", "rules", "_tails", "_others", "_any_other", "_compiled")

    def __init__(self, base: Path, patterns: Sequence[tuple[str, str | None, bool | None]]) -> None:
        """``patterns``: (line, regular expression, include) as pathspec reads each line; a
        line with an include and no expression is translated when a path first needs it."""
        self.base = base
        # Last pattern first: the first that matches decides.
        self.rules = [_Rule(line, regex, include) for line, regex, include in reversed(patterns) if include is not None]
        self._tails = _Tails()
        self._others = [rule.text for rule in self.rules if not self._tails.add(rule.tail)]
        self._any_other: re.Pattern[str] | None = None  # one expression of the others (None: none could be made)
        self._compiled = False  # on first use

    def _may_match(self, relative: str, path: str) -> bool:
        """Whether some pattern may match the path (False: certainly none does)."""
        if self._tails.may_name(relative.rpartition("/")[2]):
            return True
        if not self._others:
            return False
        if not self._compiled:
            self._any_other, self._compiled = _any_of(self._others), True
        return self._any_other is None or self._any_other.search(path) is not None

    @classmethod
    def load(cls, folder: Path) -> GitIgnore | None:
        path = folder / ".gitignore"
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        return cls(folder, [_read_line(line) for line in text.splitlines() if line])

    def decision(self, relative: str, is_dir: bool) -> bool | None:
        """True ignored, False re-included, None no opinion."""
        # A folder is spelled with its slash: only then do directory-only patterns match it.
        path = f"{relative}/" if is_dir else relative
        if not self._may_match(relative, path):
            return None  # most paths match no pattern: one test instead of one per pattern
        last = relative.rpartition("/")[2]
        for rule in self.rules:
            # A rule whose plain last part the path's does not fit is passed over uncompiled: a
            # path that some rule may match was tested against every rule of its file, and each
            # was compiled for it (563 expressions, a tenth of a warm run of the 31-repository
            # tree, for the handful that a path named ``build`` or ``*.egg-info`` may match).
            tail = rule.tail
            if tail is not None and not _fits(tail, last):
                continue
            if rule.matches(path, is_dir):
                return rule.ignored
        return None


def _read_line(line: str) -> tuple[str, str | None, bool | None]:
    """(line, its expression, include); a plain line (``_plain_line``) as (line, None, include),
    to be translated when a path first fits its last part."""
    if _plain_line(line):
        return line, None, not line.startswith("!")
    return (line, *_to_regex(line))


def _plain_line(line: str) -> bool:
    """Whether pathspec reads ``line`` as a pattern (no comment, no blank) that it translates
    without error, and its last part is plain: no escape and no bracket anywhere (where a range
    error or a dangling escape would drop the line), and the include is the ``!`` alone."""
    stripped = line.rstrip()
    return (
        bool(stripped)
        and stripped[0] != "#"
        and stripped != "/"
        and "\\" not in line
        and "[" not in line
        and plain_tail(line) is not None
    )


def _to_regex(line: str) -> tuple[str | None, bool | None]:
    """pathspec's reading of one .gitignore line, as ``GitIgnoreSpec`` reads it: (its regular
    expression, whether it ignores; None for a comment or a blank line)."""
    from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

    try:
        regex, include = GitIgnoreSpecPattern.pattern_to_regex(line)
    except ValueError:  # pathspec's GitIgnorePatternError: a pattern git cannot read, which it passes over
        return None, None
    return (regex if isinstance(regex, str) else None), include


# The last part of a pattern that is a name, a name's end after ``*`` or its start before ``*``.
_PLAIN_TAIL = re.compile(r"(\*?)([^*?\[\\/]+)|([^*?\[\\/]+)\*")


# A pattern's plain last part: ("name", "build"), ("end", ".pyc"), ("start", ".coverage.").
Tail = tuple[str, str]


def plain_tail(line: str) -> Tail | None:
    """The last part of a .gitignore pattern when it is plain (``_PLAIN_TAIL``), else None."""
    body = line[1:] if line.startswith("!") else line
    body = body.rstrip(" ").rstrip("/")
    found = _PLAIN_TAIL.fullmatch(body.rpartition("/")[2])
    if found is None:
        return None
    star, name, start = found.groups()
    if start is not None:
        return "start", start
    return ("end", name) if star else ("name", name)


def _fits(tail: Tail, part: str) -> bool:
    """Whether a path whose last part is ``part`` may match a pattern with this plain tail."""
    kind, text = tail
    if kind == "name":
        return part == text
    return part.endswith(text) if kind == "end" else part.startswith(text)


class _Tails(Record):
    """The patterns whose last part is plain (``build``, ``*.pyc``, ``.coverage.*``): a path
    matched by one of them ends with a part equal to that name, ending with that end or starting
    with that start. A pattern matches the path itself, never through a parent folder (``_Rule``),
    so this is a necessary condition, tested with string comparisons instead of an expression."""

    __slots__ = ("names", "ends", "starts")

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.ends: tuple[str, ...] = ()
        self.starts: tuple[str, ...] = ()

    def add(self, tail: Tail | None) -> bool:
        """Take a pattern's plain last part (``plain_tail``); False when it has none."""
        if tail is None:
            return False
        kind, text = tail
        if kind == "start":
            self.starts += (text,)
        elif kind == "end":
            self.ends += (text,)
        else:
            self.names.add(text)
        return True

    def may_name(self, part: str) -> bool:
        return part in self.names or part.endswith(self.ends) or part.startswith(self.starts)


class _Rule(Record):
    """One pattern as pathspec reads it, asked whether it matches a path itself.

    pathspec's expression for a pattern also matches everything below a folder the pattern
    matches: its group ``ps_d`` stands for the slash after that folder. Here the slash must
    end the path (the path is that folder), so a pattern never matches through a parent folder.
    Expressions without the group come from a trailing ``/**`` ("everything inside") or a lone
    ``*`` or ``**``; the first matches below its folder but not the folder itself. pathspec reads
    ``X/**/`` as ``X/``, the folder itself; to git it is every folder inside X (``/*/**/``: every
    folder below a top-level one), so it is read here as ``X/**`` for folders only.
    """

    __slots__ = ("line", "ignored", "folders_only", "tail", "_text", "_regex", "_itself")

    def __init__(self, line: str, regex: str | None, include: bool) -> None:
        """``regex``: pathspec's expression for ``line``; None: made when first asked for."""
        self.line = line
        self.tail = plain_tail(line)
        self.ignored = bool(include)
        body = line if self.ignored else line[1:]  # without the "!"
        body = body.rstrip(" ")
        # ``X/**/`` with X naming folders (``a``, ``/*``, ``*/b``), not ``/**/`` or ``**/**/``.
        head = body[: -len("/**/")].strip("/")
        self.folders_only = body.endswith("/**/") and any(part != "**" for part in head.split("/") if part)
        if self.folders_only:
            regex = _to_regex(body[:-1])[0] or "(?!)"
        self._text = None if regex is None else regex or "(?!)"
        # Compiled when first asked for (most rules never are).
        self._regex: re.Pattern[str] | None = None
        self._itself: re.Pattern[str] | bool | None = False

    @property
    def text(self) -> str:
        """The pattern's expression (``(?!)``, matching nothing, where pathspec has none)."""
        text = self._text
        if text is None:
            text = self._text = _to_regex(self.line)[0] or "(?!)"
        return text

    @property
    def regex(self) -> re.Pattern[str]:
        if self._regex is None:
            self._regex = re.compile(self.text)
        return self._regex

    @property
    def itself(self) -> re.Pattern[str] | None:
        """The expression that matches the path itself (None where the pattern has no folder
        group to anchor)."""
        itself = self._itself
        if itself is False:
            text = self.text
            itself = re.compile(text.replace("(?P<ps_d>/)", "/$")) if "(?P<ps_d>/)" in text else None
            self._itself = itself
        return itself  # type: ignore[return-value]

    def matches(self, path: str, is_dir: bool) -> bool:
        if self.folders_only and not is_dir:
            return False
        itself = self.itself
        if itself is not None:
            return itself.search(path) is not None
        found = self.regex.search(path)
        if found is None:
            return False
        if not (is_dir and found.end() == len(path)):
            return True
        # The match took the folder itself (``**/a/**`` on ``a/x/a/``, its greedy ``.+/`` reaching
        # the last ``a/``); the folder is still inside one the pattern names where another match
        # ends at a slash before its own (``a/``, the top one).
        return self.text.endswith("/") and self.regex.search(path[:-1]) is not None


def _any_of(expressions: Iterable[str]) -> re.Pattern[str] | None:
    """One expression that finds a match wherever one of ``expressions`` matches (a superset:
    their group names dropped, since an expression may not repeat one); None if impossible."""
    alternatives = [re.sub(r"\(\?P<\w+>", "(?:", text) for text in expressions]
    if not alternatives:
        return re.compile(r"(?!)")
    try:
        return re.compile("|".join(f"(?:{a})" for a in alternatives))
    except re.error:
        return None


class Discovery:
    """Walks folders with plain strings: per-file ``Path.resolve()`` would dominate a large tree.

    ``exclude``: patterns relative to ``root``. ``resolver`` (``config_tree.py``): each folder's
    configuration, whose own ``exclude`` patterns, relative to its folder, apply to what is in
    the folder (a sub-project's configuration to the sub-project's files)."""

    def __init__(
        self, root: Path, exclude: Sequence[str] = (), respect_gitignore: bool = True, resolver: Resolver | None = None
    ) -> None:
        self.root = os.path.realpath(root)
        self.exclude = tuple(exclude)
        self.respect_gitignore = respect_gitignore
        self.resolver = resolver
        self._roots: dict[int, str] = {}
        self._ignores: dict[str, GitIgnore | None] = {}
        # Folders the walk could not list: (the folder as the user would spell it, why).
        self.unlistable: list[tuple[str, str]] = []

    def files(self, paths: Sequence[Path]) -> Iterator[Path]:
        """The files to lint, as ``names`` spells them, as paths."""
        return (Path(name) for name in self.names(paths))

    def names(self, paths: Sequence[Path]) -> Iterator[str]:
        """The files to lint, each once, spelled below the path given for it (a path object for
        each of a tree's files costs more than the walk itself)."""
        seen: set[str] = set()
        for path in paths:
            if path.is_dir():
                found: Iterator[tuple[str, str]] = self._walk(os.path.realpath(path), str(path))
            elif (self.exclude or self.resolver) and self._is_excluded(os.path.realpath(path)):
                continue
            else:
                found = iter([(os.path.realpath(path), str(path))])
            for key, file in found:
                if key not in seen:
                    seen.add(key)
                    yield file

    def _relative(self, absolute: str) -> str:
        if absolute.startswith(self.root + os.sep):
            return absolute[len(self.root) + 1 :].replace(os.sep, "/")
        return absolute.replace(os.sep, "/")

    def _is_excluded(self, absolute: str, configured: tuple[str, tuple[str, ...]] | None = None) -> bool:
        """Whether the run's excludes, or the configured ones of the file's folder (``configured``,
        when the caller knows them), match ``absolute``."""
        if self.exclude and _matches(absolute, self._relative(absolute), self.exclude):
            return True
        if configured is None and self.resolver is not None:
            configured = self._configured(os.path.dirname(absolute))
        if configured is None:
            return False
        root, patterns = configured
        if absolute.startswith(root + os.sep):
            relative = absolute[len(root) + 1 :].replace(os.sep, "/")
        else:
            relative = absolute.replace(os.sep, "/")
        return _matches(absolute, relative, patterns)

    def _configured(self, folder: str, names: list[str] | None = None) -> tuple[str, tuple[str, ...]] | None:
        """(the configuration's folder, real; its exclude patterns) for what is in ``folder``."""
        assert self.resolver is not None
        settings = self.resolver.folder(folder, names)
        if not settings.exclude:
            return None
        root = self._roots.get(id(settings))
        if root is None:
            root = self._roots[id(settings)] = os.path.realpath(settings.root)
        return root, settings.exclude

    def _walk(self, top: str, shown: str) -> Iterator[tuple[str, str]]:
        """(absolute path, spelling) of the files below ``top`` (absolute, real), spelled below
        ``shown`` (the folder as the user gave it)."""
        inherited = self._ignores_above(top) if self.respect_gitignore else []
        # Spelled as a path object would spell them: ``./train.py`` is ``train.py``.
        prefix = "" if shown == "." else shown
        applicable: dict[str, list[tuple[str, GitIgnore]]] = {}

        def unlistable(exc: OSError) -> None:
            folder = str(exc.filename or top)
            spelled = shown if folder == top else os.path.join(shown, folder[len(top) + 1 :])
            self.unlistable.append((spelled, exc.strerror or str(exc)))

        for folder, dirs, files in os.walk(top, onerror=unlistable):
            parent = applicable.get(os.path.dirname(folder), inherited)
            rules = parent
            if self.respect_gitignore and _lists_gitignore(files):  # not opened where the listing has none
                own = self._ignore_for(folder)
                if own is not None:
                    rules = [*parent, (folder, own)]
            applicable[folder] = rules
            spelled = prefix if folder == top else os.path.join(prefix, folder[len(top) + 1 :])
            configured = self._configured(folder, files) if self.resolver is not None else None
            excluding = bool(self.exclude) or configured is not None
            kept = []
            for name in sorted(dirs):
                child = f"{folder}{os.sep}{name}"
                if name in DEFAULT_EXCLUDED_DIRS or (excluding and self._is_excluded(child, configured)):
                    continue
                if rules and _ignored(rules, child, True):
                    continue
                kept.append(name)
            dirs[:] = kept
            for name in sorted(files):
                if not name.endswith(SUFFIXES):
                    continue
                child = f"{folder}{os.sep}{name}"
                if (excluding and self._is_excluded(child, configured)) or (rules and _ignored(rules, child, False)):
                    continue
                # A link to a file is known by its target: a folder of links into the package
                # names each file once (one lstat per file, about 1 ms a thousand files).
                key = os.path.realpath(child) if os.path.islink(child) else child
                yield key, os.path.join(spelled, name)

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


def _matches(absolute: str, relative: str, patterns: Sequence[str]) -> bool:
    """Whether one of ``patterns`` matches: an absolute one (from a configuration another one
    extends, anchored to its folder) the absolute path, the others the relative one."""
    return any(matches_glob(absolute.replace(os.sep, "/") if os.path.isabs(p) else relative, p) for p in patterns)


def _lists_gitignore(names: list[str]) -> bool:
    """Whether a folder listing holds a ``.gitignore`` (in any case: on a file system that
    ignores case, opening ``.gitignore`` finds ``.GITIGNORE`` too)."""
    return ".gitignore" in names or any(len(name) == 10 and name.lower() == ".gitignore" for name in names)


def _ignored(rules: list[tuple[str, GitIgnore]], absolute: str, is_dir: bool) -> bool:
    decision = None
    for base, ignore in rules:  # outer files first, inner ones override
        relative = absolute[len(base) + 1 :].replace(os.sep, "/") if base != os.sep else absolute[1:]
        verdict = ignore.decision(relative, is_dir)
        if verdict is not None:
            decision = verdict
    return bool(decision)
