"""``ampdoctor trace --what-if float16``: the shadow scaler against torch's, the fixtures'
verdicts, and the report sections."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch

from ampdoctor.float16 import FLOAT16_SMALLEST_SUBNORMAL
from ampdoctor.trace.gradients import gradient_row
from ampdoctor.trace.whatif import SAFE, SAFE_WITH_CHANGES, UNSAFE, ShadowScaler, needed_scale, underflow_share

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "trace"

WHAT_IF = FIXTURES / "whatif"


def _torch_scales(found_inf: list[bool], **options) -> list[float]:
    """The scale torch's own GradScaler holds after each update, fed the same inf/finite steps."""
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([weight], lr=0.0)
    scaler = torch.amp.GradScaler("cpu", **options)
    scales = []
    for overflow in found_inf:
        optimizer.zero_grad()
        scaler.scale(weight.sum()).backward()
        if overflow:
            weight.grad[0] = math.inf
        scaler.step(optimizer)
        scaler.update()
        scales.append(scaler.get_scale())
    return scales


def _shadow_scales(found_inf: list[bool], **options) -> list[float]:
    shadow = ShadowScaler(
        scale=options.get("init_scale", 2.0**16),
        growth_factor=options.get("growth_factor", 2.0),
        backoff_factor=options.get("backoff_factor", 0.5),
        growth_interval=options.get("growth_interval", 2000),
    )
    scales = []
    for overflow in found_inf:
        shadow.update(overflow)
        scales.append(shadow.scale)
    return scales


@pytest.mark.parametrize("seed", range(4))
def test_shadow_scaler_follows_torchs_gradscaler(seed):
    rng = random.Random(seed)
    steps = [rng.random() < 0.2 for _ in range(60)]
    options = {"init_scale": 2.0**10, "growth_interval": 3}
    assert _shadow_scales(steps, **options) == _torch_scales(steps, **options)


@pytest.mark.slow
def test_shadow_scaler_defaults_are_torchs():
    steps = [True, True] + [False] * 2000 + [True]
    assert _shadow_scales(steps) == _torch_scales(steps)
    assert _shadow_scales(steps)[-2] == 2.0**15  # backed off twice, grew once after 2000 clean


def _histogram(grad: torch.Tensor) -> list[float]:
    return torch.bincount((grad.abs().view(torch.int32) >> 23).long(), minlength=256).float().tolist()


def test_underflow_share_counts_what_float16_flushes_to_zero():
    grad = torch.tensor([1e-9, 1e-9, 1e-3, 0.0])
    histogram = _histogram(grad)
    # 1e-9 * 2**10 ~ 1e-6 is a float16 subnormal (kept); at 2**0 it is below 2**-24 (flushed).
    assert underflow_share(histogram, 2.0**10, FLOAT16_SMALLEST_SUBNORMAL) == 0.0
    assert underflow_share(histogram, 1.0, FLOAT16_SMALLEST_SUBNORMAL) == pytest.approx(2 / 3)
    assert (grad[:3] * needed_scale({"g": histogram}) >= 2**-24).all()


@pytest.mark.parametrize("log2_scale", [0, 6, 13, 16, 20])
def test_what_if_counts_as_lost_what_amp505_counts(log2_scale):
    """The share the what-if calls lost at a scale is AMP505's: flushed to zero or below 2**-20
    once scaled (below_subnormal + coarse_subnormal of ``gradient_row``), over the nonzero values."""
    torch.manual_seed(log2_scale)
    grad = torch.exp2(torch.empty(4096).uniform_(-48, -4)) * torch.randn(4096).sign()
    grad[::7] = 0.0
    scale = torch.tensor(2.0**log2_scale)
    zero, below_subnormal, _, _, coarse, _ = gradient_row(grad, scale, grads_scaled=False).tolist()
    expected = (below_subnormal + coarse) / (1 - zero)
    assert 0.0 < expected < 1.0
    assert underflow_share(_histogram(grad), 2.0**log2_scale) == pytest.approx(expected, abs=1e-6)


def test_the_needed_scale_lifts_gradients_above_amp505s_cut():
    """Values at 2**-30 are kept by AMP505 from a scale of 2**10 (2**-20 once scaled): subnormals
    from 2**-20 to 2**-14 are not lost, so the what-if asks for no more."""
    histogram = _histogram(torch.full((100,), 2.0**-30))
    needed = needed_scale({"g": histogram})
    assert needed == 2.0**10
    assert underflow_share(histogram, needed) == 0.0 and underflow_share(histogram, needed / 2) == 1.0
    # The tolerance is AMP505's threshold: 1% of the elements may be lost, not more.
    mixed = _histogram(torch.cat([torch.full((98,), 2.0**-10), torch.full((2,), 2.0**-30)]))
    assert needed_scale({"g": mixed}, tolerance=0.01) == 2.0**10
    assert needed_scale({"g": mixed}, tolerance=0.05) < 2.0**10


def _what_if(trace_cli, name: str, *extra: str) -> dict:
    run = trace_cli(str(WHAT_IF / name), "--what-if", "float16", "--fail-on", "never", "--no-progress", *extra)
    assert run.exit_code == 0, run.stderr
    return run.report["what_if"]


def test_activations_beyond_float16_are_unsafe_and_name_the_module(trace_cli):
    what_if = _what_if(trace_cli, "activations_beyond_float16_bf16.py")
    assert what_if["verdict"] == UNSAFE
    assert [o["module"] for o in what_if["activation_overflows"]] == ["0.0"]
    assert what_if["activation_overflows"][0]["max_abs"] > 65504
    assert any("0.0 (Linear)" in reason for reason in what_if["reasons"])


def test_an_overflow_contained_in_a_block_keeps_that_block_in_float32(trace_cli):
    what_if = _what_if(trace_cli, "contained_overflow_bf16.py")
    assert what_if["verdict"] == SAFE_WITH_CHANGES
    assert [o["module"] for o in what_if["activation_overflows"]] == ["project.linear"]
    assert what_if["activation_overflows"][0]["contained_by"] == "project"
    assert what_if["keep_float32"] == ["project"]


def test_tiny_gradients_need_a_larger_init_scale(trace_cli):
    what_if = _what_if(trace_cli, "tiny_gradients.py")
    assert what_if["verdict"] == SAFE_WITH_CHANGES
    needed = what_if["needed_scale"]
    assert needed > 2.0**16 and what_if["init_scale"] == needed
    # At the default scale everything underflows; at the recommended one, the gradients survive.
    assert all(g["underflow_share"] > 0.99 for g in what_if["gradients"])
    assert all(g["lost_share"] > 0.99 and g["lost_worst"] >= g["lost_share"] for g in what_if["gradients"])
    assert any(f"init_scale={needed:g}" in reason for reason in what_if["reasons"])
    # In AMP505's words: what float16 flushes to zero or keeps with at most 4 significant bits.
    assert any("keep at most 4 significant bits (below 2**-20)" in reason for reason in what_if["reasons"])
    assert not any("normal range" in reason for reason in what_if["reasons"])
    assert what_if["skipped"] == []


def test_healthy_float32_model_is_safe(trace_cli):
    what_if = _what_if(trace_cli, "healthy.py")
    assert what_if["verdict"] == SAFE
    assert what_if["skipped"] == [] and what_if["activation_overflows"] == []
    assert what_if["scale"] == [2.0**16] * 12
    assert what_if["real_scale"] is None


def test_a_float16_run_shows_the_shadow_beside_the_real_scaler(trace_cli):
    run = trace_cli(str(FIXTURES / "healthy_fp16.py"), "--what-if", "float16", "--steps", "6", "--no-progress")
    what_if = run.report["what_if"]
    assert what_if["real_scale"] == run.report["scale"]
    assert len(what_if["scale"]) == 6
    text = " ".join(run.stdout.split())  # rich wraps lines at the console width
    assert "beside" in text and "real scaler" in text


def test_the_text_report_shows_the_verdict(trace_cli):
    run = trace_cli(str(WHAT_IF / "tiny_gradients.py"), "--what-if", "float16", "--no-progress")
    assert "What if float16? safe with changes" in " ".join(run.stdout.split())


def test_without_the_option_there_is_no_what_if_section(trace_cli):
    run = trace_cli(str(WHAT_IF / "healthy.py"), "--steps", "2", "--no-progress")
    assert run.report["what_if"] is None
    assert "What if" not in run.stdout


def test_the_what_if_leaves_the_run_unchanged(trace_cli):
    """The script's own printed losses are the same with and without the shadow measurements,
    and its ops are not counted in the census."""
    plain = trace_cli(
        str(WHAT_IF / "tiny_gradients.py"), "--no-progress", "--fail-on", "never", "--gradient-interval", "1"
    )
    shadowed = trace_cli(
        str(WHAT_IF / "tiny_gradients.py"), "--no-progress", "--fail-on", "never", "--what-if", "float16"
    )
    losses = [line for line in plain.stdout.splitlines() if line.startswith("iteration ")]
    assert len(losses) == 12
    assert losses == [line for line in shadowed.stdout.splitlines() if line.startswith("iteration ")]
    assert plain.report["loss"] == shadowed.report["loss"]
    assert {op["op"] for op in shadowed.report["ops"]} == {op["op"] for op in plain.report["ops"]}


@pytest.mark.slow
def test_a_float16_scaler_kept_too_low_is_named_beside_the_shadow(trace_cli):
    run = trace_cli(
        str(FIXTURES / "underflow_gradients.py"),
        "--what-if",
        "float16",
        "--steps",
        "6",
        "--no-progress",
        "--fail-on",
        "never",
    )
    what_if = run.report["what_if"]
    assert what_if["real_scale"] == [1.0] * 6 and what_if["scale"] == [2.0**16] * 6
    assert what_if["verdict"] == SAFE
    assert any("own GradScaler ends at 2**0" in reason for reason in what_if["reasons"])


def test_a_failing_prediction_stops_itself_and_the_script_goes_on(trace_cli, monkeypatch):
    from ampdoctor.trace import whatif

    def broken(self, pending, values, record):
        raise RuntimeError("boom")

    monkeypatch.setattr(whatif.WhatIfFloat16, "_absorb", broken)
    run = trace_cli(str(WHAT_IF / "healthy.py"), "--what-if", "float16", "--no-progress", "--fail-on", "never")
    assert run.exit_code == 0 and run.report["steps"] == 12
    assert any("what-if prediction stopped: RuntimeError: boom" in note for note in run.report["notes"])
    assert any("prediction is partial" in reason for reason in run.report["what_if"]["reasons"])


def test_a_script_that_never_steps_gets_no_verdict(trace_cli, tmp_path):
    script = tmp_path / "forward_only.py"
    script.write_text(
        "import torch\nfrom torch import nn\nm = nn.Linear(4, 4)\n"
        "for _ in range(3):\n    m(torch.randn(2, 4)).sum().backward()\n"
    )
    run = trace_cli(str(script), "--what-if", "float16", "--no-progress", "--fail-on", "never")
    assert run.report["what_if"]["verdict"] == "unknown"
    assert run.report["what_if"]["scale"] == []
