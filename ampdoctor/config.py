"""``[tool.ampdoctor]`` in pyproject.toml: discovery, validation, and rule selection.

Keys (all optional)::

    [tool.ampdoctor]
    select = ["AMP"]               # codes or prefixes; default: every rule
    extend-select = []
    ignore = ["AMP103"]
    per-file-ignores = { "tests/*" = ["AMP2"] }
    exclude = ["third_party/**"]   # replaces nothing: always added to the built-in excludes
    extend-exclude = []
    fail-on = "warning"            # info | warning | error
    respect-gitignore = true

The file is found by walking up from the first linted path to the nearest pyproject.toml that
has a ``[tool.ampdoctor]`` table; ``--config FILE`` names it, ``--isolated`` ignores it. Any
problem is a ``ConfigError`` with a one-line message naming the key.
"""

from __future__ import annotations

import fnmatch
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

from .findings import Severity
from .records import Record


def _toml():
    """The TOML parser, imported when a config file is read (most runs have nothing to read)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on older interpreters only
        import tomli as tomllib
    return tomllib


ALWAYS_ON = frozenset({"AMP000"})
_KNOWN_KEYS = {
    "select",
    "extend-select",
    "ignore",
    "per-file-ignores",
    "exclude",
    "extend-exclude",
    "fail-on",
    "respect-gitignore",
    "project",
}


class ConfigError(Exception):
    """A bad configuration value; the message is one line and names the key."""


class Settings(Record):
    """The effective configuration. ``root``: the folder paths are relative to (default: the
    current directory); ``source``: the pyproject.toml it came from, if any."""

    __slots__ = (
        "select",
        "extend_select",
        "ignore",
        "per_file_ignores",
        "exclude",
        "fail_on",
        "respect_gitignore",
        "root",
        "source",
        "project",
    )

    def __init__(
        self,
        select: tuple[str, ...] = ("AMP",),
        extend_select: tuple[str, ...] = (),
        ignore: tuple[str, ...] = (),
        per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = (),
        exclude: tuple[str, ...] = (),
        fail_on: Severity = Severity.WARNING,
        respect_gitignore: bool = True,
        root: Path | None = None,
        source: Path | None = None,
        project: bool = True,
    ) -> None:
        self.select = select
        self.extend_select = extend_select
        self.ignore = ignore
        self.per_file_ignores = per_file_ignores
        self.exclude = exclude
        self.fail_on = fail_on
        self.respect_gitignore = respect_gitignore
        self.root = Path.cwd() if root is None else root
        self.source = source
        # Follow calls into the project's other functions and modules (``project = false``,
        # or ``--no-project``: each file on its own).
        self.project = project

    def enabled_codes(self, known: Iterable[str]) -> frozenset[str]:
        return frozenset(
            c for c in known if c in ALWAYS_ON or _is_enabled(c, self.select + self.extend_select, self.ignore)
        )

    def ignored_for(self, path: Path) -> tuple[str, ...]:
        """Prefixes ignored for one file by ``per-file-ignores``."""
        relative = _relative(path, self.root)
        ignored: list[str] = []
        for pattern, codes in self.per_file_ignores:
            if matches_glob(relative, pattern):
                ignored.extend(codes)
        return tuple(ignored)

    def fingerprint(self) -> str:
        """Everything that changes which findings a file gets (for the cache key)."""
        return repr((self.select, self.extend_select, self.ignore, self.per_file_ignores))


def _is_enabled(code: str, selected: Sequence[str], ignored: Sequence[str]) -> bool:
    """The most specific matching prefix decides; on a tie, ignore wins (as in ruff)."""
    best_select = max((len(p) for p in selected if _prefix_matches(code, p)), default=-1)
    best_ignore = max((len(p) for p in ignored if _prefix_matches(code, p)), default=-1)
    return best_select > best_ignore


def _prefix_matches(code: str, prefix: str) -> bool:
    return prefix == "ALL" or code.startswith(prefix)


def is_code_ignored(code: str, prefixes: Sequence[str]) -> bool:
    return any(_prefix_matches(code, p) for p in prefixes)


def validate_codes(values: Iterable[str], known: Iterable[str], key: str) -> tuple[str, ...]:
    known = list(known)
    result = []
    for raw in values:
        value = raw.strip().upper()
        if not value:
            continue
        if value != "ALL" and not any(code.startswith(value) for code in known):
            raise ConfigError(f"{key}: unknown rule code or prefix {raw!r}")
        result.append(value)
    return tuple(result)


def matches_glob(relative: str, pattern: str) -> bool:
    """Glob match on a POSIX relative path; a pattern without '/' also matches any basename."""
    pattern = pattern.strip().rstrip("/")
    if pattern.startswith("./"):
        pattern = pattern[2:]
    path = PurePosixPath(relative)
    if "/" not in pattern:
        return any(fnmatch.fnmatchcase(part, pattern) for part in path.parts) or fnmatch.fnmatchcase(relative, pattern)
    if fnmatch.fnmatchcase(relative, pattern):
        return True
    # "dir/**" and "dir/*" also match everything below dir.
    if pattern.endswith("/**"):
        base = pattern[:-3]
        return relative == base or fnmatch.fnmatchcase(relative, base + "/*")
    return any(fnmatch.fnmatchcase(str(parent), pattern) for parent in path.parents if str(parent) != ".")


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


# ---------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------


def find_config(start: Path) -> Path | None:
    """The nearest pyproject.toml above ``start`` with a [tool.ampdoctor] table."""
    here = start.resolve()
    if here.is_file() or not here.exists():
        here = here.parent
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                text = candidate.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if "ampdoctor" not in text:
                continue  # no [tool.ampdoctor] table can be in it: no need to parse it
            tomllib = _toml()
            try:
                data = tomllib.loads(text)
            except tomllib.TOMLDecodeError:
                if "tool.ampdoctor" in text:
                    return candidate  # ours, and broken: loading it reports the error
                continue
            tool = data.get("tool")
            if isinstance(tool, dict) and "ampdoctor" in tool:
                return candidate
    return None


def load_settings(path: Path, known_codes: Iterable[str]) -> Settings:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"cannot read config {path}: not UTF-8") from None
    tomllib = _toml()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML in {path}: {exc}") from None
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"tool in {path} must be a table")
    table = tool.get("ampdoctor", {})
    if not isinstance(table, dict):
        raise ConfigError(f"tool.ampdoctor in {path} must be a table")
    return settings_from_table(table, known_codes, root=path.parent, source=path)


def settings_from_table(
    table: dict[str, object], known_codes: Iterable[str], root: Path, source: Path | None = None
) -> Settings:
    known = list(known_codes)
    unknown = sorted(set(table) - _KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"tool.ampdoctor.{unknown[0]}: unknown key (known: {', '.join(sorted(_KNOWN_KEYS))})")
    settings = Settings(root=root, source=source)
    if "select" in table:
        settings.select = validate_codes(_strings(table, "select"), known, "tool.ampdoctor.select")
    if "extend-select" in table:
        settings.extend_select = validate_codes(_strings(table, "extend-select"), known, "tool.ampdoctor.extend-select")
    if "ignore" in table:
        settings.ignore = validate_codes(_strings(table, "ignore"), known, "tool.ampdoctor.ignore")
    if "per-file-ignores" in table:
        settings.per_file_ignores = _per_file_ignores(table["per-file-ignores"], known)
    settings.exclude = _strings(table, "exclude") + _strings(table, "extend-exclude")
    if "fail-on" in table:
        value = table["fail-on"]
        if not isinstance(value, str):
            raise ConfigError("tool.ampdoctor.fail-on: expected a string (info, warning or error)")
        try:
            settings.fail_on = Severity.parse(value)
        except ValueError as exc:
            raise ConfigError(f"tool.ampdoctor.fail-on: {exc}") from None
    if "respect-gitignore" in table:
        value = table["respect-gitignore"]
        if not isinstance(value, bool):
            raise ConfigError("tool.ampdoctor.respect-gitignore: expected true or false")
        settings.respect_gitignore = value
    if "project" in table:
        value = table["project"]
        if not isinstance(value, bool):
            raise ConfigError("tool.ampdoctor.project: expected true or false")
        settings.project = value
    return settings


def _strings(table: dict[str, object], key: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"tool.ampdoctor.{key}: expected a list of strings")
    return tuple(value)


def _per_file_ignores(value: object, known: list[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    key = "tool.ampdoctor.per-file-ignores"
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a table of glob = [codes]")
    result = []
    for pattern, codes in value.items():
        if not isinstance(codes, list) or not all(isinstance(c, str) for c in codes):
            raise ConfigError(f"{key}.{pattern!r}: expected a list of rule codes")
        result.append((pattern, validate_codes(codes, known, f"{key}.{pattern!r}")))
    return tuple(result)
