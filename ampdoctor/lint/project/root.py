"""Which project a set of linted paths belongs to.

``ampdoctor lint src/`` lints a tree: the tree is the project. A pre-commit hook hands over only
the changed files; their project is the nearest folder above them (or the folder itself) that
holds ``pyproject.toml``, ``setup.cfg`` or ``.git``. Files of the project that were not named
still take part through their summaries (read from the cache while they are unchanged), but
only the named files are reported.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

MARKERS = ("pyproject.toml", "setup.cfg", ".git")
# Folders that hold installed packages, not the code of the project around them (the project's
# own listing skips them too): a module below one belongs to no marked folder above it.
ENVIRONMENT_FOLDERS = frozenset({"site-packages", "dist-packages", ".venv", "venv", ".tox", ".nox", ".eggs"})


def marked_folder(start: Path) -> Path | None:
    """The nearest folder at or above ``start`` holding one of ``MARKERS``."""
    folder = start if start.is_dir() else start.parent
    found = _marked(os.path.abspath(folder), {})
    return Path(found) if found is not None else None


def _marked(folder: str, known: dict[str, str | None]) -> str | None:
    """``marked_folder`` on an absolute path; ``known`` holds the folders already looked at
    (a tree's folders share their parents: each is looked at once per run)."""
    walked = []
    found = None
    while True:
        if folder in known:
            found = known[folder]
            break
        walked.append(folder)
        if any(os.path.exists(os.path.join(folder, marker)) for marker in MARKERS):
            found = folder
            break
        if os.path.basename(folder) in ENVIRONMENT_FOLDERS:
            break  # an installed package: the project around the environment is not its project
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    for name in walked:
        known[name] = found
    return found


def project_root(paths: Iterable[Path | str]) -> Path | None:
    """The project of the linted paths: the marked folder above them all, when they share one.

    None when a path is outside every marked folder or the paths belong to different projects:
    then the linted files alone are the project.
    """
    roots = set()
    seen: set[str] = set()
    known: dict[str, str | None] = {}
    for path in paths:
        folder = os.path.dirname(os.path.abspath(path))
        if folder in seen:
            continue  # a tree's files share few folders: each is looked up once
        seen.add(folder)
        root = _marked(folder, known)
        if root is None:
            return None
        roots.add(root)
        if len(roots) > 1:
            return None
    return Path(roots.pop()) if roots else None


def module_name(path: Path, root: Path) -> str | None:
    """``pkg.sub.mod`` for ``root/pkg/sub/mod.py`` (``pkg.sub`` for its ``__init__.py``)."""
    try:
        parts = list(path.relative_to(root).with_suffix("").parts)
    except ValueError:
        return None
    if parts and parts[-1] == "__init__":
        parts.pop()
    if not parts or not all(p.isidentifier() for p in parts):
        return None
    return ".".join(parts)
