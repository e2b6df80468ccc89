"""A summary's call records packed for the trip from a lint worker to the main process
(``project/packed_calls.py``): the same records, in the same place, when unpacked; the calls
inside an autocast region readable without unpacking; and the same findings and cache."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ampdoctor.config import Settings
from ampdoctor.lint import LintRequest, known_codes, lint_paths
from ampdoctor.lint.engine import decode_source, parse_source
from ampdoctor.lint.facts import build_facts
from ampdoctor.lint.project import packed_calls
from ampdoctor.lint.project.link import Project
from ampdoctor.lint.project.store_format import stored_entry
from ampdoctor.lint.project.summary import summarize

ROOT = Path(__file__).resolve().parents[1]
PROJECTS = ROOT / "fixtures" / "lint" / "projects"


def _summaries() -> dict[str, dict]:
    found = {}
    for path in sorted((ROOT / "fixtures" / "lint").rglob("*.py")):
        source = decode_source(path.read_bytes())
        try:
            tree = parse_source(source)
        except SyntaxError:
            continue
        found[str(path.relative_to(ROOT))] = summarize(build_facts(tree, source))
    return found


SUMMARIES = _summaries()
WITH_REGION_CALLS = [rel for rel, s in SUMMARIES.items() if any("region" in c for c in s.get("calls", []))]
FLOW_CALLS = sum(len(flow.get("calls", [])) for s in SUMMARIES.values() for flow in s.get("flows", {}).values())


def test_the_fixtures_hold_calls_inside_and_outside_autocast_regions_and_flow_calls():
    assert len(WITH_REGION_CALLS) >= 10
    assert FLOW_CALLS >= 500
    assert any(any("region" not in c for c in SUMMARIES[rel]["calls"]) for rel in WITH_REGION_CALLS)


def _heads(calls: list[dict]) -> list[tuple]:
    return [(c.get("callee", ""), bool(c.get("recv")), c["at"][0]) for c in calls]


@pytest.mark.parametrize("rel", sorted(SUMMARIES))
def test_unpacked_is_the_summary_made_and_the_heads_are_read_packed(rel):
    summary = SUMMARIES[rel]
    sent = packed_calls.packed(json.loads(json.dumps(summary)))
    assert "calls" not in sent if summary.get("calls") else "packed_calls" not in sent
    if summary.get("calls"):
        assert list(sent).index("packed_calls") == list(summary).index("calls")  # in its place
        assert packed_calls.region_calls(sent) == [c for c in summary["calls"] if "region" in c]
    for name, flow in summary.get("flows", {}).items():
        there = sent["flows"][name]
        if flow.get("calls"):
            assert "calls" not in there and list(there).index("packed_calls") == list(flow).index("calls")
        assert packed_calls.has_calls(there) == bool(flow.get("calls"))
        assert packed_calls.call_heads(there) == _heads(flow.get("calls", []))
        # the calls chosen by their heads: only those unpacked, the same as from the flow made
        with_receiver = [c for c in flow.get("calls", []) if c.get("recv")]
        assert list(packed_calls.calls_where(there, lambda _c, received, _l: received, keep=False)) == with_receiver
        assert all(isinstance(item, bytes) for item in there.get("packed_calls", []))  # (copies let go)
        assert list(packed_calls.calls_where(flow, lambda _c, received, _l: received)) == with_receiver
        assert list(packed_calls.calls_where(there, None, keep=False)) == flow.get("calls", [])
    again = packed_calls.unpacked(sent)
    assert again == summary and json.dumps(again) == json.dumps(summary)  # the same keys, in order
    # The cache stores the summary as it was made.
    assert stored_entry({"summary": sent})["text"] == stored_entry({"summary": summary})["text"]
    # Read in place: each part becomes the one made, wherever it is held.
    assert packed_calls.calls(sent) == summary.get("calls", [])
    for name, flow in summary.get("flows", {}).items():
        there = sent["flows"][name]
        assert packed_calls.flow_calls(there) == flow.get("calls", [])
        assert there == flow and list(there) == list(flow)
    assert sent == summary and json.dumps(sent) == json.dumps(summary)
    assert packed_calls.region_calls(sent) == [c for c in summary.get("calls", []) if "region" in c]


def test_a_project_answers_the_same_from_packed_summaries():
    unpacked = Project(set(WITH_REGION_CALLS), SUMMARIES.get)
    sent = {rel: packed_calls.packed(json.loads(json.dumps(SUMMARIES[rel]))) for rel in WITH_REGION_CALLS}
    packed = Project(set(WITH_REGION_CALLS), sent.get)
    for rel in WITH_REGION_CALLS:
        assert packed.region_calls(rel) == unpacked.region_calls(rel)
        assert "packed_calls" in sent[rel]  # the region calls were read without unpacking
    for rel in WITH_REGION_CALLS:
        for call in unpacked.calls(rel):
            short = call["callee"].rsplit(".", 1)[-1]
            assert packed.calls_naming(rel, short) == unpacked.calls_naming(rel, short)
        assert packed.calls(rel) == unpacked.calls(rel)


@pytest.fixture(scope="module")
def projects(tmp_path_factory) -> Path:
    """Every fixture project side by side in one marked folder."""
    root = tmp_path_factory.mktemp("projects")
    shutil.copytree(PROJECTS, root / "projects")
    (root / "pyproject.toml").write_text('[project]\nname = "p"\n', encoding="utf-8")
    return root


def _findings(root: Path, jobs: int, use_cache: bool = False) -> list[tuple]:
    settings = Settings(root=root)
    request = LintRequest(settings, settings.enabled_codes(known_codes()), use_cache=use_cache, jobs=jobs)
    run = lint_paths([root], request, cwd=root)
    return sorted((f.location.path, f.location.line, f.code, f.message, str(f.related)) for f in run.findings)


def test_workers_that_send_packed_summaries_find_what_one_process_finds(projects: Path, monkeypatch):
    monkeypatch.setattr("ampdoctor.lint.PARALLEL_THRESHOLD", 2)
    sent = []
    real = packed_calls.packed

    def record(summary):
        result = real(summary)
        sent.append("packed_calls" in result)
        return result

    monkeypatch.setattr(packed_calls, "packed", record)
    alone = _findings(projects, jobs=1)
    assert sent == []  # one process: nothing travels
    cross = {code for _path, _line, code, _message, related in alone if related != "[]"}
    assert {"AMP101", "AMP211", "AMP301"} <= cross  # cross-module findings, from region calls too
    # (the workers are forked from this process: the recording reaches them, but not its list)
    assert _findings(projects, jobs=2) == alone
    assert _findings(projects, jobs=2, use_cache=True) == alone
    assert _findings(projects, jobs=1, use_cache=True) == alone  # from the cache the workers filled
