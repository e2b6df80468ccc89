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


def test_the_fixtures_hold_calls_inside_and_outside_autocast_regions():
    assert len(WITH_REGION_CALLS) >= 10
    assert any(any("region" not in c for c in SUMMARIES[rel]["calls"]) for rel in WITH_REGION_CALLS)


@pytest.mark.parametrize("rel", sorted(SUMMARIES))
def test_unpacked_is_the_summary_made_and_the_region_calls_are_read_packed(rel):
    summary = SUMMARIES[rel]
    copy = json.loads(json.dumps(summary))
    sent = packed_calls.packed(copy)
    if not summary.get("calls"):
        assert sent is copy  # nothing to pack
        return
    assert "calls" not in sent and isinstance(sent["packed_calls"], bytes)
    assert list(sent).index("packed_calls") == list(summary).index("calls")  # in its place
    assert packed_calls.region_calls(sent) == [c for c in summary["calls"] if "region" in c]
    again = packed_calls.unpacked(sent)
    assert again == summary and list(again) == list(summary)
    assert json.dumps(again) == json.dumps(summary)
    # The cache stores the summary as it was made.
    assert stored_entry({"summary": sent})["text"] == stored_entry({"summary": summary})["text"]
    # Read in place: the summary becomes the one made, wherever it is held.
    assert packed_calls.calls(sent) == summary["calls"]
    assert sent == summary and list(sent) == list(summary)
    assert packed_calls.region_calls(sent) == [c for c in summary["calls"] if "region" in c]


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
