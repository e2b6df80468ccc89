"""The text report as a reader meets it: findings one per line as ruff prints them (location,
code, severity, message; an indented help line), never folded by a narrow terminal, and a line
on the loss and the loss scale over the run."""

from __future__ import annotations

import contextlib
import io
import runpy
from pathlib import Path

import torch
from rich.console import Console
from torch import nn

from ampdoctor.trace.report.report_text import render
from ampdoctor.trace.session import trace_session

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def _text(report, width: int = 100) -> str:
    stream = io.StringIO()
    render(report, Console(file=stream, width=width, color_system=None))
    return stream.getvalue()


def _late_overflow():
    with contextlib.redirect_stdout(io.StringIO()), trace_session(steps=8, record_ops_steps=1) as session:
        runpy.run_path(str(SCRIPTS / "late_overflow.py"), run_name="__main__")
    return session.report()


def test_findings_are_one_line_each_with_the_location_first_and_a_help_line():
    report = _late_overflow()
    assert report.findings
    lines = _text(report, width=100).splitlines()
    start = lines.index("Findings")
    for finding in report.findings:
        head = f"{finding.code} [{finding.severity.label}] {finding.message}"
        (line,) = [line for line in lines[start:] if head in line]
        assert line.split(": ", 1)[0].endswith(f"late_overflow.py:{finding.location.line}")
        following = lines[lines.index(line) + 1]
        assert following == f"  help: {finding.help_text}"


def test_the_loss_and_scale_line_sums_up_the_run():
    report = _late_overflow()
    text = _text(report)
    (line,) = [line for line in text.splitlines() if line.startswith("Over the run: loss ")]
    records = report.observations.iterations
    skipped = [r.step for r in records if r.skipped]
    assert skipped, "the script overflows from its 4th iteration"
    assert f"{len(skipped)} skipped step(s) (iteration {', '.join(map(str, skipped[:6]))}" in line
    assert "loss scale 65536 → " in line and "(iteration 1 is the first optimizer step)" in line


def test_with_several_backward_passes_per_iteration_the_loss_is_said_to_be_their_sum():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with trace_session(steps=3) as session:
        scaler = torch.amp.GradScaler("cpu")
        for _ in range(3):
            for _micro in range(4):
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = model(torch.randn(2, 4)).float().mean() / 4
                scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    (line,) = [line for line in _text(session.report()).splitlines() if line.startswith("Over the run: loss ")]
    assert "each the sum of the iteration's 4 backward passes" in line
    assert "no skipped step" in line
