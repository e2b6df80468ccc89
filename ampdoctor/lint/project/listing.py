"""The project's Python modules, with the listing kept between runs and each folder listed again
only when it changed.

The project pass needs every module of the project (a call may land in any of them), and a
pre-commit run lints one file of a project of thousands: a walk of the 31-repository tree
(3,647 modules in 877 folders) took 35-50 ms of the 0.22-0.30 s such a run took. A folder's
modification time changes whenever an entry is added to it, removed from it or renamed in it,
so the listing is kept with each folder's time, and a run asks each folder for its time (a
``stat``) instead of its entries; a folder whose time changed, or that changed less than
``RACY_NS`` before the listing was written (a change in the same clock tick would not show), is
listed again. Which folders are skipped is part of the key: a changed ``.gitignore`` lists anew.
"""

from __future__ import annotations

import os
import time
from hashlib import blake2b
from pathlib import Path

from .. import verbose
from ..cache import RACY_NS, beyond_newest, read_cache_document, write_cache_file

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from typing import Any

FORMAT = 1
_KEEP = 4  # listings kept in one cache folder


def project_modules(base: str, skipped: frozenset[str], limit: int, folder: Path | None) -> set[str] | None:
    """Project-relative POSIX paths of the ``.py`` files under ``base``, without descending into
    hidden folders, folders named in ``skipped``, or links to folders (as ``os.walk`` does not);
    None when there are more than ``limit``. ``folder``: the cache folder (None: nothing kept)."""
    started = time.time_ns()
    path = _listing_path(folder, base, skipped) if folder is not None else None
    known, trusted_before = _load(path) if path is not None else ({}, 0)
    walked = _walk(base, skipped, limit, known, trusted_before)
    if walked is None:
        return None
    found, listed, changed = walked
    if path is not None and (changed or len(listed) != len(known)):
        _save(path, listed, started)
    if verbose.on():
        how = f"{len(known)} folders' listings read from {path}" if known else "no listing kept"
        verbose.note(f"{len(found)} modules in {len(listed)} folders under {base} ({how})")
    return found


def _walk(
    base: str, skipped: frozenset[str], limit: int, known: dict[str, list[Any]], trusted_before: int
) -> tuple[set[str], dict[str, list[Any]], bool] | None:
    """The files, each folder's entry ([time, [folder names], [file names]]) and whether any
    was listed anew; None past ``limit``."""
    listed: dict[str, list[Any]] = {}
    found: set[str] = set()
    changed = False
    todo = [""]
    while todo:
        rel = todo.pop()
        where = f"{base}/{rel}" if rel else base
        try:
            mtime = os.stat(where).st_mtime_ns
        except OSError:
            changed = True
            continue
        entry = known.get(rel)
        if entry is None or entry[0] != mtime or mtime >= trusted_before:
            entry = [mtime, *_entries(where, skipped)]
            changed = True
        listed[rel] = entry
        if rel:
            found.update(f"{rel}/{name}" for name in entry[2])
            todo.extend(f"{rel}/{name}" for name in entry[1])
        else:
            found.update(entry[2])
            todo.extend(entry[1])
        if len(found) > limit:
            return None
    return found, listed, changed


def _entries(where: str, skipped: frozenset[str]) -> tuple[list[str], list[str]]:
    """The folder's subfolders to descend into and its ``.py`` files."""
    folders: list[str] = []
    files: list[str] = []
    try:
        with os.scandir(where) as entries:
            for entry in entries:
                name = entry.name
                try:
                    is_folder = entry.is_dir()
                except OSError:
                    is_folder = False
                if not is_folder:
                    if name.endswith(".py"):
                        files.append(name)
                elif name not in skipped and not name.startswith(".") and not entry.is_symlink():
                    folders.append(name)
    except OSError:
        pass  # an unreadable folder holds nothing the project can use, as in a walk
    return folders, files


def _listing_path(folder: Path, base: str, skipped: frozenset[str]) -> Path:
    # (a folder name may hold a byte that is not UTF-8: kept as the surrogate it is read as)
    key = blake2b(f"{FORMAT}|{base}|{sorted(skipped)}".encode("utf-8", "surrogateescape"), digest_size=12).hexdigest()
    return folder / f"listing-{key}.json"


def _load(path: Path) -> tuple[dict[str, list[Any]], int]:
    """The kept folders and the time before which their times are trusted."""
    document = read_cache_document(path, FORMAT, "folders")
    if document is None:
        return {}, 0
    folders, written = document["folders"], document.get("written_ns")
    if not isinstance(folders, dict) or not isinstance(written, int) or not all(map(_sound, folders.values())):
        return {}, 0
    return folders, written - RACY_NS


def _sound(entry: object) -> bool:
    """Whether a kept folder's entry has its shape: [time, [folder names], [file names]]."""
    return (
        type(entry) is list
        and len(entry) == 3
        and type(entry[0]) is int
        and type(entry[1]) is list
        and type(entry[2]) is list
        and all(type(name) is str for name in entry[1])
        and all(type(name) is str for name in entry[2])
    )


def _save(path: Path, listed: dict[str, list[Any]], started: int) -> None:
    # (the time the walk began: a folder changed while it ran is listed again next time)
    document = {"format": FORMAT, "written_ns": started, "folders": listed}
    try:
        path.parent.mkdir(exist_ok=True)
        write_cache_file(path, document)
        # A listing for other skipped folders (the .gitignore changed, another root) is left
        # behind: the newest few are kept.
        for old in beyond_newest(path.parent.glob("listing-*.json"), _KEEP):
            old.unlink(missing_ok=True)
    except OSError:
        pass  # a read-only project is listed in full each time
