"""The result cache: lint results keyed by file content, ampdoctor build and effective settings.

Layout: ``<project>/.ampdoctor_cache/`` holds a ``.gitignore`` (``*``), a ``CACHEDIR.TAG`` and
one JSON file per combination of ampdoctor build and selected rules. Each entry maps a file path
to the hash of its bytes (plus the per-file ignores in force) and its findings. JSON rather than
pickle: a cache file is data, never code.

A file whose size and modification time match what the cache recorded is trusted without being
read (as git's index does), unless it was modified within two seconds of the cache being
written: such a "racy" entry is verified by its content hash.

The build fingerprint includes the version and the size and modification time of every module
and rule page of the installed package, so an editable install never serves stale results.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

try:  # the hash itself, without hashlib's OpenSSL bindings (a noticeable share of start-up)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - interpreters built without it
    from hashlib import blake2b

from .._version import __version__
from ..findings import Applicability, Edit, Finding, Fix, Location, Severity

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any

CACHE_DIR = ".ampdoctor_cache"
_KEEP_FILES = 8
# A run that changed at most this many entries (with those of the delta already there) writes
# a delta, not the whole file.
_DELTA_ENTRIES = 64
_FORMAT = 4
# A file modified this close to when a cache was written may have changed within the same
# timestamp tick: its entry is checked against its bytes, not trusted by its size and time.
RACY_NS = 2_000_000_000


def content_key(data: bytes, per_file_ignored: Iterable[str]) -> str:
    digest = blake2b(data, digest_size=16)
    digest.update(repr(tuple(per_file_ignored)).encode())
    return digest.hexdigest()


def settings_key(codes: Iterable[str] | None, per_file_ignored: Iterable[str]) -> str:
    """What an entry's file was linted with, where that is not the cache's own rule selection
    (``codes``: its configuration's, None for the cache's) or it has per-file ignores."""
    text = f"{sorted(codes) if codes is not None else None}|{tuple(per_file_ignored)}"
    return blake2b(text.encode(), digest_size=8).hexdigest()


_FINGERPRINT: list[str] = []  # computed once per process: the package does not change under it


def build_fingerprint() -> str:
    """The installed build, from every module's and rule page's size and time (one ``stat``
    each: 180 of them, 5-8 ms, asked for by the result cache and the summaries store alike)."""
    if not _FINGERPRINT:
        _FINGERPRINT.append(_fingerprint())
    return _FINGERPRINT[0]


def _fingerprint() -> str:
    package = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    # The interpreter's parser is part of the analysis: another Python may parse differently.
    parts = [__version__, str(_FORMAT), sys.version.split()[0]]
    for root, suffix, recurse in (
        (package, ".py", True),
        (os.path.join(package, "_rules"), ".md", False),
        (os.path.join(os.path.dirname(package), "rules"), ".md", False),
    ):
        found: list[str] = []
        for folder, subfolders, names in os.walk(root):
            if not recurse:
                subfolders.clear()
            found.extend(os.path.join(folder, name) for name in names if name.endswith(suffix))
        for path in sorted(found):
            stat = os.stat(path)
            parts.append(f"{os.path.relpath(path, root)}:{stat.st_size}:{stat.st_mtime_ns}")
    return blake2b("\n".join(parts).encode(), digest_size=12).hexdigest()


class ResultCache:
    """The entries of one build and rule selection: a file written whole (``lint-KEY.json``)
    and, where a run changed few entries (a pre-commit run on a few files of a large project), a
    small delta beside it (``lint-KEY.delta``) that the next read lays over it: rewriting 480 KiB
    for one changed file cost 18 ms of a 220 ms pre-commit run on 3,600 modules."""

    def __init__(self, root: Path, codes: Iterable[str]) -> None:
        self.folder = root / CACHE_DIR
        key = blake2b(f"{build_fingerprint()}|{sorted(codes)}".encode(), digest_size=12).hexdigest()
        self.path = self.folder / f"lint-{key}.json"
        self.entries: dict[str, dict[str, object]] = {}
        self.written_ns = 0
        self.dirty = False
        self.changed: set[str] = set()  # the entries made or changed in this run
        self._delta: dict[str, dict[str, object]] = {}  # the delta's entries, as stored
        self._entry_ns: dict[str, int] = {}  # when each entry of the delta was written
        self._load()

    def _load(self) -> None:
        data = read_cache_document(self.path, _FORMAT)
        if data is None:
            return
        self.entries = data["files"]
        self.written_ns = int(data.get("written_ns") or 0)
        for path, stored in read_delta(self.path.with_suffix(".delta"), _FORMAT, self.written_ns).items():
            if stored is not None:  # (this cache never removes an entry)
                entry = dict(stored)
                self._entry_ns[path] = entry.pop("written_ns")
                self.entries[path] = entry
                self._delta[path] = stored

    def _touch(self, path: str) -> None:
        self.dirty = True
        self.changed.add(path)

    def by_stat(self, path: str, stat: os.stat_result, cfg: str = "") -> dict[str, object] | None:
        """The entry for an unchanged file (same size and mtime, not racy), without reading it.
        ``cfg``: ``settings_key`` of the file's settings ("" for the cache's own)."""
        entry = self.entries.get(path)
        if not entry or entry.get("stat") != [stat.st_size, stat.st_mtime_ns] or entry.get("cfg", "") != cfg:
            return None
        if stat.st_mtime_ns >= self._entry_ns.get(path, self.written_ns) - RACY_NS:
            return None
        return entry

    def get(
        self, path: str, key: str, stat: os.stat_result | None = None, cfg: str = ""
    ) -> tuple[list[Finding], int] | None:
        entry = self.entries.get(path)
        if not entry or entry.get("key") != key or entry.get("cfg", "") != cfg:
            return None
        if stat is not None and entry.get("stat") != [stat.st_size, stat.st_mtime_ns]:
            entry["stat"] = [stat.st_size, stat.st_mtime_ns]  # touched but unchanged
            self._touch(path)
        return decode_entry(entry)

    def put(
        self,
        path: str,
        key: str,
        findings: list[Finding],
        suppressed: int,
        stat: os.stat_result | None = None,
        cfg: str = "",
        half_risk: bool | None = None,
    ) -> None:
        entry: dict[str, object] = {"key": key, "findings": [_encode(f) for f in findings], "suppressed": suppressed}
        if stat is not None:
            entry["stat"] = [stat.st_size, stat.st_mtime_ns]
        if cfg:
            entry["cfg"] = cfg
        if half_risk is not None:
            entry["h"] = int(half_risk)
        self.entries[path] = entry
        self._touch(path)

    def put_skipped(self, path: str, stat: os.stat_result, cfg: str = "", half_risk: bool | None = None) -> None:
        """A file the prefilter passed over: nothing to report while it stays unchanged.
        ``half_risk``: for a run that links the project, whether the file holds what float16
        autocast set up elsewhere breaks (``project.tokens.float16_risk``), kept as ``h`` so that
        a later run served from the cache need not read the file again to know."""
        entry: dict[str, object] = {"skip": True, "stat": [stat.st_size, stat.st_mtime_ns]}
        if cfg:
            entry["cfg"] = cfg
        if half_risk is not None:
            entry["h"] = int(half_risk)
        if self.entries.get(path) != entry:
            self.entries[path] = entry
            self._touch(path)

    def save(self) -> Path | None:
        """Write what changed; the file written (the delta or the whole), None for none."""
        if not self.dirty:
            return None
        now = time.time_ns()
        try:
            self.folder.mkdir(exist_ok=True)
            gitignore = self.folder / ".gitignore"
            if not gitignore.exists():
                gitignore.write_text("# Created by ampdoctor\n*\n", encoding="utf-8")
                (self.folder / "CACHEDIR.TAG").write_text(
                    "Signature: 8a477f597d28d172789f06886806bc55\n# ampdoctor result cache\n", encoding="utf-8"
                )
            delta = self.path.with_suffix(".delta")
            if self.written_ns and len(self.changed | set(self._delta)) <= _DELTA_ENTRIES:
                files = dict(self._delta)
                for path in self.changed:
                    files[path] = {**self.entries[path], "written_ns": now}
                write_cache_file(delta, {"format": _FORMAT, "base": self.written_ns, "written_ns": now, "files": files})
                return delta
            write_cache_file(self.path, {"format": _FORMAT, "written_ns": now, "files": self.entries})
            if self._delta:
                delta.unlink(missing_ok=True)
            self._prune()
            return self.path
        except OSError:
            return None  # a read-only project still lints; it just is not cached

    def _prune(self) -> None:
        for old in beyond_newest(self.folder.glob("lint-*.json"), _KEEP_FILES):
            old.unlink(missing_ok=True)
            old.with_suffix(".delta").unlink(missing_ok=True)


def read_cache_document(path: Path, format: int, key: str = "files") -> dict[str, Any] | None:
    """A cache document of this ``format`` whose ``key`` holds a mapping, or None (missing,
    damaged, or written by another format)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(data, dict) and data.get("format") == format and isinstance(data.get(key), dict):
        return data
    return None


def read_delta(path: Path, format: int, base_ns: int) -> dict[str, dict[str, Any] | None]:
    """The entries of a delta file written over the whole file of ``base_ns`` (none where it
    is missing, damaged, or was written over another base), each a stored entry with its own
    ``written_ns``, or None for an entry removed."""
    delta = read_cache_document(path, format)
    if delta is None or delta.get("base") != base_ns:
        return {}
    return {
        name: stored
        for name, stored in delta["files"].items()
        if stored is None or (isinstance(stored, dict) and isinstance(stored.get("written_ns"), int))
    }


def beyond_newest(paths: Iterable[Path], count: int) -> list[Path]:
    """The paths other than the ``count`` most recently modified (those that vanish meanwhile
    left out): what a cache folder prunes."""
    dated = []
    for path in paths:
        try:
            dated.append((path.stat().st_mtime_ns, path))
        except OSError:
            pass
    return [path for _, path in sorted(dated, reverse=True)[count:]]


def write_cache_file(path: Path, document: dict[str, Any] | bytes | Iterator[bytes]) -> None:
    """Write a cache document (or bytes, or the pieces of bytes an iterator makes, written as
    they come) atomically: a temporary file in the same folder, under a name no other process
    uses (``tempfile`` would cost more to import than the whole write), then a rename. Unlike
    ``ampdoctor.atomic`` (reports the user keeps), no ``fsync``: a cache lost to a crash is only
    a miss, and a pre-commit run should not wait for the disk."""
    temp = path.parent / f".{path.stem}-{os.getpid()}-{time.monotonic_ns()}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "wb") as handle:
            if isinstance(document, dict):
                # ``dumps`` in one piece: ``dump`` to a file takes json's pure-Python encoder.
                handle.write(json.dumps(document, separators=(",", ":")).encode())
            elif isinstance(document, bytes):
                handle.write(document)
            else:
                handle.writelines(document)
        os.replace(temp, path)
    except BaseException as exc:  # the pieces' maker may raise too: no temporary file is left
        try:
            os.unlink(temp)
        except OSError:
            pass
        if not isinstance(exc, OSError):
            raise


def decode_entry(entry: dict[str, Any]) -> tuple[list[Finding], int] | None:
    try:
        return [_finding(item) for item in entry["findings"]], int(entry["suppressed"])
    except (KeyError, TypeError, ValueError):
        return None


def _encode(finding: Finding) -> dict[str, object]:
    loc = finding.location
    return {
        "code": finding.code,
        "severity": finding.severity.name,
        "message": finding.message,
        "loc": [loc.path, loc.line, loc.column, loc.end_line, loc.end_column, loc.cell],
        "help": finding.help,
        "fix": None
        if finding.fix is None
        else {
            "description": finding.fix.description,
            "applicability": finding.fix.applicability.value,
            "edits": [[e.line, e.column, e.end_line, e.end_column, e.content] for e in finding.fix.edits],
        },
        "extra": finding.extra,
    }


def _finding(item: dict[str, Any]) -> Finding:
    fix = None
    if item["fix"] is not None:
        raw = item["fix"]
        fix = Fix(raw["description"], tuple(Edit(*e) for e in raw["edits"]), Applicability(raw["applicability"]))
    return Finding(
        code=item["code"],
        severity=Severity[item["severity"]],
        message=item["message"],
        location=Location(*item["loc"]),
        fix=fix,
        help=item["help"],
        extra=item["extra"],
    )
