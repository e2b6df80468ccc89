"""The summaries cache writes its blob summary by summary (``SummaryStore.save``): a store read
back holds every summary as the lint pass made it, those sent packed included."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from ampdoctor.lint.engine import parse_source
from ampdoctor.lint.facts import build_facts
from ampdoctor.lint.project.packed_calls import packed
from ampdoctor.lint.project.store import SummaryStore
from ampdoctor.lint.project.summary import summarize

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "fixtures" / "lint" / "projects" / "checkpoint_trainer_method"


def test_a_saved_store_reads_back_each_summary_as_made(tmp_path: Path):
    root = tmp_path / "p"
    root.mkdir()
    made = {}
    for path in sorted(PROJECT.rglob("*.py")):
        rel = str(path.relative_to(PROJECT))
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(path.read_bytes())
        source = textwrap.dedent(path.read_text())
        made[rel] = summarize(build_facts(parse_source(source), source))
    assert len(made) >= 2 and any(s.get("calls") for s in made.values())
    folder = tmp_path / "cache"
    store = SummaryStore(root, folder)
    for index, (rel, summary) in enumerate(sorted(made.items())):
        sent = packed(json.loads(json.dumps(summary))) if index % 2 else summary  # both forms
        store.put(rel, (root / rel).read_bytes(), sent)
    store.save()
    blobs = list(folder.glob("*.blob"))
    assert len(blobs) == 1
    again = SummaryStore(root, folder)
    for rel, summary in made.items():
        assert again.summary(rel) == summary, rel
    assert (again.decoded, again.made) == (len(made), 0)  # read from the blob, none made again
    # the blob is the summaries' texts one after the other, nothing else
    assert blobs[0].stat().st_size == sum(len(json.dumps(s, separators=(",", ":")).encode()) for s in made.values())
