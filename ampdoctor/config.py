"""Configuration: discovery, validation, and rule selection.

Keys (all optional), in ``[tool.ampdoctor]`` of a pyproject.toml or at the top level of an
``ampdoctor.toml`` / ``.ampdoctor.toml``::

    extend = "../pyproject.toml"   # start from another file's configuration
    select = ["AMP"]               # codes or prefixes; default: every rule
    extend-select = []
    ignore = ["AMP103"]
    per-file-ignores = { "tests/*" = ["AMP2"] }
    exclude = ["third_party/**"]   # replaces nothing: always added to the built-in excludes
    extend-exclude = []
    fail-on = "warning"            # info | warning | error
    respect-gitignore = true
    project = true                 # follow calls across the project's modules (false: each file alone)

Each linted file gets the nearest configuration above it (in each folder ``.ampdoctor.toml``,
then ``ampdoctor.toml``, then a pyproject.toml with a ``[tool.ampdoctor]`` table), resolved once
per folder by ``Resolver``; ``--config FILE`` names one for every file, ``--isolated`` ignores
them all, and ``--config "KEY = VALUE"`` overrides a key of each. Any problem is a
``ConfigError`` with a one-line message naming the key.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import sys
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path, PurePosixPath

from .findings import Severity
from .records import Record

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from types import ModuleType


def _toml() -> ModuleType:
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
# In each folder, the first of these that exists is its configuration (as ruff's ``.ruff.toml``,
# ``ruff.toml``, ``pyproject.toml``); a pyproject.toml counts only with a [tool.ampdoctor] table.
CONFIG_NAMES = (".ampdoctor.toml", "ampdoctor.toml", "pyproject.toml")
_PYPROJECT_LABEL = "tool.ampdoctor."


class ConfigError(Exception):
    """A bad configuration value; the message is one line and names the key."""


class Settings(Record):
    """The effective configuration. ``root``: the folder paths are relative to (default: the
    current directory); ``source``: the configuration file it came from (a pyproject.toml, an
    ``ampdoctor.toml`` or ``.ampdoctor.toml``), if any."""

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
            if matches_glob(_absolute(path) if os.path.isabs(pattern) else relative, pattern):
                ignored.extend(codes)
        return tuple(ignored)

    def excludes(self, path: str) -> bool:
        """Whether the configured ``exclude`` matches ``path`` (absolute and real)."""
        relative = _relative(Path(path), self.root)
        return any(
            matches_glob(path.replace(os.sep, "/") if os.path.isabs(pattern) else relative, pattern)
            for pattern in self.exclude
        )

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


def validate_codes(values: Iterable[str], known: Iterable[str], key: str) -> tuple[str, ...]:
    """The codes or prefixes of ``values``, upper-cased; each must name a rule of ``known`` or of
    the catalog (a trace code, AMP5xx, is accepted and selects nothing that lint runs)."""
    known = list(known)
    result = []
    for raw in values:
        value = raw.strip().upper()
        if not value:
            continue
        if value != "ALL" and not any(code.startswith(value) for code in known):
            if not any(code.startswith(value) for code in _catalog_codes()):
                raise ConfigError(f"{key}: unknown rule code or prefix {raw!r}")
        result.append(value)
    return tuple(result)


def _catalog_codes() -> list[str]:
    """Every code the catalog documents (read only when a code is not a lint rule's)."""
    from .catalog import all_rules

    return list(all_rules())


def matches_glob(relative: str, pattern: str) -> bool:
    """Glob match on a POSIX relative path; a pattern without '/' also matches any basename.
    ``*`` also matches '/'; ``**/`` matches zero or more folders (``tests/**/*.py`` matches
    ``tests/test_a.py``), as in ruff."""
    pattern = pattern.strip().rstrip("/")
    if pattern.startswith("./"):
        pattern = pattern[2:]
    return any(_matches_one(relative, variant) for variant in _zero_folder_variants(pattern))


@functools.lru_cache(maxsize=256)
def _zero_folder_variants(pattern: str) -> tuple[str, ...]:
    """``pattern`` with each ``**/`` kept (one or more folders: ``*`` matches '/') or left out
    (zero folders)."""
    pieces = pattern.split("**/")
    variants = [pieces[0]]
    for piece in pieces[1:]:
        variants = [v + "**/" + piece for v in variants] + [v + piece for v in variants]
    return tuple(dict.fromkeys(variants))


def _matches_one(relative: str, pattern: str) -> bool:
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


def _absolute(path: Path) -> str:
    return path.resolve().as_posix()


# ---------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------


def find_config(start: Path) -> Path | None:
    """The nearest configuration file at or above ``start`` (``CONFIG_NAMES``, in each folder)."""
    here = start.resolve()
    if here.is_file() or not here.exists():
        here = here.parent
    for folder in (here, *here.parents):
        found = config_in(str(folder))
        if found is not None:
            return found
    return None


def config_in(folder: str, names: Collection[str] | None = None) -> Path | None:
    """The configuration file of one folder, or None. ``names``: the folder's listing, when the
    caller has it (a walk does): only the names in it are looked at."""
    for name in CONFIG_NAMES:
        path = os.path.join(folder, name)
        if names is not None and name not in names:
            continue
        if not os.path.isfile(path):
            continue
        if name != "pyproject.toml" or _has_our_table(path):
            return Path(path)
    return None


def _has_our_table(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError):
        return False
    if "ampdoctor" not in text:
        return False  # no [tool.ampdoctor] table can be in it: no need to parse it
    tomllib = _toml()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return "tool.ampdoctor" in text  # ours, and broken: loading it reports the error
    tool = data.get("tool")
    return isinstance(tool, dict) and "ampdoctor" in tool


def load_settings(path: Path, known_codes: Iterable[str], overrides: dict[str, object] | None = None) -> Settings:
    """The settings of one configuration file (``extend`` followed), ``overrides`` over them. A
    problem's message names the file (in a tree of sub-projects, which one is wrong)."""
    known = list(known_codes)
    path = Path(path)
    try:
        table, label = _resolved_table(path, known, ())
        if overrides:
            table = _layer(table, overrides)
        return settings_from_table(table, known, root=path.parent, source=path, label=label)
    except ConfigError as exc:
        message = str(exc)
        if str(path) in message:
            raise
        if message.startswith(f"{path.name}: "):  # a standalone file's keys are named after it
            message = message[len(path.name) + 2 :]
        raise ConfigError(f"{_shown(path)}: {message}") from None


def _shown(path: Path) -> str:
    """A configuration file as an error names it: relative to the current folder when below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


def _read_table(path: Path) -> tuple[dict[str, object], str]:
    """The configuration in one file, and how its keys are named in errors: a pyproject.toml's
    [tool.ampdoctor] table; another file's top level (a file that holds only a [tool.ampdoctor]
    table, as a pyproject.toml would, is read as one)."""
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
    wrapped = set(data) == {"tool"} and isinstance(data["tool"], dict) and "ampdoctor" in data["tool"]
    if path.name != "pyproject.toml" and not wrapped:
        return data, f"{path.name}: "
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"tool in {path} must be a table")
    table = tool.get("ampdoctor", {})
    if not isinstance(table, dict):
        raise ConfigError(f"tool.ampdoctor in {path} must be a table")
    return table, _PYPROJECT_LABEL


def _resolved_table(path: Path, known: list[str], chain: tuple[str, ...]) -> tuple[dict[str, object], str]:
    """The table of ``path`` over the tables it extends (``extend``, followed to the end), the
    paths of each resolved against its own file's folder."""
    table, label = _read_table(path)
    if "extend" not in table:
        return table, label
    target = table["extend"]
    if not isinstance(target, str) or not target.strip():
        raise ConfigError(f"{label}extend: expected the path of a configuration file")
    own = {key: value for key, value in table.items() if key != "extend"}
    settings_from_table(own, known, root=path.parent, source=path, label=label)  # errors named as its own
    here = os.path.dirname(os.path.abspath(path))
    base = Path(os.path.normpath(os.path.join(here, os.path.expanduser(target))))
    chain = (*chain, os.path.realpath(path))
    if os.path.realpath(base) in chain:
        cycle = " -> ".join([*chain[chain.index(os.path.realpath(base)) :], os.path.realpath(base)])
        raise ConfigError(f"{label}extend: the configurations extend each other in a cycle: {cycle}")
    if not base.is_file():
        raise ConfigError(f"{label}extend: no such file: {target} (extended by {path})")
    inherited, base_label = _resolved_table(base, known, chain)
    settings_from_table(inherited, known, root=base.parent, source=base, label=base_label)
    return _layer(_rebase(inherited, str(base.parent), here), own), label


def _layer(base: dict[str, object], top: dict[str, object]) -> dict[str, object]:
    """``top`` over ``base``, as ruff layers a configuration over the one it extends: a key of
    ``top`` replaces the same key of ``base``, except that ``extend-select``, ``ignore`` and
    ``extend-exclude`` add to it; a ``select`` of ``top`` starts the selection afresh."""
    merged = dict(base)
    if "select" in top:
        merged.pop("extend-select", None)
        merged.pop("ignore", None)
    for key, value in top.items():
        below = merged.get(key)
        if key in ("extend-select", "ignore", "extend-exclude") and isinstance(below, list) and isinstance(value, list):
            merged[key] = below + value
        else:
            merged[key] = value
    return merged


def _rebase(table: dict[str, object], base: str, here: str) -> dict[str, object]:
    """The patterns of a table read from the folder ``base``, for a table of the folder ``here``:
    a pattern with a '/' is anchored to ``base`` (made absolute); a bare name matches anywhere."""
    if os.path.abspath(base) == os.path.abspath(here):
        return table
    rebased = dict(table)
    for key in ("exclude", "extend-exclude"):
        patterns = rebased.get(key)
        if isinstance(patterns, list):
            rebased[key] = [_anchored(p, base) if isinstance(p, str) else p for p in patterns]
    ignores = rebased.get("per-file-ignores")
    if isinstance(ignores, dict):
        rebased["per-file-ignores"] = {_anchored(p, base): codes for p, codes in ignores.items()}
    return rebased


def _anchored(pattern: str, base: str) -> str:
    body = pattern.strip()
    if body.startswith("./"):
        body = body[2:]
    if "/" not in body.rstrip("/") or os.path.isabs(body):
        return pattern
    return os.path.normpath(os.path.join(os.path.abspath(base), body)).replace(os.sep, "/")


def parse_override(text: str, known_codes: Iterable[str]) -> dict[str, object]:
    """An inline ``--config "KEY = VALUE"`` override, validated; ConfigError if it is not one."""
    tomllib = _toml()
    try:
        table: dict[str, object] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config: {text!r} is neither a file nor a TOML 'KEY = VALUE' override ({exc})") from None
    if not table:
        raise ConfigError(f"--config: {text!r} is neither a file nor a TOML 'KEY = VALUE' override")
    if "extend" in table:
        raise ConfigError("--config extend: name the file with --config FILE instead")
    settings_from_table(table, known_codes, root=Path.cwd(), label="--config ")
    return table


def settings_from_table(
    table: dict[str, object],
    known_codes: Iterable[str],
    root: Path,
    source: Path | None = None,
    label: str = _PYPROJECT_LABEL,
) -> Settings:
    known = list(known_codes)
    unknown = sorted(set(table) - _KNOWN_KEYS)
    if unknown:
        names = ", ".join(sorted(_KNOWN_KEYS | {"extend"}))
        raise ConfigError(f"{label}{unknown[0]}: unknown key (known: {names})")
    settings = Settings(root=root, source=source)
    if "select" in table:
        settings.select = validate_codes(_strings(table, "select", label), known, f"{label}select")
    if "extend-select" in table:
        settings.extend_select = validate_codes(_strings(table, "extend-select", label), known, f"{label}extend-select")
    if "ignore" in table:
        settings.ignore = validate_codes(_strings(table, "ignore", label), known, f"{label}ignore")
    if "per-file-ignores" in table:
        settings.per_file_ignores = _per_file_ignores(table["per-file-ignores"], known, label)
    settings.exclude = _strings(table, "exclude", label) + _strings(table, "extend-exclude", label)
    if "fail-on" in table:
        value = table["fail-on"]
        if not isinstance(value, str):
            raise ConfigError(f"{label}fail-on: expected a string (info, warning or error)")
        try:
            settings.fail_on = Severity.parse(value)
        except ValueError as exc:
            raise ConfigError(f"{label}fail-on: {exc}") from None
    if "respect-gitignore" in table:
        value = table["respect-gitignore"]
        if not isinstance(value, bool):
            raise ConfigError(f"{label}respect-gitignore: expected true or false")
        settings.respect_gitignore = value
    if "project" in table:
        value = table["project"]
        if not isinstance(value, bool):
            raise ConfigError(f"{label}project: expected true or false")
        settings.project = value
    return settings


def _strings(table: dict[str, object], key: str, label: str = _PYPROJECT_LABEL) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{label}{key}: expected a list of strings")
    return tuple(value)


def _per_file_ignores(
    value: object, known: list[str], label: str = _PYPROJECT_LABEL
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    key = f"{label}per-file-ignores"
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a table of glob = [codes]")
    result = []
    for pattern, codes in value.items():
        if not isinstance(codes, list) or not all(isinstance(c, str) for c in codes):
            raise ConfigError(f"{key}.{pattern!r}: expected a list of rule codes")
        result.append((pattern, validate_codes(codes, known, f"{key}.{pattern!r}")))
    return tuple(result)
