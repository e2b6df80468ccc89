"""Writing the summaries cache (``store.py``): a small delta beside the index when few entries
changed (a pre-commit run on a few files of a large project), else the index and a new blob of
summary texts, written text by text, and the blobs no index points to let go."""

from __future__ import annotations

import os
import time

from .. import verbose
from ..cache import write_cache_file
from .store_format import FORMAT, cut, delta_path, drop_stores, stored_entry, summary_text

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path
    from typing import Any

# Up to this many changed entries go to the delta file; more, and the whole cache is rewritten.
# Rewriting the 3,642-entry cache of a 31-repository tree took 0.08 s; a delta of a few entries,
# under a millisecond.
_DELTA_ENTRIES = 256


def write_store(
    path: Path,
    entries: dict[str, dict[str, Any]],
    changed: set[str],
    delta_entries: dict[str, dict[str, Any] | None],
    written_ns: int,
    blob_name: str | None,
) -> None:
    """Write ``changed`` of ``entries`` to the cache at ``path``, as the index written at
    ``written_ns`` (0: none), its delta's ``delta_entries`` and its blob ``blob_name`` stand."""
    now = time.time_ns()
    try:
        path.parent.mkdir(exist_ok=True)
        delta = delta_path(path)
        if written_ns and len(changed | set(delta_entries)) <= _DELTA_ENTRIES:
            files = dict(delta_entries)
            for rel in changed:
                entry = entries.get(rel)
                files[rel] = None if entry is None else {**stored_entry(entry), "written_ns": now}
            write_cache_file(delta, {"format": FORMAT, "base": written_ns, "written_ns": now, "files": files})
            verbose.note(f"summaries written: {len(files)} entries to {delta} ({verbose.size(delta)})")
            return
        old = _blob_bytes(path, blob_name)
        written: dict[str, dict[str, Any]] = {}
        size = [0]

        def texts() -> Iterator[bytes]:
            # Each summary's text written as it is made: held all together, and joined, they
            # were 25 MB of a cold run's 180 MB peak on the 31-repository tree.
            for rel, entry in entries.items():
                stored = dict(stored_entry(entry))
                text = stored.pop("text", None)
                span = stored.pop("span", None)
                data = text.encode("utf-8") if text is not None else cut(old, span)
                if data is None and isinstance(entry.get("summary"), dict):
                    # its place in a blob that is gone, but decoded in this run: kept all the same
                    data = summary_text(entry["summary"]).encode("utf-8")
                if data is not None:
                    stored["span"] = [size[0], len(data)]
                    size[0] += len(data)
                    yield data
                written[rel] = stored

        # Named for the run that writes it: two runs writing at once never share a blob.
        blob = f"{path.stem}-{now}-{os.getpid()}.blob"
        write_cache_file(path.parent / blob, texts())
        document = {"format": FORMAT, "written_ns": now, "blob": blob, "blob_size": size[0], "files": written}
        write_cache_file(path, document)
        verbose.note(f"summaries written: {len(written)} entries to {path} and {blob}")
        if delta_entries:
            try:
                os.unlink(delta)
            except FileNotFoundError:
                pass  # a run beside this one removed it
        _drop_blobs(path, blob, blob_name, now)
        drop_stores(path.parent)
    except OSError:
        pass  # a read-only project still lints; it just is not cached


def _drop_blobs(path: Path, kept: str, previous: str | None, now: int) -> None:
    """Remove the blobs of this cache other than ``kept``: the one the index pointed to before
    (``previous``), and any a run writing beside this one left behind (only when older than a
    minute: a run that just wrote its blob may not have written its index yet)."""
    for blob in path.parent.glob(f"{path.stem}-*.blob"):
        if blob.name == kept:
            continue
        try:
            if blob.name == previous or blob.stat().st_mtime_ns < now - 60_000_000_000:
                blob.unlink()
        except OSError:
            pass


def _blob_bytes(path: Path, blob_name: str | None) -> bytes | None:
    """The whole blob the index points into (to copy the summaries kept unread), or None."""
    if blob_name is None:
        return None
    try:
        return (path.parent / blob_name).read_bytes()
    except OSError:
        return None
