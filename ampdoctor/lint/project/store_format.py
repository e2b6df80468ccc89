"""How the summaries cache lies on disk (``store.py``): an index of entries, each summary kept
as its JSON text in a blob beside it (or inline, in a delta's entry), token classes as one
character each, and the old stores of a cache folder let go."""

from __future__ import annotations

import json
from pathlib import Path

from ..cache import beyond_newest
from .packed_calls import unpacked
from .tokens import CLASSES

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from typing import Any

    from .shapes import ModuleSummary

# The shape of a summary and of this cache's entries; bumped whenever either changes. Kept here,
# not in summary.py: a warm run reads summaries without importing the fact model or the rules.
FORMAT = 20
KEEP_STORES = 6  # summaries stores kept in one cache folder (``drop_stores``)


def has_text(entry: dict[str, Any]) -> bool:
    """Whether a stored entry holds its summary's text (inline, or where it lies in the blob)."""
    return "text" in entry or "span" in entry


def span_of(value: object) -> tuple[int, int] | None:
    """Where a summary's text lies in the blob (offset, length), if ``value`` says so."""
    if isinstance(value, list) and len(value) == 2 and all(type(n) is int and n >= 0 for n in value):
        return value[0], value[1]
    return None


def cut(blob: bytes | None, span: object) -> bytes | None:
    """The bytes of ``span`` in ``blob`` (a summary kept unread since it was stored)."""
    where = span_of(span)
    if blob is None or where is None:
        return None
    start, length = where
    data = blob[start : start + length]
    return data if len(data) == length else None


def drop_stores(folder: Path) -> None:
    """Keep the newest ``KEEP_STORES`` stores of the cache folder (one per ampdoctor build and
    project root): an upgrade, or an edit of an editable install, starts a new one, and the old
    ones (about 10 MB for 3,600 modules, with their blobs) would otherwise stay for good."""
    # An index, not a delta or the reused findings (``summaries-KEY-delta.json``).
    indexes = [path for path in folder.glob("summaries-*.json") if path.stem.count("-") == 1]
    for index in beyond_newest(indexes, KEEP_STORES):
        for path in folder.glob(f"{index.stem}*"):
            try:
                path.unlink()
            except OSError:
                pass


def delta_path(path: Path) -> Path:
    return path.with_name(path.stem + "-delta.json")


def summary_text(summary: ModuleSummary) -> str:
    """A summary's JSON text as the cache keeps it (its call records in their places)."""
    return json.dumps(unpacked(summary), separators=(",", ":"))


def stored_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry as the cache file holds it: a summary as its JSON text (``"text"``, moved into
    the blob when the whole cache is written), so that a run decodes only the summaries it asks
    for. Measured on the 3,642-file store of a 31-repository tree (8.8 MB of summaries): loading
    took 0.52 s with the summaries decoded, 0.08-0.16 s with them kept as text in the index, and
    0.03 s with the index alone (the texts in the blob); writing 0.31 s and 0.09 s. A summary
    decoded in this run and not remade keeps the text (or the place in the blob) it was read
    from.

    The token classes are kept as one character each, in ``CLASSES`` order: ``1`` held, ``0``
    not, ``-`` not looked for. As a mapping they were 563 of the index's 957 KiB on that tree,
    and reading the index took 28 ms of a 220 ms pre-commit run."""
    stored = {k: v for k, v in entry.items() if k != "summary"}
    if not has_text(entry):
        summary = entry.get("summary")
        if summary is not None:
            stored["text"] = summary_text(summary)
        elif "summary" in entry:
            stored["summary"] = None  # summarized, and nothing to link (it does not parse)
    known = entry.get("classes") or {}
    stored["classes"] = "".join("-" if kind not in known else "1" if known[kind] else "0" for kind in CLASSES)
    return stored


def stored_classes(stored: object) -> dict[str, bool]:
    """The token classes of an entry as the cache file holds them (``stored_entry``)."""
    if not isinstance(stored, str):
        return {}
    return {kind: flag == "1" for kind, flag in zip(CLASSES, stored) if flag != "-"}
