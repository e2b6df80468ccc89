"""AMP513 (conversions that cost time) blames what the script does, not the tracer or torch:
the GradScaler's own float64 arithmetic is not the script's data, an evaluation pass under
``no_grad`` is not an autocast region per micro-step, and the finding points at the training
step's autocast region."""

from __future__ import annotations

import contextlib
import inspect
import io

import torch
from torch import nn

from ampdoctor.trace.compare.compare_child import CompareChild
from ampdoctor.trace.rules.compare_rules import _cast_location
from ampdoctor.trace.session import TraceSession


def _train(steps: int, evaluate: bool) -> int:
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(steps):
        if evaluate:
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
                model(torch.randn(4, 8))
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(torch.randn(4, 8)).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    return inspect.getsourcelines(_train)[1] + 8  # the training region's line


def test_the_scalers_own_float64_arithmetic_is_not_in_the_census():
    with contextlib.redirect_stdout(io.StringIO()), TraceSession(record_ops_steps=3) as session:
        _train(4, evaluate=False)
    conversions = [k for k in session.observations.ops if k.op == "_to_copy" and k.input_dtypes[:1] == ("float64",)]
    assert conversions == []
    assert any(k.op == "_to_copy" for k in session.observations.ops)  # autocast's casts are counted


def test_a_float64_conversion_of_the_script_is_still_counted():
    with contextlib.redirect_stdout(io.StringIO()), TraceSession(record_ops_steps=2) as session:
        model = nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        scaler = torch.amp.GradScaler("cpu")
        for _ in range(3):
            data = torch.randn(4, 8, dtype=torch.float64).float()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = model(data).float().mean()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    assert any(k.op == "_to_copy" and k.input_dtypes[:1] == ("float64",) for k in session.observations.ops)


def test_regions_per_step_count_the_training_regions_only():
    with contextlib.redirect_stdout(io.StringIO()), TraceSession(record_ops_steps=1) as session:
        child = CompareChild("float32", session)  # counts the regions (not entered: no switch-off)
        _train(6, evaluate=True)
    assert child.outer_regions == 6


def test_the_finding_points_at_the_training_steps_autocast_region():
    with contextlib.redirect_stdout(io.StringIO()), TraceSession(record_ops_steps=1) as session:
        line = _train(3, evaluate=True)
    observations = session.observations
    assert observations.autocast_sites["float16"][1] == line
    location = _cast_location(observations, None, [], per_micro_step=True)
    assert (location.path.endswith("test_trace_cast_causes.py"), location.line) == (True, line)
