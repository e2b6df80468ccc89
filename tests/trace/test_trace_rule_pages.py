"""The executable examples of the runtime rule pages (rules/AMP5xx.md): every ``bad`` example
reports its code when traced, every ``good`` example does not."""

import contextlib
import importlib.util
import io

import pytest

from ampdoctor.catalog import all_rules
from ampdoctor.findings import Severity
from ampdoctor.trace.rules import registered_codes
from ampdoctor.trace.runner import Target, run_target
from ampdoctor.trace.session import TraceSession

TRACE_RULES = [rule for rule in all_rules().values() if rule.origin == "trace"]
# The float8 pages' examples train with torchao (the ``fp8`` extra, which CI installs).
HAS_TORCHAO = importlib.util.find_spec("torchao") is not None
NEEDS_TORCHAO = pytest.mark.skipif(not HAS_TORCHAO, reason="torchao is not installed (the fp8 extra)")
EXAMPLES = [
    pytest.param(
        rule,
        example,
        id=f"{rule.code}-{example.kind}-line{example.page_line}",
        marks=[NEEDS_TORCHAO] if "torchao" in example.source else [],
    )
    for rule in TRACE_RULES
    for example in rule.examples
    # Examples marked torchrun run on two ranks: tests/trace/test_trace_distributed.py; those
    # marked compare run twice under --compare float32: tests/trace/test_compare.py. Those marked
    # gpu need a CUDA GPU without float8 GEMMs: run where there is one (never in CI; the rule is
    # tested with torch's refusal in tests/trace/test_trace_float8.py).
    if "torchrun" not in example.options and "compare" not in example.options and "gpu" not in example.options
]


def _gpu_without_float8() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.get_device_capability() < (8, 9)


GPU_EXAMPLES = [
    pytest.param(rule, example, id=f"{rule.code}-{example.kind}-line{example.page_line}")
    for rule in TRACE_RULES
    for example in rule.examples
    if "gpu" in example.options
]


@pytest.mark.skipif(not HAS_TORCHAO, reason="torchao is not installed (the fp8 extra)")
@pytest.mark.parametrize("rule,example", GPU_EXAMPLES)
def test_rule_page_gpu_example(rule, example, tmp_path):
    if not _gpu_without_float8():
        pytest.skip("needs a CUDA GPU below compute capability 8.9")
    path = tmp_path / "example.py"
    path.write_text(example.source)
    with contextlib.redirect_stdout(io.StringIO()):
        with TraceSession(script=str(path)) as session:
            session.outcome = run_target(Target(script=str(path)))
    codes = {finding.code for finding in session.report().findings}
    assert rule.code in codes


def trace_example(source: str, tmp_path):
    path = tmp_path / "example.py"
    path.write_text(source)
    with contextlib.redirect_stdout(io.StringIO()):
        with TraceSession(script=str(path)) as session:
            session.outcome = run_target(Target(script=str(path)))
    assert session.outcome.reason == "end", session.outcome.traceback
    return session.report()


def test_every_registered_runtime_rule_has_a_page_and_every_page_a_rule():
    pages = all_rules()
    assert set(registered_codes()) <= set(pages)
    # The runtime's own codes (AMP5xx); the others are lint's, seen at run time too.
    assert [rule.code for rule in TRACE_RULES] == [code for code in registered_codes() if pages[code].origin == "trace"]
    assert {code for code in registered_codes() if pages[code].origin != "trace"} == {
        "AMP101",
        "AMP105",
        "AMP201",
        "AMP202",
        "AMP203",
        "AMP204",
        "AMP205",
        "AMP301",
        "AMP303",
    }
    for rule in TRACE_RULES:
        assert rule.fixable == "no"
        kinds = [example.kind for example in rule.examples]
        assert "bad" in kinds and "good" in kinds
        for heading in ("## What it does", "## Why is this a problem", "## Example", "## Use instead", "## References"):
            assert heading in rule.body, (rule.code, heading)


@pytest.mark.parametrize("rule,example", EXAMPLES)
def test_rule_page_example(rule, example, tmp_path):
    report = trace_example(example.source, tmp_path)
    codes = {finding.code for finding in report.findings}
    if example.kind == "bad":
        assert {code for _, code in example.expected} == {rule.code}
        assert rule.code in codes, report.to_dict()["findings"]
        severity = next(f.severity for f in report.findings if f.code == rule.code)
        assert severity is rule.severity
    else:
        assert rule.code not in codes
        assert not [f for f in report.findings if f.severity >= Severity.WARNING], codes
