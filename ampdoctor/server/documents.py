"""What the server lints: an editor's text, under the configuration of the folder it is in.

A document that is a file on disk is linted as ``ampdoctor lint FILE`` would lint it were the
text saved (``lint/unsaved.py``): its own rules on the text, and the project analysis with the
project's other modules read from disk and this one from the text. A buffer never saved is a
project of one module, as ``ampdoctor.lint_source`` lints a text. The configuration is the one
``ampdoctor lint`` would use for the file: the nearest one above it (``select``,
``extend-select``, ``ignore``, ``per-file-ignores``, ``project`` apply, and a file its
``exclude`` leaves out gets no diagnostics).

Nothing here imports the protocol's packages: the worker thread that lints runs only this.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from ..config import ConfigError, Settings, find_config, load_settings
from ..findings import Finding
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
    from ..lint.unsaved import lint_unsaved

    problem = None
    try:
        settings = configurations.for_path(path)
    except ConfigError as exc:
        settings, problem = Settings(), str(exc)
    if path is not None and _excluded(path, settings):
        return Outcome([], problem)
    codes = settings.enabled_codes(known_codes())
    return Outcome(lint_unsaved(text, path if path is not None else UNTITLED, settings, codes), problem)


def _excluded(path: str, settings: Settings) -> bool:
    """Whether the configuration's ``exclude`` leaves the file out of ``ampdoctor lint FILE``
    (the walk's own test, ``lint/discovery.py``)."""
    if not settings.exclude:
        return False
    from ..lint.discovery import Discovery

    walk = Discovery(settings.root, settings.exclude, respect_gitignore=False)
    return next(walk.names([Path(path)]), None) is None
