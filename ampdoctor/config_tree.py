"""Settings per folder: each linted file gets the nearest configuration above it.

As ruff's hierarchical configuration: ``ampdoctor lint a/t.py b/t.py`` lints each file with its
own folder's configuration, and a walk from a project's root lints a sub-project's files with
the sub-project's. Each folder is looked up once per run (a walk hands over its listing, so a
folder costs no file system call at all); each configuration file is read once. ``--config
FILE`` and ``--isolated`` give every file the same ``fixed`` settings.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable
from pathlib import Path

from .config import Settings, config_in, load_settings, settings_from_table


class Resolver:
    """The settings of each folder of a run. ``overrides``: inline ``--config KEY=VALUE``
    tables, laid over every configuration; ``adjust``: the command line's options, applied to
    every ``Settings`` handed out (the ``fixed`` one included)."""

    def __init__(
        self,
        known: Iterable[str],
        *,
        fixed: Settings | None = None,
        overrides: dict[str, object] | None = None,
        adjust: Callable[[Settings], None] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.known = list(known)
        self.fixed = fixed
        self.overrides = overrides or None
        self.adjust = adjust
        self.cwd = Path.cwd() if cwd is None else cwd
        self._folders: dict[str, Settings] = {}
        self._spelled: dict[str, Settings] = {}
        self._sources: dict[str, Settings] = {}
        self._codes: dict[int, frozenset[str]] = {}
        self._defaults: Settings | None = None
        if fixed is not None and adjust is not None:
            adjust(fixed)

    def folder(self, folder: str, names: Collection[str] | None = None) -> Settings:
        """The settings of ``folder`` (absolute and real): its own configuration, or its
        parent's. ``names``: the folder's listing, when the caller has it."""
        if self.fixed is not None:
            return self.fixed
        found = self._folders.get(folder)
        if found is not None:
            return found
        walked = []
        current = folder
        while True:
            known = self._folders.get(current)
            if known is not None:
                settings = known
                break
            walked.append(current)
            config = config_in(current, names if current == folder else None)
            if config is not None:
                settings = self._load(config)
                break
            parent = os.path.dirname(current)
            if parent == current:
                settings = self._default()
                break
            current = parent
        for name in walked:
            self._folders[name] = settings
        return settings

    def for_path(self, path: Path | str) -> Settings:
        """The settings of a file or folder, spelled as the user or a walk spells it."""
        if self.fixed is not None:
            return self.fixed
        spelled = str(path)
        found = self._spelled.get(spelled)
        if found is None:
            real = os.path.realpath(spelled)
            found = self.folder(real if os.path.isdir(real) else os.path.dirname(real))
            self._spelled[spelled] = found
        return found

    def for_file(self, name: str) -> Settings:
        """The settings of a listed file: looked up by its folder, once per folder."""
        if self.fixed is not None:
            return self.fixed
        return self.for_path(os.path.dirname(name) or ".")

    def codes(self, settings: Settings) -> frozenset[str]:
        """The rule codes ``settings`` enables (worked out once for each)."""
        found = self._codes.get(id(settings))
        if found is None:
            found = self._codes[id(settings)] = settings.enabled_codes(self.known)
        return found

    @property
    def several(self) -> bool:
        """Whether the files seen so far have more than one configuration."""
        return self.fixed is None and len({id(s) for s in self._folders.values()}) > 1

    def _load(self, config: Path) -> Settings:
        key = str(config)
        settings = self._sources.get(key)
        if settings is None:
            settings = load_settings(config, self.known, self.overrides)
            if self.adjust is not None:
                self.adjust(settings)
            self._sources[key] = settings
        return settings

    def _default(self) -> Settings:
        """Where no configuration is found: the defaults, the overrides over them."""
        if self._defaults is None:
            self._defaults = settings_from_table(self.overrides or {}, self.known, root=self.cwd, label="--config ")
            if self.adjust is not None:
                self.adjust(self._defaults)
        return self._defaults
