"""The project summary cache on disk: summaries kept as JSON text in a blob beside the index (each
entry says where its text lies) and decoded when asked for, and a small delta file beside the
cache when a run changes few entries (a pre-commit run on one file of a large project), merged on
the next load."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ampdoctor.lint.project import store as store_module
from ampdoctor.lint.project import store_format, store_write
from ampdoctor.lint.project.store import SummaryStore

HELPER = """\
import torch

def save_checkpoint(model, optimizer, path):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
"""


def project(root: Path, count: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    old = time.time() - 60  # out of the racy window: trusted by size and time on the next run
    for index in range(count):
        path = root / f"helper_{index}.py"
        path.write_text(HELPER.replace("save_checkpoint", f"save_{index}"), encoding="utf-8")
        os.utime(path, (old, old))
    return root


def warm(root: Path, count: int) -> Path:
    folder = root / ".ampdoctor_cache"
    store = SummaryStore(root, folder)
    for index in range(count):
        assert store.summary(f"helper_{index}.py")["functions"][f"save_{index}"]
    store.save()
    return folder


def stored_text(store: SummaryStore, rel: str) -> str:
    """The JSON text the cache holds for ``rel``: in the delta's entry, else in the blob."""
    document = json.loads(store.path.read_text(encoding="utf-8"))
    entry = store.entries[rel]
    if "text" in entry:
        return entry["text"]
    start, length = entry["span"]
    return (store.path.parent / document["blob"]).read_bytes()[start : start + length].decode("utf-8")


def edit(root: Path, index: int, name: str) -> None:
    path = root / f"helper_{index}.py"
    path.write_text(HELPER.replace("save_checkpoint", name), encoding="utf-8")
    old = time.time() - 30
    os.utime(path, (old, old))


def test_summaries_are_stored_as_text_and_decoded_only_when_asked_for(tmp_path: Path):
    root = project(tmp_path, 3)
    folder = warm(root, 3)
    document = json.loads(SummaryStore(root, folder).path.read_text(encoding="utf-8"))
    entries = document["files"].values()
    assert all("text" not in entry and "summary" not in entry and len(entry["span"]) == 2 for entry in entries)
    assert (folder / document["blob"]).is_file()
    store = SummaryStore(root, folder)
    assert all("summary" not in entry for entry in store.entries.values())
    assert store.summary("helper_1.py")["functions"]["save_1"]["params"] == ["model", "optimizer", "path"]
    assert [rel for rel, entry in store.entries.items() if "summary" in entry] == ["helper_1.py"]


def test_a_run_that_changes_one_file_writes_a_delta_and_the_next_load_sees_it(tmp_path: Path):
    root = project(tmp_path, 4)
    folder = warm(root, 4)
    base = SummaryStore(root, folder).path
    before = base.read_bytes()
    edit(root, 2, "save_renamed")
    store = SummaryStore(root, folder)
    assert "save_renamed" in store.summary("helper_2.py")["functions"]
    store.save()
    assert base.read_bytes() == before  # the large file is left as it was
    delta = base.with_name(base.stem + "-delta.json")
    assert set(json.loads(delta.read_text(encoding="utf-8"))["files"]) == {"helper_2.py"}
    again = SummaryStore(root, folder)
    assert "save_renamed" in again.summary("helper_2.py")["functions"]
    assert "save_0" in again.summary("helper_0.py")["functions"]


def test_a_removed_file_is_recorded_in_the_delta(tmp_path: Path):
    root = project(tmp_path, 3)
    folder = warm(root, 3)
    (root / "helper_1.py").unlink()
    store = SummaryStore(root, folder)
    store.forget_missing({"helper_0.py", "helper_2.py"})
    store.save()
    assert sorted(SummaryStore(root, folder).entries) == ["helper_0.py", "helper_2.py"]


def test_many_changes_rewrite_the_whole_file_and_drop_the_delta(tmp_path: Path, monkeypatch):
    root = project(tmp_path, 4)
    folder = warm(root, 4)
    edit(root, 0, "first_edit")
    store = SummaryStore(root, folder)
    store.summary("helper_0.py")
    store.save()
    base = store.path
    delta = base.with_name(base.stem + "-delta.json")
    assert delta.exists()
    monkeypatch.setattr(store_write, "_DELTA_ENTRIES", 1)
    for index in (1, 2):
        edit(root, index, f"edit_{index}")
    store = SummaryStore(root, folder)
    for index in (1, 2):
        store.summary(f"helper_{index}.py")
    store.save()
    assert not delta.exists()
    again = SummaryStore(root, folder)
    assert "first_edit" in stored_text(again, "helper_0.py") and "edit_2" in stored_text(again, "helper_2.py")
    assert "edit_1" in again.summary("helper_1.py")["functions"]
    # helper_3 was never read by the run that rewrote the cache: its text was carried over, and
    # the next run decodes it without summarizing the file again.
    monkeypatch.setattr(store_module, "summarize_bytes", lambda data: None)
    assert "save_3" in SummaryStore(root, folder).summary("helper_3.py")["functions"]
    assert len(list(folder.glob("*.blob"))) == 1  # the blob of the base before is gone


def test_a_delta_written_beside_another_base_is_ignored(tmp_path: Path):
    root = project(tmp_path, 2)
    folder = warm(root, 2)
    edit(root, 1, "in_the_delta")
    store = SummaryStore(root, folder)
    store.summary("helper_1.py")
    store.save()
    base = store.path
    document = json.loads(base.read_text(encoding="utf-8"))
    document["written_ns"] += 1  # the base was rewritten since (by another run)
    base.write_text(json.dumps(document), encoding="utf-8")
    stale = SummaryStore(root, folder)
    assert "in_the_delta" not in stored_text(stale, "helper_1.py")
    # The stale entry is not trusted: its file changed since, so it is summarized again.
    assert "in_the_delta" in stale.summary("helper_1.py")["functions"]


def test_a_damaged_delta_is_ignored(tmp_path: Path):
    root = project(tmp_path, 2)
    folder = warm(root, 2)
    base = SummaryStore(root, folder).path
    base.with_name(base.stem + "-delta.json").write_text("{not json", encoding="utf-8")
    assert SummaryStore(root, folder).summary("helper_0.py")["functions"]["save_0"]


def test_an_entry_of_the_delta_is_trusted_by_the_time_the_delta_was_written(tmp_path: Path):
    root = project(tmp_path, 2)
    folder = warm(root, 2)
    edit(root, 1, "edited")
    store = SummaryStore(root, folder)
    store.summary("helper_1.py")
    store.save()
    # The file was modified after the base was written and well before the delta was: trusted
    # by its size and time (not read again), as the base alone could not tell.
    base = store.path
    delta = base.with_name(base.stem + "-delta.json")
    mtime = (root / "helper_1.py").stat().st_mtime_ns
    document = json.loads(base.read_text(encoding="utf-8"))
    document["written_ns"] = mtime - 10_000_000_000
    base.write_text(json.dumps(document), encoding="utf-8")
    changes = json.loads(delta.read_text(encoding="utf-8"))
    changes["base"] = document["written_ns"]
    changes["files"]["helper_1.py"]["written_ns"] = mtime + 10_000_000_000
    delta.write_text(json.dumps(changes), encoding="utf-8")
    again = SummaryStore(root, folder)
    assert "edited" in again.summary("helper_1.py")["functions"]
    assert not again.dirty  # nothing was read, hashed or summarized again
    # Just before the delta was written: racy, so read and hashed again (and found unchanged).
    changes["files"]["helper_1.py"]["written_ns"] = mtime + 1_000_000_000
    delta.write_text(json.dumps(changes), encoding="utf-8")
    racy = SummaryStore(root, folder)
    assert "edited" in racy.summary("helper_1.py")["functions"]
    assert racy.changed == {"helper_1.py"}


def test_a_missing_or_damaged_blob_costs_only_a_summary_made_again(tmp_path: Path):
    root = project(tmp_path, 2)
    folder = warm(root, 2)
    (blob,) = folder.glob("*.blob")
    blob.write_bytes(blob.read_bytes()[:10])  # cut short
    assert SummaryStore(root, folder).summary("helper_1.py")["functions"]["save_1"]
    blob.unlink()
    store = SummaryStore(root, folder)
    assert store.summary("helper_0.py")["functions"]["save_0"]
    assert store.has_summary("helper_1.py")  # known to the index; its text is read when asked for


def test_a_rewrite_removes_the_blob_before_it_and_old_ones_left_by_other_runs(tmp_path: Path, monkeypatch):
    root = project(tmp_path, 3)
    folder = warm(root, 3)
    store = SummaryStore(root, folder)
    (current,) = folder.glob("*.blob")
    orphan = folder / f"{store.path.stem}-1-1.blob"  # left by a run that lost the race for the index
    orphan.write_bytes(b"{}")
    os.utime(orphan, (time.time() - 3600, time.time() - 3600))
    fresh = folder / f"{store.path.stem}-2-2.blob"  # another run's, written a moment ago
    fresh.write_bytes(b"{}")
    monkeypatch.setattr(store_write, "_DELTA_ENTRIES", 0)
    edit(root, 0, "rewritten")
    store.summary("helper_0.py")
    store.save()
    blobs = sorted(path.name for path in folder.glob("*.blob"))
    assert current.name not in blobs and orphan.name not in blobs and fresh.name in blobs and len(blobs) == 2
    assert "rewritten" in SummaryStore(root, folder).summary("helper_0.py")["functions"]


def test_a_blob_of_the_right_size_but_other_bytes_gives_no_wrong_summary(tmp_path: Path):
    # Whatever a span decodes to that is not a summary (a number, a string) is not taken for one.
    root = project(tmp_path, 2)
    folder = warm(root, 2)
    (blob,) = folder.glob("*.blob")
    blob.write_bytes(b"1" * blob.stat().st_size)
    store = SummaryStore(root, folder)
    assert store.summary("helper_0.py")["functions"]["save_0"]


def test_two_runs_rewriting_at_once_keep_what_the_last_one_decoded(tmp_path: Path, monkeypatch):
    root = project(tmp_path, 3)
    folder = warm(root, 3)
    monkeypatch.setattr(store_write, "_DELTA_ENTRIES", 0)
    first, second = SummaryStore(root, folder), SummaryStore(root, folder)
    assert second.summary("helper_1.py")["functions"]["save_1"]
    for store in (first, second):
        store.dirty = True
        store.changed.add("helper_0.py")
        store.save()  # the first removes the blob the second was loaded with
    monkeypatch.setattr(store_module, "summarize_bytes", lambda data: None)
    assert SummaryStore(root, folder).summary("helper_1.py")["functions"]["save_1"]  # kept, not made again


def test_the_stores_of_old_builds_are_removed_beyond_the_newest_few(tmp_path: Path):
    root = project(tmp_path / "p", 2)
    folder = root / ".ampdoctor_cache"
    folder.mkdir()
    old = time.time() - 3600
    stale = [f"summaries-{index:024x}" for index in range(store_format.KEEP_STORES + 2)]
    for age, stem in enumerate(stale):  # as earlier builds left them: an index, a blob, a delta
        for name in (f"{stem}.json", f"{stem}-1-2.blob", f"{stem}-delta.json", f"{stem}-reports.json"):
            (folder / name).write_text("{}")
            os.utime(folder / name, (old + age, old + age))
    warm(root, 2)  # a run of this build writes its store whole
    kept = {path.name.split("-")[1].split(".")[0] for path in folder.glob("summaries-*")}
    assert len(kept) == store_format.KEEP_STORES
    newest = [stem.split("-")[1] for stem in stale[-(store_format.KEEP_STORES - 1) :]]
    assert set(newest) < kept  # the newest of the old ones stay, beside this build's
    for stem in stale[: -(store_format.KEEP_STORES - 1)]:
        assert not list(folder.glob(f"{stem}*")), stem  # index, blob, delta and findings
    assert SummaryStore(root, folder).summary("helper_0.py") is not None


def test_the_imports_of_many_modules_share_one_copy_of_each_target(tmp_path: Path):
    (tmp_path / "a.py").write_text("import torch.nn as nn\nfrom utils import save\n")
    (tmp_path / "b.py").write_text("import os\nimport torch.nn as nn\n")
    store = SummaryStore(tmp_path, None)
    first, second = store.imports("a.py"), store.imports("b.py")
    assert first == [("torch.nn", True), ("utils", False), ("utils.save", False)]
    assert second == [("os", True), ("torch.nn", True)]
    assert first[0] is second[1]  # one pair for both, however many modules import it
