"""Related locations: a finding whose other half is in another function or module carries them
into every format (JSON ``related``, SARIF ``relatedLocations``, text ``note:`` lines)."""

from __future__ import annotations

import io
import json

from ampdoctor.findings import Finding, Location, Related, Severity
from ampdoctor.lint.report import ReportContext, render

SOURCE = "from utils import save_checkpoint\n\nsave_checkpoint(model, optimizer, path)\n"


def finding() -> Finding:
    return Finding(
        "AMP211",
        Severity.WARNING,
        "`save_checkpoint(...)` writes a checkpoint with the optimizer's state but not the GradScaler's",
        Location("train.py", 3, 1, 3, 40),
        help="Hand `scaler.state_dict()` to `save_checkpoint`",
        related=(
            Related("utils.py", 9, 5, "the checkpoint is written here, without the scaler's state"),
            Related("train.py", 1, 10, "the GradScaler whose state is left out"),
        ),
    )


def output(fmt: str, findings: list[Finding]) -> str:
    stream = io.StringIO()
    ctx = ReportContext(findings=findings, sources={"train.py": SOURCE}, files_checked=2)
    render(fmt, ctx, stream, color=False)
    return stream.getvalue()


def test_json_lists_related_locations_and_an_empty_list_otherwise():
    data = json.loads(output("json", [finding(), finding().replace(related=())]))
    assert data[0]["related"] == [
        {
            "path": "utils.py",
            "line": 9,
            "column": 5,
            "message": "the checkpoint is written here, without the scaler's state",
        },
        {"path": "train.py", "line": 1, "column": 10, "message": "the GradScaler whose state is left out"},
    ]
    assert data[1]["related"] == []


def test_sarif_has_related_locations_with_ids_and_messages():
    result = json.loads(output("sarif", [finding()]))["runs"][0]["results"][0]
    related = result["relatedLocations"]
    assert [r["id"] for r in related] == [0, 1]
    assert related[0]["physicalLocation"]["artifactLocation"]["uri"] == "utils.py"
    assert related[0]["physicalLocation"]["region"] == {"startLine": 9, "startColumn": 5}
    assert related[1]["message"]["text"] == "the GradScaler whose state is left out"
    plain = json.loads(output("sarif", [finding().replace(related=())]))["runs"][0]["results"][0]
    assert "relatedLocations" not in plain


def test_text_prints_a_note_per_related_location_before_help():
    text = output("text", [finding()])
    lines = text.splitlines()
    first = lines.index("note: the checkpoint is written here, without the scaler's state")
    assert lines[first + 1] == "  --> utils.py:9:5"
    assert lines[first + 2] == "note: the GradScaler whose state is left out"
    assert lines[first + 3] == "  --> train.py:1:10"
    assert lines[first + 4].startswith("help: Hand")


def test_related_locations_take_part_in_equality_and_survive_replace():
    assert finding() == finding()
    assert finding() != finding().replace(related=())
    assert finding().replace(message="x").related == finding().related
