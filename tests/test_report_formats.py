"""The CI-oriented report formats: junit, gitlab, pylint, json-lines, grouped and rdjson.

Each format is checked on real lint runs through the CLI (findings, none, a notebook), and on
findings whose text needs escaping. Two formats are validated against schemas kept under
``tests/schemas/``, written for these tests from the published descriptions of the formats:

* ``junit.xsd``: the JUnit XML report as CI servers read it, following the structure that
  Apache Ant's junitreport and the Jenkins JUnit plugin document (a ``<testsuites>`` root,
  ``<testsuite>`` elements with a required ``name`` and ``tests`` count, ``<testcase>`` elements
  with a required ``name``, each holding skips, ``<failure>`` or ``<error>`` elements with
  ``message`` and ``type`` attributes). Strict: undefined elements and attributes are invalid.
* ``gitlab-code-quality.json``: GitLab's Code Quality report as GitLab's documentation defines
  it: a JSON array of issues with the required ``description``, ``check_name``, ``fingerprint``,
  ``severity`` (one of ``info``, ``minor``, ``major``, ``critical``, ``blocker``) and
  ``location.path`` with ``location.lines.begin`` (or ``location.positions.begin.line``).
"""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
import xmlschema
from click.testing import CliRunner
from samples import CLIP_BEFORE_UNSCALE as BUGGY
from samples import UNSCALE_THEN_CLIP as CLEAN

from ampdoctor.cli import main
from ampdoctor.findings import Edit, Finding, Fix, Location, Related, Severity
from ampdoctor.lint.report import FORMATS, ReportContext, render, source_key

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = Path(__file__).resolve().parent / "schemas"
NOTEBOOK = ROOT / "fixtures" / "lint" / "notebooks" / "buggy_train.ipynb"
NEW_FORMATS = ("junit", "gitlab", "pylint", "json-lines", "grouped", "rdjson")
DEPRECATED = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
# A message with markup characters, quotes, non-ASCII text, a line break and control characters.
AWKWARD = "a < b && c > \"d\" 'e' ünïcødé 漢字 🙂\nsecond line \x07\x00 end"


@pytest.fixture(scope="module")
def junit_schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(str(SCHEMAS / "junit.xsd"))


@pytest.fixture(scope="module")
def gitlab_schema() -> jsonschema.protocols.Validator:
    schema = json.loads((SCHEMAS / "gitlab-code-quality.json").read_text(encoding="utf-8"))
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    return validator_class(schema)


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "train.py").write_text(BUGGY, encoding="utf-8")
    (tmp_path / "warn.py").write_text(DEPRECATED, encoding="utf-8")
    (tmp_path / "clean.py").write_text(CLEAN, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CI_PROJECT_DIR", raising=False)
    return tmp_path


def lint(fmt: str, *paths: str, env=None) -> str:
    args = ["lint", "--isolated", "--no-cache", "--output-format", fmt, *paths]
    result = CliRunner().invoke(main, args, env=env, catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    return result.stdout


def output(fmt: str, findings: list[Finding], sources: dict[str, str] | None = None) -> str:
    stream = io.StringIO()
    ctx = ReportContext(findings=findings, sources=sources or {}, files_checked=1)
    render(fmt, ctx, stream, color=False)
    return stream.getvalue()


def awkward_finding() -> Finding:
    return Finding("AMP999", Severity.WARNING, AWKWARD, Location("dir & <x>/ü.py", 2, 3, 2, 9))


# The CLI


def test_the_cli_offers_every_format_and_reads_the_environment(project):
    assert set(NEW_FORMATS) <= set(FORMATS)
    help_text = CliRunner().invoke(main, ["lint", "--help"]).output
    for fmt in FORMATS:
        assert fmt in help_text
    result = CliRunner().invoke(
        main,
        ["lint", "--isolated", "--no-cache", "train.py"],
        env={"AMPDOCTOR_OUTPUT_FORMAT": "pylint"},
        catch_exceptions=False,
    )
    assert result.exit_code == 1
    assert result.stdout.startswith("train.py:8: [AMP201] ")
    bad = CliRunner().invoke(
        main, ["lint", "--isolated", "--no-cache", "train.py"], env={"AMPDOCTOR_OUTPUT_FORMAT": "xml"}
    )
    assert bad.exit_code == 2


@pytest.mark.parametrize("fmt", NEW_FORMATS)
def test_every_new_format_reports_a_notebook_finding_with_its_cell(fmt):
    out = lint(fmt, str(NOTEBOOK))
    assert "AMP201" in out
    if fmt == "json-lines":
        (item,) = [json.loads(line) for line in out.splitlines()]
        assert (item["cell"], item["line"], item["column"]) == (5, 10, 9)
    else:
        assert "cell 5" in out


# junit


def test_junit_real_run_is_valid_and_has_a_failed_case_per_finding(project, junit_schema):
    out = lint("junit", ".")
    assert out.startswith('<?xml version="1.0" encoding="UTF-8"?>\n')
    junit_schema.validate(out)
    root = ET.fromstring(out)
    assert (root.tag, root.get("tests"), root.get("failures")) == ("testsuites", "2", "2")
    suites = {suite.get("name"): suite for suite in root.iter("testsuite")}
    assert set(suites) == {"train.py", "warn.py"}
    (case,) = suites["train.py"].iter("testcase")
    assert (case.get("name"), case.get("classname")) == ("org.ampdoctor.AMP201", "train.py")
    failure = case.find("failure")
    assert failure is not None and failure.get("type") == "AMP201"
    assert failure.get("message", "").startswith("line 8, col 5, gradients are clipped")
    assert failure.text is not None
    assert failure.text.startswith("train.py:8:5: AMP201 gradients are clipped")
    assert "\nhelp: Insert `scaler.unscale_(optimizer)` before the clip" in failure.text


def test_junit_without_findings_is_one_passing_case(project, junit_schema):
    out = lint("junit", "clean.py")
    junit_schema.validate(out)
    root = ET.fromstring(out)
    cases = list(root.iter("testcase"))
    assert len(cases) == 1 and list(cases[0]) == []
    assert (root.get("tests"), root.get("failures")) == ("1", "0")


def test_junit_escapes_any_message(junit_schema):
    out = output("junit", [awkward_finding()])
    assert out.isascii()
    junit_schema.validate(out)
    root = ET.fromstring(out)
    (suite,) = root.iter("testsuite")
    assert suite.get("name") == "dir & <x>/ü.py"
    failure = root.find("testsuite/testcase/failure")
    assert failure is not None
    readable = "a < b && c > \"d\" 'e' ünïcødé 漢字 🙂 second line \\x07\\x00 end"
    assert failure.get("message") == f"line 2, col 3, {readable}"
    assert failure.text == f"dir & <x>/ü.py:2:3: AMP999 {readable}"


def test_junit_failure_text_has_the_help_and_the_related_locations(junit_schema):
    related = (Related("utils.py", 4, 2, "the checkpoint is written here"),)
    finding = awkward_finding().replace(message="m", help="do this", related=related)
    out = output("junit", [finding])
    junit_schema.validate(out)
    failure = ET.fromstring(out).find("testsuite/testcase/failure")
    assert failure is not None
    assert failure.text == (
        "dir & <x>/ü.py:2:3: AMP999 m\nnote: the checkpoint is written here\n  --> utils.py:4:2\nhelp: do this"
    )


def test_junit_notebook_case_names_the_cell(junit_schema):
    out = lint("junit", str(NOTEBOOK))
    junit_schema.validate(out)
    failure = ET.fromstring(out).find("testsuite/testcase/failure")
    assert failure is not None
    assert failure.get("message", "").startswith("cell 5, line 10, col 9, ")


def test_the_junit_schema_rejects_what_the_format_does_not_allow(junit_schema):
    assert junit_schema.is_valid(
        '<testsuites><testsuite name="a" tests="1"><testcase name="t"/></testsuite></testsuites>'
    )
    assert not junit_schema.is_valid('<testsuites><testsuite name="a"><testcase name="t"/></testsuite></testsuites>')
    assert not junit_schema.is_valid('<testsuites><testsuite name="a" tests="1"><testcase/></testsuite></testsuites>')
    assert not junit_schema.is_valid('<testsuites><testsuite name="a" tests="-1"/></testsuites>')
    assert not junit_schema.is_valid('<testsuites><case name="x"/></testsuites>')


# gitlab


def test_gitlab_real_run_is_valid(project, gitlab_schema):
    issues = json.loads(lint("gitlab", "."))
    gitlab_schema.validate(issues)
    by_code = {issue["check_name"]: issue for issue in issues}
    assert set(by_code) == {"AMP201", "AMP401"}
    clip = by_code["AMP201"]
    assert clip["severity"] == "major" and by_code["AMP401"]["severity"] == "minor"
    assert clip["location"] == {"path": "train.py", "lines": {"begin": 8, "end": 8}}
    assert clip["description"].startswith("AMP201 clip-before-unscale: gradients are clipped")
    assert len({issue["fingerprint"] for issue in issues}) == 2


def test_gitlab_without_findings_is_an_empty_array(project, gitlab_schema):
    out = lint("gitlab", "clean.py")
    assert json.loads(out) == []
    gitlab_schema.validate(json.loads(out))


def test_gitlab_paths_are_relative_to_the_ci_project_dir(tmp_path, monkeypatch):
    source = tmp_path / "repo" / "src"
    source.mkdir(parents=True)
    (source / "train.py").write_text(BUGGY, encoding="utf-8")
    monkeypatch.chdir(source)
    monkeypatch.delenv("CI_PROJECT_DIR", raising=False)
    assert json.loads(lint("gitlab", "train.py"))[0]["location"]["path"] == "train.py"
    monkeypatch.setenv("CI_PROJECT_DIR", str(tmp_path / "repo"))
    assert json.loads(lint("gitlab", "train.py"))[0]["location"]["path"] == "src/train.py"
    assert json.loads(lint("gitlab", str(source / "train.py")))[0]["location"]["path"] == "src/train.py"


def test_gitlab_fingerprint_survives_lines_added_above(project):
    (before,) = json.loads(lint("gitlab", "train.py"))
    (project / "train.py").write_text("# a comment\n\n\n" + BUGGY, encoding="utf-8")
    (after,) = json.loads(lint("gitlab", "train.py"))
    assert after["location"]["lines"]["begin"] == before["location"]["lines"]["begin"] + 3
    assert after["fingerprint"] == before["fingerprint"]


def test_gitlab_fingerprint_follows_the_flagged_line(project):
    (before,) = json.loads(lint("gitlab", "train.py"))
    changed = BUGGY.replace("clip_grad_norm_(model.parameters(), 1.0)", "clip_grad_norm_(model.parameters(), 5.0)")
    (project / "train.py").write_text(changed, encoding="utf-8")
    (after,) = json.loads(lint("gitlab", "train.py"))
    assert after["check_name"] == before["check_name"]
    assert after["fingerprint"] != before["fingerprint"]


def test_gitlab_identical_findings_get_distinct_fingerprints(project, gitlab_schema):
    loop = BUGGY.split("\n", 3)[3]  # the training loop again, after the scaler is made
    (project / "train.py").write_text(BUGGY + loop, encoding="utf-8")
    issues = json.loads(lint("gitlab", "train.py"))
    gitlab_schema.validate(issues)
    assert [issue["location"]["lines"]["begin"] for issue in issues] == [8, 15]
    assert issues[0]["description"] == issues[1]["description"]
    assert issues[0]["fingerprint"] != issues[1]["fingerprint"]
    # The first of them keeps its fingerprint when the second is added.
    (project / "train.py").write_text(BUGGY, encoding="utf-8")
    (alone,) = json.loads(lint("gitlab", "train.py"))
    assert alone["fingerprint"] == issues[0]["fingerprint"]


def test_gitlab_escapes_any_message_and_names_the_notebook_cell(gitlab_schema, monkeypatch):
    monkeypatch.delenv("CI_PROJECT_DIR", raising=False)
    issues = json.loads(output("gitlab", [awkward_finding()]))
    gitlab_schema.validate(issues)
    assert issues[0]["description"] == "AMP999: " + " ".join(AWKWARD.splitlines())
    assert issues[0]["location"]["path"] == "dir & <x>/ü.py"
    notebook = json.loads(lint("gitlab", str(NOTEBOOK)))
    gitlab_schema.validate(notebook)
    assert notebook[0]["description"].endswith("(cell 5, line 10)")


def test_the_gitlab_schema_rejects_what_the_format_does_not_allow(gitlab_schema):
    good = {
        "description": "d",
        "check_name": "AMP201",
        "fingerprint": "f",
        "severity": "major",
        "location": {"path": "a.py", "lines": {"begin": 1}},
    }
    assert gitlab_schema.is_valid([good])
    assert not gitlab_schema.is_valid([{**good, "severity": "error"}])
    assert not gitlab_schema.is_valid([{key: value for key, value in good.items() if key != "fingerprint"}])
    assert not gitlab_schema.is_valid([{**good, "location": {"path": "a.py"}}])
    assert not gitlab_schema.is_valid([{**good, "location": {"path": "a.py", "lines": {"begin": "1"}}}])


# pylint


def test_pylint_real_run(project):
    assert lint("pylint", ".").splitlines() == [
        "train.py:8: [AMP201] gradients are clipped while still multiplied by the loss scale of `scaler`: "
        "call `scaler.unscale_(optimizer)` before clipping",
        "warn.py:2: [AMP401] `torch.cuda.amp.GradScaler` is deprecated since torch 2.4: "
        'use `torch.amp.GradScaler` with device "cuda"',
    ]
    assert lint("pylint", "clean.py") == ""


def test_pylint_keeps_each_finding_on_one_line():
    out = output("pylint", [awkward_finding()])
    assert out == f"dir & <x>/ü.py:2: [AMP999] {' '.join(AWKWARD.splitlines())}\n"
    notebook = lint("pylint", str(NOTEBOOK))
    assert notebook.count("\n") == 1 and "buggy_train.ipynb:cell 5:10: [AMP201] " in notebook


# json-lines


def test_json_lines_are_the_json_formats_objects(project):
    out = lint("json-lines", ".")
    lines = out.splitlines()
    assert len(lines) == 2
    assert all(" " not in line.split('"message"')[0] for line in lines)  # compact separators
    assert [json.loads(line) for line in lines] == json.loads(lint("json", "."))
    assert lint("json-lines", "clean.py") == ""


def test_json_lines_escape_any_message():
    (line,) = output("json-lines", [awkward_finding()]).splitlines()
    assert json.loads(line)["message"] == AWKWARD
    infinite = awkward_finding().replace(extra={"scale": float("inf")})
    assert json.loads(output("json-lines", [infinite]))["extra"] == {"scale": "inf"}


# grouped


def test_grouped_real_run(project):
    assert lint("grouped", ".") == (
        "train.py:\n"
        "  8:5 AMP201 gradients are clipped while still multiplied by the loss scale of `scaler`: "
        "call `scaler.unscale_(optimizer)` before clipping\n"
        "\n"
        "warn.py:\n"
        '  2:10 AMP401 `torch.cuda.amp.GradScaler` is deprecated since torch 2.4: use `torch.amp.GradScaler` with device "cuda"\n'
        "\n"
        "Found 2 problems (2 fixable with --fix).\n"
    )
    assert lint("grouped", "clean.py") == "All checks passed!\n"


def test_grouped_aligns_positions_and_names_notebook_cells():
    first = awkward_finding()
    second = first.replace(location=Location(first.location.path, 12, 1), message="second")
    out = output("grouped", [first, second])
    assert out.splitlines()[:3] == [
        "dir & <x>/ü.py:",
        f"  2:3  AMP999 {' '.join(AWKWARD.splitlines())}",
        "  12:1 AMP999 second",
    ]
    assert "buggy_train.ipynb:\n  cell 5:10:9 AMP201 " in lint("grouped", str(NOTEBOOK))


def test_grouped_colours_the_header_and_the_code():
    stream = io.StringIO()
    ctx = ReportContext(findings=[awkward_finding()], sources={}, files_checked=1)
    render("grouped", ctx, stream, color=True)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "\x1b[1mdir & <x>/ü.py:\x1b[0m"
    assert lines[1].startswith("  2:3 \x1b[1;33mAMP999\x1b[0m ")


# rdjson


def test_rdjson_real_run_with_byte_columns_and_suggestions(tmp_path, monkeypatch):
    source = BUGGY.replace("scaler", "échelle").replace("    torch.nn.utils.clip", "    ü = 1; torch.nn.utils.clip")
    (tmp_path / "train.py").write_text(source, encoding="utf-8")
    (tmp_path / "warn.py").write_text(DEPRECATED, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = json.loads(lint("rdjson", "."))
    assert result["source"]["name"] == "ampdoctor" and result["severity"] == "ERROR"
    clip, deprecated = result["diagnostics"]
    assert clip["severity"] == "ERROR" and clip["code"] == {"value": "AMP201"}
    assert clip["location"]["path"] == "train.py"
    # `ü` takes two bytes in UTF-8: the call at code point column 12 starts at byte 13.
    assert clip["location"]["range"] == {"start": {"line": 8, "column": 13}, "end": {"line": 8, "column": 68}}
    assert "suggestions" not in clip  # this finding has no fix
    assert deprecated["severity"] == "WARNING"
    assert deprecated["suggestions"] == [
        {
            "range": {"start": {"line": 2, "column": 10}, "end": {"line": 2, "column": 35}},
            "text": "torch.amp.GradScaler",
        },
        {"range": {"start": {"line": 2, "column": 36}, "end": {"line": 2, "column": 36}}, "text": '"cuda"'},
    ]


def test_rdjson_without_findings_and_for_a_notebook(project):
    empty = json.loads(lint("rdjson", "clean.py"))
    assert empty["diagnostics"] == [] and empty["severity"] == "INFO"
    (notebook,) = json.loads(lint("rdjson", str(NOTEBOOK)))["diagnostics"]
    assert notebook["message"].endswith("(cell 5, line 10)")
    assert notebook["location"]["range"]["start"] == {"line": 10, "column": 9}
    assert "suggestions" not in notebook  # cell positions do not address lines of the .ipynb file


def test_rdjson_escapes_any_message_and_carries_related_locations():
    fix = Fix("Replace", (Edit(2, 3, 2, 9, 'x < "y" & ü'),))
    related = (Related("utils.py", 4, 2, "the helper that steps & <updates>"),)
    finding = awkward_finding().replace(fix=fix, related=related)
    (diagnostic,) = json.loads(output("rdjson", [finding]))["diagnostics"]
    assert diagnostic["message"] == AWKWARD
    assert diagnostic["suggestions"][0]["text"] == 'x < "y" & ü'
    assert diagnostic["related_locations"] == [
        {
            "message": "the helper that steps & <updates>",
            "location": {"path": "utils.py", "range": {"start": {"line": 4, "column": 2}}},
        }
    ]


def test_rdjson_counts_columns_on_the_finding_s_own_source():
    finding = Finding("AMP201", Severity.ERROR, "m", Location("nb.ipynb", 1, 4, 1, 6, cell=2))
    sources = {"nb.ipynb": "plain\n", source_key("nb.ipynb", 2): "漢字 = 1\n"}
    (diagnostic,) = json.loads(output("rdjson", [finding], sources))["diagnostics"]
    assert diagnostic["location"]["range"] == {"start": {"line": 1, "column": 8}, "end": {"line": 1, "column": 10}}
