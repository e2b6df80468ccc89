"""The last run's cross-module findings, reused when nothing in the project has changed.

A warm run of a whole tree takes every file's own findings from the result cache, but the
project checks would run again from the summaries: on the 31-repository tree of the lint-at-scale
benchmark (3,647 files) they were three quarters of a warm run. Their findings depend only on
the project's files, the codes asked for and which files are reported, so they are kept beside
the summary cache (``summaries-*-reports.json``) under a key made of those: every project
file's path, size and modification time, the codes, and the reported files.

A file modified less than two seconds before the key is made could change again without its
size or time telling (the "racy" case of the caches): then no key is made, and the checks run.
The key costs one ``stat`` per project file, so it is made only when the run reports at least
half of the project (a whole tree), not for a pre-commit run on a few files.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path

try:
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - interpreters built without it
    from hashlib import blake2b

from ..cache import RACY_NS, write_cache_file
from .reports import CrossReport
from .store_format import FORMAT

# The share of the project a run must report for the key to be worth its ``stat`` calls.
_SHARE = 0.5


def state_key(
    root: Path,
    files: list[str],
    reported: int,
    codes: frozenset[str],
    checked: list[str],
    lazy: list[str],
    seen: Mapping[str, tuple[int, int]] | None = None,
) -> str | None:
    """The key of the project as it is now, for these codes and reported files; None when the
    run reports too little of the project, or a file was modified within the racy window.
    ``seen``: (size, modification time in ns) of the files the lint pass looked at, by
    project-relative path, taken instead of looking again (on the 31-repository tree, 4,558
    ``stat`` calls: 13 of a warm run's 255 ms)."""
    if not files or reported < _SHARE * len(files):
        return None
    known = seen or {}
    limit = time.time_ns() - RACY_NS
    base = str(root)
    lines = [json.dumps([sorted(codes), checked, lazy])]
    for rel in files:
        found = known.get(rel)
        if found is None:
            try:
                stat = os.stat(os.path.join(base, rel))
            except OSError:
                lines.append(f"{rel}\0-\n")
                continue
            found = stat.st_size, stat.st_mtime_ns
        if found[1] >= limit:
            return None
        lines.append(f"{rel}\0{found[0]}\0{found[1]}\n")
    digest = blake2b(digest_size=16)
    digest.update("".join(lines).encode("utf-8", "surrogateescape"))  # (a file name's stray bytes)
    return digest.hexdigest()


def reports_path(summaries: Path) -> Path:
    return summaries.with_name(summaries.stem + "-reports.json")


def load_reports(path: Path, key: str) -> list[CrossReport] | None:
    """The findings kept under ``key``; None when there are none (or the file is damaged)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or document.get("format") != FORMAT or document.get("key") != key:
        return None
    try:
        return [
            CrossReport(code, module, at, message, help, [(m, a, t) for m, a, t in related])
            for code, module, at, message, help, related in document["reports"]
        ]
    except (KeyError, TypeError, ValueError):
        return None


def save_reports(path: Path, key: str, reports: list[CrossReport]) -> None:
    """Keep ``reports`` under ``key`` (written atomically; a read-only folder keeps nothing)."""
    document = {
        "format": FORMAT,
        "key": key,
        "reports": [[r.code, r.module, r.at, r.message, r.help, [list(x) for x in r.related]] for r in reports],
    }
    try:
        path.parent.mkdir(exist_ok=True)
        write_cache_file(path, document)
    except OSError:
        pass
