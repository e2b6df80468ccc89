"""What the server lints: an editor's text, under the configuration of the folder it is in.

A document is linted as ``ampdoctor.lint_source`` lints a text: its own rules, and the calls
between its own functions and methods followed as in a project of one module. The configuration
is the one ``ampdoctor lint`` would use for the file: the nearest pyproject.toml above it with a
``[tool.ampdoctor]`` table (``select``, ``extend-select``, ``ignore`` and ``per-file-ignores``
apply). The project analysis across modules reads the other modules from disk and is left to
``ampdoctor lint``: a call into another module of the project is not followed here.

Nothing here imports the protocol's packages: the worker thread that lints runs only this.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from ..config import ConfigError, Settings, find_config, load_settings
from ..findings import PARSE_ERROR, Finding
from ..lint import known_codes
from ..records import Record

UNTITLED = "<untitled>"


def is_python(uri: str, language_id: str | None) -> bool:
    """Whether a document is Python source the server lints (notebooks are left out)."""
    if language_id:
        return language_id == "python"
    return urlsplit(uri).path.endswith((".py", ".pyi"))


class Outcome(Record):
    """A lint of one text: its findings, and the configuration problem met on the way (the text is
    then linted with the default configuration)."""

    __slots__ = ("findings", "config_error")

    def __init__(self, findings: list[Finding], config_error: str | None = None) -> None:
        self.findings = findings
        self.config_error = config_error


class Configurations:
    """Settings by pyproject.toml, read again when the file changes."""

    def __init__(self) -> None:
        self._loaded: dict[str, tuple[int, Settings]] = {}

    def for_path(self, path: str | None) -> Settings:
        """The settings for a file, or the defaults. Raises ConfigError."""
        start = Path(path) if path is not None else Path.cwd()
        found = find_config(start)
        if found is None:
            return Settings(root=start.parent if path is not None else start)
        key = str(found)
        try:
            stamp = found.stat().st_mtime_ns
        except OSError:
            stamp = -1
        cached = self._loaded.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        settings = load_settings(found, known_codes())
        self._loaded[key] = (stamp, settings)
        return settings


def lint_text(text: str, path: str | None, configurations: Configurations) -> Outcome:
    """Lint an editor's text as the file at ``path`` (None: a buffer never saved)."""
    from ..api import lint_source

    problem = None
    try:
        settings = configurations.for_path(path)
    except ConfigError as exc:
        settings, problem = Settings(), str(exc)
    findings = lint_source(
        text,
        path if path is not None else UNTITLED,
        select=settings.select + settings.extend_select,
        ignore=settings.ignore,
    )
    if path is not None and settings.per_file_ignores:
        ignored = settings.ignored_for(Path(path))
        findings = [
            f for f in findings if f.code == PARSE_ERROR or not any(f.code.startswith(prefix) for prefix in ignored)
        ]
    return Outcome(findings, problem)
