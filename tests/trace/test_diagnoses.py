"""The diagnosis benchmark (benchmarks/diagnoses/): its case scripts are exactly what the
generator makes from the bases, its scoring is right, and ``ampdoctor trace`` diagnoses every
case as the benchmark demands — the injected mistake as the top runtime finding, at its line,
with a right cure, and no false alarm; no warning on a healthy version.

Cases the tracer still gets wrong are listed in ``KNOWN_WRONG`` with what it says instead; they
run as strict expected failures with the same full assertion, so a fix shows up as an
unexpected pass and the entry is then removed. The expectations themselves never change to
fit the tracer.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "diagnoses"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"diagnoses_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


run = _load("run")  # run.py imports the case definitions from cases.py
CASES = run.CASES

# What the tracer says today where it is wrong (see the diagnosis benchmark table in docs/trace.md).
KNOWN_WRONG: dict[str, str] = {}


# ---- the cases themselves -------------------------------------------------------------------


def test_case_scripts_are_what_the_generator_writes():
    assert run.stale_cases() == []


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_case_is_complete_and_its_lines_resolve(case):
    assert case.base.is_file()
    compile(case.source(), str(case.script), "exec")
    assert case.source() != case.base.read_text() if case.edits else case.source() == case.base.read_text()
    if case.healthy:
        # (``forbidden`` only makes a healthy case stricter: codes it must not show even as info)
        assert not case.at and not case.cure and not case.also and not case.allowed
        return
    assert case.edits
    lines = case.lines()
    assert len(lines) == len(case.at) >= 1
    source_lines = case.source().splitlines()
    for needle, number in zip(case.at, lines):
        assert needle in source_lines[number - 1]
    assert case.cure, "a case must say what a right cure says"
    assert case.name not in {c.name for c in CASES if c is not case}


def test_an_edit_that_does_not_match_exactly_once_is_refused(tmp_path):
    base = tmp_path / "base.py"
    base.write_text("a = 1\na = 1\n")
    case = run.Case("twice", base, "x", edits=(("a = 1", "a = 2"),), expect="AMP201", at=("a = 2",))
    with pytest.raises(ValueError, match="occurs 2 times"):
        case.source()


# ---- scoring --------------------------------------------------------------------------------


def _scored_case(tmp_path, **fields):
    base = tmp_path / "train.py"
    base.write_text("import torch\nscaler.step(optimizer)\nprint('done')\n")
    defaults = {
        "name": "t",
        "base": base,
        "mistake": "m",
        "expect": "AMP202",
        "at": ("scaler.step(optimizer)",),
        "cure": (r"update\(\)",),
    }
    defaults.update(fields)
    return run.Case(**defaults)


def _finding(code, path, line, severity="error", message="", help=""):
    return {"code": code, "path": str(path), "line": line, "severity": severity, "message": message, "help": help}


def test_score_right_diagnosis(tmp_path):
    case = _scored_case(tmp_path)
    report = {
        "findings": [_finding("AMP202", case.script, 2, message="call scaler.update() after step")],
        "static_findings": [_finding("AMP202", case.script, 2)],
    }
    score = run.score(case, report)
    assert (score.culprit, score.line, score.cure, score.false_alarms, score.right) == (True, True, True, [], True)
    assert score.static_codes == ["AMP202"]


def test_score_wrong_line_wrong_cure_and_false_alarms(tmp_path):
    case = _scored_case(tmp_path, forbidden=("AMP505",))
    report = {
        "findings": [
            _finding("AMP202", case.script, 3, message="lower the scale"),
            _finding("AMP505", case.script, 1, severity="info"),
            _finding("AMP508", case.script, 1, severity="warning"),
        ]
    }
    score = run.score(case, report)
    assert score.culprit and not score.line and not score.cure
    assert score.false_alarms == ["AMP505", "AMP508"]
    assert not score.right


def test_score_wrong_culprit_and_cure_not(tmp_path):
    case = _scored_case(tmp_path, cure_not=(r"init_scale",))
    report = {"findings": [_finding("AMP202", case.script, 2, message="update() or raise init_scale")]}
    assert not run.score(case, report).cure
    other = {"findings": [_finding("AMP505", case.script, 2, severity="warning", message="update()")]}
    score = run.score(case, other)
    assert not score.culprit and not score.line and not score.cure and score.false_alarms == ["AMP505"]


def test_score_culprit_names_the_expected_module(tmp_path):
    case = _scored_case(tmp_path, modules=("lm_head", ""))
    finding = _finding("AMP202", case.script, 2, message="update()")
    assert run.score(case, {"findings": [finding]}).culprit
    assert run.score(case, {"findings": [dict(finding, module="lm_head")]}).culprit
    assert not run.score(case, {"findings": [dict(finding, module="transformer.h.1")]}).culprit


def test_score_a_finding_in_another_file_is_not_at_the_line(tmp_path):
    case = _scored_case(tmp_path)
    report = {"findings": [_finding("AMP202", tmp_path / "other.py", 2, message="update()")]}
    assert not run.score(case, report).line


def test_score_healthy(tmp_path):
    case = _scored_case(tmp_path, expect=None, at=(), cure=())
    assert run.score(case, {"findings": [_finding("AMP507", case.script, 1, severity="info")]}).right
    noisy = run.score(
        case, {"findings": [], "static_findings": [_finding("AMP210", case.script, 1, severity="warning")]}
    )
    assert noisy.false_alarms == ["AMP210"] and not noisy.right
    assert not run.score(case, None, "exit 2, no report: boom").right


def test_table_has_a_row_per_case_and_the_totals(tmp_path):
    bug = _scored_case(tmp_path)
    healthy = _scored_case(tmp_path, name="h", expect=None, at=(), cure=())
    scores = [
        run.score(bug, {"findings": [_finding("AMP202", bug.script, 2, message="update()")]}),
        run.score(healthy, {"findings": [_finding("AMP505", healthy.script, 1, severity="warning")]}),
    ]
    text = run.table(scores)
    assert "| `t` | m | AMP202 :2 | AMP202 train.py:2 | yes | yes | yes | 0 | – |" in text
    assert "| `h` | m | nothing | AMP505 train.py:1 | – | – | – | **AMP505** | – |" in text
    assert "Injected mistakes: 1; culprit right 1, line right 1, cure right 1" in text
    assert "Healthy versions: 1, without a warning 0." in text
    assert "`h`: runtime ['AMP505']" in run.details(scores)


# ---- the tracer on every case ---------------------------------------------------------------


def _params(framework: bool):
    for case in CASES:
        if case.framework != framework:
            continue
        marks = [pytest.mark.slow]
        if framework:
            marks.append(pytest.mark.frameworks)
        if case.name in KNOWN_WRONG:
            marks.append(pytest.mark.xfail(strict=True, reason=f"tracer gap: {KNOWN_WRONG[case.name]}"))
        yield pytest.param(case, id=case.name, marks=marks)


def _assert_diagnosed(case):
    report, run_error = run.trace_case(case, timeout=300)
    assert run_error is None, run_error
    score = run.score(case, report)
    summary = f"top {score.top} at {score.top_where}: {score.top_text}; false alarms {score.false_alarms}"
    if case.healthy:
        assert score.false_alarms == [], summary
    else:
        assert score.culprit, summary
        assert score.line, summary
        assert score.cure, summary
        assert score.false_alarms == [], summary


@pytest.mark.parametrize("case", list(_params(framework=False)))
def test_tracer_diagnoses_case(case):
    _assert_diagnosed(case)


@pytest.mark.parametrize("case", list(_params(framework=True)))
def test_tracer_diagnoses_framework_case(case):
    pytest.importorskip("transformers")
    pytest.importorskip("lightning")
    pytest.importorskip("accelerate")
    _assert_diagnosed(case)


@pytest.mark.slow
def test_runner_prints_the_table(tmp_path):
    out = tmp_path / "scores.json"
    done = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--case", "gan_healthy_two", "--details", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("| case | mistake | expected | top runtime finding |")
    assert "| `gan_healthy_two_scalers` |" in done.stdout
    assert "Healthy versions: 1, without a warning 1." in done.stdout
    assert '"case": "gan_healthy_two_scalers"' in out.read_text()


def test_runner_refuses_an_unknown_case(capsys):
    assert run.main(["--case", "no-such-case"]) == 2
    assert "no case matches" in capsys.readouterr().err


def test_score_reads_a_relative_path_from_the_folder_the_trace_ran_in(tmp_path):
    case = run.Case("rel", run.CASES[0].base, "m", expect="AMP201", at=("import torch",), cure=(r".",))
    relative = case.script.relative_to(ROOT)
    report = {"findings": [_finding("AMP201", relative, case.lines()[0], message="x")]}
    assert run.score(case, report).line
