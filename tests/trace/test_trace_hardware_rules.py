"""AMP514 in every trace (an autocast dtype the device has no fast arithmetic for, pointing at
the autocast that chose it), and AMP512's padding advice only where GEMMs run on tiled units
(tensor cores, AMX). The hardware verdicts are made up here: the tests must not depend on the
CPU they run on."""

from __future__ import annotations

import contextlib
import inspect
import io
import runpy
from pathlib import Path

import pytest
import torch
from torch import nn

from ampdoctor.trace.compare import hardware
from ampdoctor.trace.compare.hardware import Hardware
from ampdoctor.trace.rulebase import Locator, Thresholds
from ampdoctor.trace.rules.compare_rules import gemm_not_aligned
from ampdoctor.trace.session import TraceSession

ROOT = Path(__file__).resolve().parents[2]
UNALIGNED = ROOT / "fixtures" / "trace" / "compare" / "unaligned_linear.py"

SLOW = Hardware("cpu", "test CPU", "bfloat16", False, "AVX2", [], "the CPU has no AVX512-BF16 or AMX-BF16")
AVX512 = Hardware("cpu", "test CPU", "bfloat16", True, "AVX512", ["avx512_bf16"], "the CPU has avx512_bf16")
AMX = Hardware("cpu", "test CPU", "bfloat16", True, "AVX512", ["amx_bf16", "avx512_bf16"], "the CPU has amx_bf16")


def _train() -> int:
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(3):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            model(torch.randn(2, 8))  # an evaluation first: not the region that trains
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(torch.randn(4, 8)).float().square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return inspect.getsourcelines(_train)[1] + 6


def _findings(monkeypatch, verdict, check="1"):
    monkeypatch.setenv("AMPDOCTOR_HARDWARE_CHECK", check)
    monkeypatch.setattr(hardware, "hardware_for", lambda device, dtype: verdict)
    with contextlib.redirect_stdout(io.StringIO()), TraceSession(record_ops_steps=1) as session:
        line = _train()
    return [f for f in session.report().findings if f.code == "AMP514"], line


def test_every_trace_notes_emulated_low_precision_at_the_training_autocast(monkeypatch):
    (finding,), line = _findings(monkeypatch, SLOW)
    assert finding.severity.label == "info"
    assert finding.location.line == line and finding.location.path.endswith("test_trace_hardware_rules.py")
    assert "bfloat16 autocast on cpu" in finding.message and "emulated" in finding.message
    assert "--compare float32" in finding.message and "float32" in finding.help


@pytest.mark.parametrize("verdict", [AVX512, AMX, None], ids=["avx512-bf16", "amx", "unknown"])
def test_hardware_with_fast_arithmetic_or_unknown_gets_no_note(monkeypatch, verdict):
    assert _findings(monkeypatch, verdict)[0] == []


def test_the_note_can_be_turned_off(monkeypatch):
    assert _findings(monkeypatch, SLOW, check="0")[0] == []


def test_assumed_tensor_cores_are_fast_hardware(monkeypatch):
    monkeypatch.setenv(hardware.ASSUME_VARIABLE, "tensor-cores")
    verdict = hardware.hardware_for("cpu", "bfloat16")
    assert verdict is not None and verdict.fast and "tensor-cores" in verdict.flags


@pytest.fixture(scope="module")
def unaligned_observations():
    with contextlib.redirect_stdout(io.StringIO()), TraceSession(record_ops_steps=1) as session:
        namespace = runpy.run_path(str(UNALIGNED))
        namespace["main"]()
    return session.observations


@pytest.mark.parametrize(
    "verdicts, advised",
    [([AMX], True), ([Hardware("cuda", "GPU", "bfloat16", True, "8.0")], True), ([AVX512], False), ([SLOW], False)],
    ids=["amx", "tensor-cores", "avx512-only", "emulated"],
)
def test_padding_is_advised_only_where_gemms_run_on_tiles(unaligned_observations, verdicts, advised):
    locator = Locator(str(UNALIGNED), unaligned_observations.class_files)
    found = list(gemm_not_aligned(unaligned_observations, None, None, verdicts, Thresholds(), locator))
    if advised:
        (finding,) = found
        assert finding.extra["module"] == "proj" and "K=100" in finding.message
    else:
        assert found == []


@pytest.fixture(scope="module")
def small_head_observations():
    """A bfloat16 Linear(512, 512) and a Linear(512, 17) head: the head's N of 17 is not a
    multiple of 8. The first layer runs two GEMMs of 64 x 512 x 512 (forward, weight gradient:
    its input needs none), the head three of 64 x 512 x 17: 51/1075 (4.7%) of the arithmetic."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 512), nn.Linear(512, 17))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with contextlib.redirect_stdout(io.StringIO()), TraceSession(record_ops_steps=1) as session:
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(torch.randn(64, 512)).float().square().mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    return session.observations


@pytest.mark.parametrize(
    "share, advised",
    [(None, True), (0.045, True), (0.05, False)],
    ids=["default", "threshold-below", "threshold-above"],
)
def test_padding_is_advised_from_the_modules_share_of_the_gemms(small_head_observations, share, advised):
    # Without a profile the share is the module's share of the GEMM arithmetic: the same on
    # every machine, whatever its load (a profile's time share moves with it).
    thresholds = Thresholds() if share is None else Thresholds(align_share=share)
    locator = Locator(__file__, small_head_observations.class_files)
    found = list(gemm_not_aligned(small_head_observations, None, None, [AMX], thresholds, locator))
    if advised:
        (finding,) = found
        assert finding.extra["module"] == "1" and "N=17" in finding.message and "17 to 24" in finding.help
        assert finding.extra["share_of"] == "GEMM arithmetic"
        assert abs(finding.extra["time_share"] - 51 / 1075) < 1e-9
    else:
        assert found == []


def test_a_run_with_the_hardware_note_only_still_finds_no_problem(monkeypatch):
    findings, _line = _findings(monkeypatch, SLOW)
    assert findings
    monkeypatch.setenv("AMPDOCTOR_HARDWARE_CHECK", "1")
    with contextlib.redirect_stdout(io.StringIO()), TraceSession(record_ops_steps=1) as session:
        _train()
    lead, rest, kind = session.report().verdict()
    assert (lead, kind) == ("No mixed-precision problems found", "ok")
    assert rest == " in 3 iteration(s); 1 info finding below."
