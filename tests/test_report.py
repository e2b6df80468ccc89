"""The lint reporters: text, concise, json, sarif and github."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ampdoctor._version import __version__
from ampdoctor.catalog import get_rule, rule_name
from ampdoctor.findings import Applicability, Edit, Finding, Fix, Location, Severity
from ampdoctor.lint.report import FORMATS, ReportContext, render, source_key

ROOT = Path(__file__).resolve().parent.parent
ANSI = re.compile(r"\x1b\[")

TRAIN = """\
import torch

scaler = torch.cuda.amp.GradScaler()
for x, y in loader:
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
"""
CELL = """\
for x, y in loader:
\tscaler.scale(loss).backward()
\tclip_grad_norm_(model.parameters(), 1.0)
\tscaler.step(opt)
"""
NOTEBOOK = "notebooks/train.ipynb"


def clip_finding() -> Finding:
    fix = Fix(
        "Insert `scaler.unscale_(optimizer)` before clipping",
        (Edit(6, 5, 6, 5, "scaler.unscale_(optimizer)\n    "),),
    )
    return Finding(
        "AMP201",
        Severity.ERROR,
        "Gradients are clipped before `scaler.unscale_(optimizer)`.",
        Location("train.py", 6, 5, 6, 60),
        fix=fix,
    )


def deprecated_finding() -> Finding:
    fix = Fix(
        'Use `torch.amp.GradScaler("cuda")`',
        (Edit(3, 10, 3, 37, 'torch.amp.GradScaler("cuda")'),),
        Applicability.UNSAFE,
    )
    return Finding(
        "AMP401",
        Severity.WARNING,
        "`torch.cuda.amp.GradScaler` is deprecated [bold]since[/bold] torch 2.4",
        Location("train.py", 3, 10, 3, 37),
        fix=fix,
    )


def notebook_finding() -> Finding:
    return Finding(
        "AMP201",
        Severity.ERROR,
        "Gradients are clipped before `scaler.unscale_(opt)`.",
        Location(NOTEBOOK, 3, 2, 3, 42, cell=4),
        help="Call `scaler.unscale_(opt)` before clipping",
    )


def unknown_finding() -> Finding:
    # A code without a rule page must still render everywhere.
    return Finding(
        "AMP999",
        Severity.INFO,
        "loss scale 100% stuck\nfor 3 steps",
        Location("dir, with comma/run:1.py", 4, 1, 6, 2),
    )


def all_findings() -> list[Finding]:
    return [notebook_finding(), deprecated_finding(), clip_finding(), unknown_finding()]


def context(findings=None, **kwargs) -> ReportContext:
    sources = {"train.py": TRAIN, source_key(NOTEBOOK, 4): CELL}
    findings = all_findings() if findings is None else findings
    return ReportContext(findings=findings, sources=sources, files_checked=3, **kwargs)


def output(fmt: str, ctx: ReportContext, *, color: bool = False) -> str:
    stream = io.StringIO()
    render(fmt, ctx, stream, color=color)
    return stream.getvalue()


def test_formats_are_the_documented_ones():
    assert FORMATS == (
        "text",
        "concise",
        "json",
        "sarif",
        "github",
        "junit",
        "gitlab",
        "pylint",
        "json-lines",
        "grouped",
        "rdjson",
    )
    with pytest.raises(ValueError, match="unknown output format 'html'"):
        render("html", context(), io.StringIO(), color=False)


def test_source_key_names_the_cell():
    assert source_key("a.py") == "a.py"
    assert source_key("nb.ipynb", 3) == "nb.ipynb#cell3"


def test_importing_the_package_does_not_import_rich_or_the_formats():
    code = (
        "import sys, ampdoctor.lint.report\n"
        "loaded = [m for m in sys.modules if m == 'rich' or m.startswith(('rich.', 'ampdoctor.lint.report.'))]\n"
        "print(loaded)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# concise


def test_concise_exact():
    expected = (
        "notebooks/train.ipynb:cell 4:3:2: AMP201 [error] Gradients are clipped before `scaler.unscale_(opt)`.\n"
        "train.py:3:10: AMP401 [warning] `torch.cuda.amp.GradScaler` is deprecated [bold]since[/bold] torch 2.4\n"
        "train.py:6:5: AMP201 [error] Gradients are clipped before `scaler.unscale_(optimizer)`.\n"
        "dir, with comma/run:1.py:4:1: AMP999 [info] loss scale 100% stuck for 3 steps\n"
        "Found 4 problems (1 fixable with --fix).\n"
    )
    assert output("concise", context()) == expected


def test_concise_colours_only_the_code():
    out = output("concise", context([clip_finding()]), color=True)
    assert out.splitlines()[0] == (
        "train.py:6:5: \x1b[1;31mAMP201\x1b[0m [error] Gradients are clipped before `scaler.unscale_(optimizer)`."
    )


def test_concise_no_findings():
    assert output("concise", context([])) == "All checks passed!\n"


# github


def test_github_exact():
    title_401 = "AMP401" if rule_name("AMP401") == "AMP401" else f"AMP401 {rule_name('AMP401')}"
    expected = (
        "::error file=notebooks/train.ipynb,title=AMP201 clip-before-unscale::"
        "cell 4, line 3, column 2: Gradients are clipped before `scaler.unscale_(opt)`.\n"
        f"::warning file=train.py,line=3,col=10,endLine=3,endColumn=37,title={title_401}::"
        "`torch.cuda.amp.GradScaler` is deprecated [bold]since[/bold] torch 2.4\n"
        "::error file=train.py,line=6,col=5,endLine=6,endColumn=60,title=AMP201 clip-before-unscale::"
        "Gradients are clipped before `scaler.unscale_(optimizer)`.\n"
        "::notice file=dir%2C with comma/run%3A1.py,line=4,col=1,endLine=6,endColumn=2,title=AMP999::"
        "loss scale 100%25 stuck%0Afor 3 steps\n"
    )
    assert output("github", context()) == expected


def test_github_escapes_carriage_returns_and_ignores_colour():
    finding = Finding("AMP201", Severity.WARNING, "a\r\nb %0A", Location("t.py", 1, 1))
    out = output("github", context([finding]), color=True)
    assert out == ("::warning file=t.py,line=1,col=1,title=AMP201 clip-before-unscale::a%0D%0Ab %250A\n")


# text


def test_text_plain_has_no_escape_codes_and_is_ascii():
    out = output("text", context())
    assert not ANSI.search(out)
    assert out.isascii()


def test_text_header_snippet_caret_help_and_blank_line():
    out = output("text", context([clip_finding()]))
    lines = out.splitlines()
    assert lines[0] == "train.py:6:5: AMP201 Gradients are clipped before `scaler.unscale_(optimizer)`."
    assert lines[1] == "  |"
    assert lines[2] == "6 |     torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
    caret_line = lines[3]
    assert caret_line.startswith("  | ")
    start = caret_line.index("^")
    assert caret_line[start:] == "^" * 55
    # The carets sit exactly under the span (columns 5 to 59 of the source line).
    assert lines[2][start : start + 55] == "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
    assert lines[4] == "  |"
    assert lines[5] == "help: Insert `scaler.unscale_(optimizer)` before clipping"
    assert lines[6] == ""
    assert lines[7] == "Found 1 problem (1 fixable with --fix)."
    assert lines[8] == ("Codes: AMP201 clip-before-unscale (1). Run 'ampdoctor rule AMP201' for details.")
    assert len(lines) == 9


def test_text_notebook_finding_names_the_cell_and_shows_the_cell_line():
    out = output("text", context([notebook_finding()]))
    lines = out.splitlines()
    assert lines[0] == ("notebooks/train.ipynb:cell 4:3:2: AMP201 Gradients are clipped before `scaler.unscale_(opt)`.")
    # The cell's own third line, with its tab expanded; carets measured on the expanded text.
    assert lines[2] == "3 |     clip_grad_norm_(model.parameters(), 1.0)"
    start = lines[3].index("^")
    assert lines[2][start:] == "clip_grad_norm_(model.parameters(), 1.0)"
    assert lines[3][start:] == "^" * len("clip_grad_norm_(model.parameters(), 1.0)")
    assert lines[5] == "help: Call `scaler.unscale_(opt)` before clipping"


def test_text_multiline_span_is_underlined_to_the_end_of_its_first_line():
    finding = Finding("AMP201", Severity.ERROR, "span", Location("train.py", 4, 1, 6, 10))
    lines = output("text", context([finding])).splitlines()
    assert lines[2] == "4 | for x, y in loader:"
    assert lines[3] == "  | " + "^" * len("for x, y in loader:")


def test_text_span_past_the_end_of_the_line_still_gets_one_caret():
    finding = Finding("AMP000", Severity.ERROR, "unexpected EOF", Location("train.py", 1, 40))
    lines = output("text", context([finding])).splitlines()
    assert lines[2] == "1 | import torch"
    assert lines[3] == "  | " + " " * len("import torch") + "^"


def test_text_without_source_still_reports_the_finding():
    finding = Finding("AMP201", Severity.ERROR, "msg", Location("missing.py", 2, 3))
    lines = output("text", context([finding])).splitlines()
    assert lines[0] == "missing.py:2:3: AMP201 msg"
    assert lines[1] == ""
    assert lines[2].startswith("Found 1 problem.")


def test_text_does_not_interpret_markup_in_user_text():
    for color in (False, True):
        out = output("text", context([deprecated_finding()]), color=color)
        assert "deprecated [bold]since[/bold] torch 2.4" in out


def test_text_with_colour_marks_severity():
    out = output("text", context(), color=True)
    assert "\x1b[1;31mAMP201\x1b[0m" in out
    assert "\x1b[1;33mAMP401\x1b[0m" in out
    assert "\x1b[1;36mAMP999\x1b[0m" in out


def test_text_never_wraps_long_lines():
    message = "word " * 200
    finding = Finding("AMP201", Severity.ERROR, message.strip(), Location("a/" * 60 + "x.py", 1, 1))
    out = output("text", context([finding]))
    assert out.splitlines()[0] == f"{'a/' * 60}x.py:1:1: AMP201 {message.strip()}"


def _text_for(source: str, finding: Finding, *, color: bool = False) -> list[str]:
    ctx = ReportContext(findings=[finding], sources={"t.py": source}, files_checked=1)
    stream = io.StringIO()
    render("text", ctx, stream, color=color)
    return stream.getvalue().splitlines()


def test_text_carets_count_wide_characters_as_two_cells():
    source = 'x = "日本"; y = clip(z)\n'
    column = source.index("clip") + 1
    finding = Finding("AMP201", Severity.ERROR, "m", Location("t.py", 1, column, 1, column + len("clip(z)")))
    lines = _text_for(source, finding)
    assert lines[2] == '1 | x = "日本"; y = clip(z)'
    # Two wide characters take four cells: the carets start two cells right of the index.
    assert lines[3] == "  | " + " " * (column - 1 + 2) + "^" * len("clip(z)")


def test_text_combining_marks_take_no_cell():
    source = "s = 'é'; clip(z)\n"
    column = source.index("clip") + 1
    finding = Finding("AMP201", Severity.ERROR, "m", Location("t.py", 1, column, 1, column + 7))
    assert _text_for(source, finding)[3] == "  | " + " " * (column - 2) + "^" * 7


def test_text_drops_cursor_control_characters_from_what_it_prints():
    source = "\x0cclip(z)  # form feed before the code\n"
    finding = Finding("AMP201", Severity.ERROR, "a\rb\x08c\x07", Location("t.py", 1, 2, 1, 9), help="x\x07y")
    for color in (False, True):
        out = "\n".join(_text_for(source, finding, color=color))
        assert not re.search("[\x07\x08\x0b\x0c\r]", out)
    lines = _text_for(source, finding)
    assert lines[0] == "t.py:1:2: AMP201 a bc"  # a line break in a message becomes a space
    assert lines[2] == "1 | clip(z)  # form feed before the code"
    assert lines[3] == "  | " + "^" * 7  # the dropped character moves the carets with the code
    assert lines[5] == "help: xy"


def test_text_tabs_expand_to_the_tab_stops_of_the_printed_line_in_both_modes():
    finding = Finding("AMP201", Severity.ERROR, "a\tb", Location("t.py", 1, 1))
    plain = _text_for("x\n", finding)[0]
    assert plain == "t.py:1:1: AMP201 a\tb".expandtabs(4)
    coloured = _text_for("x\n", finding, color=True)[0]
    assert coloured != plain and re.sub("\x1b\\[[0-9;]*m", "", coloured) == plain  # escapes take no column


def test_text_summary_lists_codes_with_a_generic_hint():
    out = output("text", context())
    assert out.splitlines()[-1].startswith("Codes: AMP201 clip-before-unscale (2), AMP401")
    assert "AMP999 (1). Run 'ampdoctor rule CODE' for details." in out


@pytest.mark.parametrize(
    "findings, kwargs, expected",
    [
        ([], {}, ["All checks passed!"]),
        ([], {"suppressed": 2}, ["All checks passed! (2 suppressed)"]),
        ([clip_finding()], {"suppressed": 0}, ["Found 1 problem (1 fixable with --fix, 0 suppressed)."]),
        (
            [clip_finding(), deprecated_finding()],
            {"unsafe_fixes_available": 1},
            ["Found 2 problems (1 fixable with --fix).", "1 hidden fix can be enabled with --unsafe-fixes."],
        ),
        (
            [deprecated_finding()],
            {"unsafe_fixes_available": 3},
            ["Found 1 problem.", "3 hidden fixes can be enabled with --unsafe-fixes."],
        ),
        ([], {"fix_mode": True, "fixed": 2}, ["Fixed 2 problems.", "All checks passed!"]),
        (
            [clip_finding()],
            {"fix_mode": True, "fixed": 1},
            ["Fixed 1 problem.", "Found 1 remaining problem."],
        ),
        ([clip_finding()], {"fix_mode": True}, ["Found 1 problem."]),
        ([], {"diff_mode": True, "fixed": 3}, ["Would fix 3 problems.", "All checks passed!"]),
    ],
)
def test_summary_wording(findings, kwargs, expected):
    ctx = context(findings, **kwargs)
    for fmt in ("text", "concise"):
        lines = [line for line in output(fmt, ctx).splitlines() if line and not line.startswith("Codes:")]
        assert lines[-len(expected) :] == expected, fmt
        if not findings:
            assert lines == expected


# json


def test_json_is_a_list_of_finding_objects():
    out = output("json", context())
    assert out.endswith("]\n")
    assert out.startswith("[\n  {")
    data = json.loads(out)
    assert [item["code"] for item in data] == ["AMP201", "AMP401", "AMP201", "AMP999"]
    types = {
        "code": str,
        "name": str,
        "severity": str,
        "message": str,
        "path": str,
        "line": int,
        "column": int,
        "end_line": int,
        "end_column": int,
    }
    for item in data:
        for key, kind in types.items():
            assert isinstance(item[key], kind), key
        assert item["severity"] in ("error", "warning", "info")
        assert "cell" in item and "help" in item and "fix" in item
    nb, dep, clip, unknown = data
    assert nb["cell"] == 4 and nb["path"] == NOTEBOOK and nb["fix"] is None
    assert clip["cell"] is None and clip["name"] == "clip-before-unscale"
    assert clip["fix"] == {
        "description": "Insert `scaler.unscale_(optimizer)` before clipping",
        "applicability": "safe",
        "edits": [
            {"line": 6, "column": 5, "end_line": 6, "end_column": 5, "content": "scaler.unscale_(optimizer)\n    "}
        ],
    }
    assert clip["help"] == "Insert `scaler.unscale_(optimizer)` before clipping"
    assert dep["fix"]["applicability"] == "unsafe"
    assert unknown["name"] == "AMP999" and unknown["help"] is None
    assert unknown["message"] == "loss scale 100% stuck\nfor 3 steps"


def test_json_empty_and_strict():
    assert output("json", context([])) == "[]\n"
    finding = Finding(
        "AMP501",
        Severity.WARNING,
        "overflow",
        Location("run.py", 1, 1),
        extra={"grad_norm": float("inf"), "scale": 65536.0, "steps": (1, 2), "dtype": Severity.ERROR},
    )
    data = json.loads(output("json", context([finding])), parse_constant=pytest.fail)
    assert data[0]["extra"] == {"grad_norm": "inf", "scale": 65536.0, "steps": [1, 2], "dtype": 3}


# sarif

SARIF_LEVELS = {"none", "note", "warning", "error"}


def check_region(region: dict) -> None:
    assert isinstance(region["startLine"], int) and region["startLine"] >= 1
    for key in ("startColumn", "endLine", "endColumn"):
        assert isinstance(region.get(key, 1), int) and region.get(key, 1) >= 1
    assert region.get("endLine", region["startLine"]) >= region["startLine"]


def check_artifact_location(location: dict) -> None:
    uri = location["uri"]
    assert isinstance(uri, str) and uri and " " not in uri and "\\" not in uri
    if "uriBaseId" in location:
        assert not uri.startswith("/")


def check_message(message: dict) -> None:
    assert isinstance(message["text"], str) and message["text"]


def check_sarif(log: dict) -> None:
    """The parts of SARIF 2.1.0 that are required, plus what GitHub code scanning needs."""
    assert log["version"] == "2.1.0"
    assert log["$schema"] == "https://json.schemastore.org/sarif-2.1.0.json"
    assert isinstance(log["runs"], list) and len(log["runs"]) == 1
    run = log["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "ampdoctor"
    rules = driver["rules"]
    ids = [rule["id"] for rule in rules]
    assert len(ids) == len(set(ids))
    for rule in rules:
        assert re.fullmatch(r"AMP\d{3}", rule["id"])
        for key in ("shortDescription", "fullDescription", "help"):
            if key in rule:
                check_message(rule[key])
                assert len(rule[key]["text"]) <= 1024 or key == "help"
        assert rule["defaultConfiguration"]["level"] in SARIF_LEVELS
    for result in run["results"]:
        check_message(result["message"])
        assert result["level"] in SARIF_LEVELS
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        assert 1 <= len(result["locations"]) <= 10
        for location in result["locations"]:
            physical = location["physicalLocation"]
            check_artifact_location(physical["artifactLocation"])
            check_region(physical["region"])
        for fix in result.get("fixes", []):
            check_message(fix["description"])
            assert fix["artifactChanges"]
            for change in fix["artifactChanges"]:
                check_artifact_location(change["artifactLocation"])
                assert change["replacements"]
                for replacement in change["replacements"]:
                    check_region(replacement["deletedRegion"])
                    if "insertedContent" in replacement:
                        assert isinstance(replacement["insertedContent"]["text"], str)


def sarif(findings=None) -> dict:
    out = output("sarif", context(findings))
    assert out.endswith("}\n")
    return json.loads(out)


def test_sarif_structure():
    log = sarif()
    check_sarif(log)
    run = log["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["version"] == __version__
    assert driver["informationUri"].startswith("https://")
    assert [rule["id"] for rule in driver["rules"]] == ["AMP201", "AMP401", "AMP999"]
    assert [r["ruleId"] for r in run["results"]] == ["AMP201", "AMP401", "AMP201", "AMP999"]
    assert [r["level"] for r in run["results"]] == ["error", "warning", "error", "note"]


def test_sarif_rule_help_comes_from_the_catalog():
    page = get_rule("AMP201")
    rule = sarif([clip_finding()])["runs"][0]["tool"]["driver"]["rules"][0]
    assert rule["name"] == "clip-before-unscale"
    assert rule["shortDescription"]["text"] == page.summary
    assert rule["fullDescription"]["text"].startswith("Reports `torch.nn.utils.clip_grad_norm_`")
    assert rule["help"]["markdown"] == page.body.strip()
    assert "## Why is this a problem" in rule["help"]["text"]
    assert rule["defaultConfiguration"]["level"] == "error"


def test_sarif_rules_only_for_codes_in_the_results():
    log = sarif([clip_finding()])
    assert [rule["id"] for rule in log["runs"][0]["tool"]["driver"]["rules"]] == ["AMP201"]
    empty = sarif([])
    check_sarif(empty)
    assert empty["runs"][0]["results"] == [] and empty["runs"][0]["tool"]["driver"]["rules"] == []


def test_sarif_location_and_fix():
    result = sarif([clip_finding()])["runs"][0]["results"][0]
    physical = result["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"] == {"uri": "train.py", "uriBaseId": "%SRCROOT%"}
    assert physical["region"] == {"startLine": 6, "startColumn": 5, "endLine": 6, "endColumn": 60}
    (fix,) = result["fixes"]
    assert fix["description"]["text"] == "Insert `scaler.unscale_(optimizer)` before clipping"
    (change,) = fix["artifactChanges"]
    assert change["artifactLocation"] == {"uri": "train.py", "uriBaseId": "%SRCROOT%"}
    assert change["replacements"] == [
        {
            "deletedRegion": {"startLine": 6, "startColumn": 5, "endLine": 6, "endColumn": 5},
            "insertedContent": {"text": "scaler.unscale_(optimizer)\n    "},
        }
    ]


def test_sarif_notebook_result_names_the_cell_and_has_no_fix():
    finding = Finding(
        "AMP201",
        Severity.ERROR,
        "clipped",
        Location(NOTEBOOK, 3, 2, 3, 42, cell=4),
        fix=Fix("insert", (Edit(20, 2, 20, 2, "x"),)),
    )
    result = sarif([finding])["runs"][0]["results"][0]
    assert result["message"]["text"] == "clipped (cell 4, line 3)"
    assert result["properties"] == {"cell": 4}
    assert "fixes" not in result
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == NOTEBOOK


def test_sarif_uris(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inside = str(tmp_path / "src dir" / "train.py")
    outside = str(tmp_path.parent / "elsewhere.py")
    findings = [
        Finding("AMP201", Severity.ERROR, "m", Location(inside, 1, 1)),
        Finding("AMP201", Severity.ERROR, "m", Location(outside, 1, 1)),
        Finding("AMP201", Severity.ERROR, "m", Location("./pkg/a b.py", 1, 1)),
    ]
    log = sarif(findings)
    check_sarif(log)
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"] for r in log["runs"][0]["results"]]
    assert uris[0] == {"uri": "src%20dir/train.py", "uriBaseId": "%SRCROOT%"}
    assert uris[1] == {"uri": Path(outside).resolve().as_uri()}
    assert uris[2] == {"uri": "pkg/a%20b.py", "uriBaseId": "%SRCROOT%"}


def test_sarif_code_without_a_page_still_renders():
    log = sarif([unknown_finding()])
    check_sarif(log)
    rule = log["runs"][0]["tool"]["driver"]["rules"][0]
    assert rule["id"] == "AMP999" and rule["defaultConfiguration"]["level"] == "note"
    region = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 4, "startColumn": 1, "endLine": 6, "endColumn": 2}


def test_every_format_renders_every_finding_kind():
    """A notebook cell, a deprecated API with a fix, a finding with related locations and a code
    without a page: each format names every one of them, at its line, coloured or not."""
    ctx = context()
    for fmt in FORMATS:
        for color in (False, True):
            text = output(fmt, ctx, color=color)
            for finding in ctx.findings:
                assert finding.code in text, (fmt, color, finding.code)
                assert str(finding.location.line) in text, (fmt, color, finding.code)
