"""``ampdoctor trace`` on scripts written for the training frameworks, unchanged.

Each script in fixtures/trace/frameworks/ is traced in this process (through the click command)
and run plainly with ``python``, without ampdoctor, for the same number of optimizer steps (all
plain runs share one subprocess, so the frameworks are imported once); the losses it prints must
be bit-identical, the iterations counted must equal the optimizer steps
(with gradient accumulation and skipped steps), a healthy run must get no warning or error, and
the op census must show the precision the framework promises.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.frameworks

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"
FRAMEWORKS = ROOT / "fixtures" / "trace" / "frameworks"
MATMULS = {"mm", "addmm", "bmm", "convolution"}
_LOSS_LINE = re.compile(r"^(?:(?:step|batch) \d+ )?loss \S+.*$", re.MULTILINE)


def loss_lines(text: str) -> list[str]:
    return _LOSS_LINE.findall(text)


HF_BF16 = (FRAMEWORKS / "hf_trainer.py", "--precision", "bf16", "--max-steps", "3")
HF_FP16 = (FRAMEWORKS / "hf_trainer.py", "--precision", "fp16", "--max-steps", "2")
LIGHTNING_BF16 = (FRAMEWORKS / "lightning_trainer.py", "--precision", "bf16-mixed", "--max-steps", "3")
LIGHTNING_FP16 = (FRAMEWORKS / "lightning_trainer.py", "--precision", "16-mixed-plugin", "--max-steps", "4")
ACCELERATE_BF16 = (FRAMEWORKS / "accelerate_loop.py", "--mixed-precision", "bf16", "--max-steps", "3")
ACCELERATE_SCALER = (SCRIPTS / "accelerate_scaler_path.py", "--max-steps", "6")
TIMM_STYLE = (FRAMEWORKS / "timm_style.py", "--max-steps", "3", "--accum-steps", "2")
COMPILED = (FRAMEWORKS / "compiled_model.py", "--max-steps", "3", "--backend", "aot_eager")
_PLAIN_RUNS = (
    HF_BF16,
    HF_FP16,
    LIGHTNING_BF16,
    LIGHTNING_FP16,
    ACCELERATE_BF16,
    ACCELERATE_SCALER,
    TIMM_STYLE,
    COMPILED,
)


@pytest.fixture(scope="module")
def plain_outputs() -> dict[tuple, str]:
    """Every run above, plainly, in one `python` process without ampdoctor; the scripts whose
    framework is missing are left out."""
    wanted = [run for run in _PLAIN_RUNS if _importable(run[0])]
    command = [sys.executable, str(SCRIPTS / "run_plain.py"), json.dumps([[str(p) for p in run] for run in wanted])]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(zip(wanted, json.loads(result.stdout.splitlines()[-1])))


def _importable(script: Path) -> bool:
    text = script.read_text()
    needed = [
        name
        for name in ("transformers", "lightning", "accelerate")
        if f"from {name}" in text or f"import {name}" in text
    ]
    return all(importlib.util.find_spec(name) is not None for name in needed)


@pytest.fixture
def plain(plain_outputs):
    """The loss lines of one of the plain runs."""

    def lines(run: tuple) -> list[str]:
        return loss_lines(plain_outputs[run])

    return lines


@pytest.fixture(autouse=True)
def fresh_framework_state():
    """Each script starts as in a new process: Accelerate's singletons are reset."""
    yield
    state = sys.modules.get("accelerate.state")
    if state is not None:
        state.AcceleratorState._reset_state(True)
        state.GradientState._reset_state()


def trace(trace_cli, script, *args: str, steps: int = 0, record_ops_steps: int = 2):
    run = trace_cli(
        str(script),
        "--steps",
        str(steps),
        "--record-ops-steps",
        str(record_ops_steps),
        "--no-progress",
        "--fail-on",
        "never",
        "--",
        *args,
    )
    assert run.report is not None, run.stdout[-3000:]
    assert run.report["error"] is None, run.report["error"]
    return run


def serious(report) -> list[str]:
    return [f["code"] for f in report["findings"] if f["severity"] in ("warning", "error")]


def forward_matmul_dtypes(report) -> set[str]:
    """Output dtypes of the matmuls run inside modules under autocast in the forward pass."""
    return {
        op["output_dtype"]
        for op in report["ops"]
        if op["op"] in MATMULS and op["phase"] == "forward" and op["autocast"] == "on" and op["module"]
    }


def test_transformers_trainer_bf16(trace_cli, plain):
    pytest.importorskip("transformers")
    run = trace(trace_cli, *HF_BF16, record_ops_steps=1)
    report = run.report
    assert (report["steps"], report["stopped"]) == (3, "end")
    assert report["uses"]["backward_calls"] == 6  # two accumulated micro-batches per step
    assert report["uses"]["autocast"] == ["bfloat16"] and report["uses"]["grad_scaler"] is False
    assert serious(report) == []
    # The Linear/Conv1D projections run in bfloat16; the attention's bmm runs in float32 (torch's
    # math attention kernel, taken on the CPU with dropout, computes bfloat16 in float32).
    projections = [op for op in report["ops"] if op["op"] in ("addmm", "mm") and op["phase"] == "forward"]
    assert projections and {op["output_dtype"] for op in projections if op["autocast"] == "on"} == {"bfloat16"}
    lines = loss_lines(run.stdout)
    assert len(lines) == 3
    assert lines == plain(HF_BF16)


def test_transformers_trainer_fp16_on_the_cpu_trains_in_float32(trace_cli, plain):
    pytest.importorskip("transformers")
    run = trace(trace_cli, *HF_FP16, record_ops_steps=1)
    report = run.report
    assert report["steps"] == 2
    assert report["uses"]["autocast"] == [] and report["uses"]["grad_scaler"] is False
    assert any("never entered torch.autocast" in note for note in report["notes"])
    assert serious(report) == []
    assert loss_lines(run.stdout) == plain(HF_FP16)


def test_lightning_bf16_mixed(trace_cli, plain):
    pytest.importorskip("lightning")
    run = trace(trace_cli, *LIGHTNING_BF16)
    report = run.report
    # Lightning steps through `optimizer.step(closure)`: counted once per step, accumulation too.
    assert (report["steps"], report["uses"]["backward_calls"]) == (3, 6)
    assert report["uses"]["autocast"] == ["bfloat16"] and report["uses"]["grad_scaler"] is False
    assert forward_matmul_dtypes(report) == {"bfloat16"}
    assert serious(report) == []
    # The closure computes the gradients inside step(): they are measured after it, every step.
    assert report["gradients"] and all(g["iterations"] == 3 for g in report["gradients"])
    lines = loss_lines(run.stdout)
    assert len(lines) == 6
    assert lines == plain(LIGHTNING_BF16)


def test_lightning_16_mixed_scaler_is_observed(trace_cli, plain):
    pytest.importorskip("lightning")
    run = trace(trace_cli, *LIGHTNING_FP16, steps=3)
    report = run.report
    assert (report["steps"], report["stopped"]) == (3, "steps")
    assert report["uses"]["grad_scaler"] is True and report["uses"]["scaler_steps"] == 3
    assert report["scale"] == [65536.0] * 3 and report["skipped"] == []
    assert report["uses"]["autocast"] == ["float16"] and forward_matmul_dtypes(report) == {"float16"}
    assert serious(report) == []
    lines, expected = loss_lines(run.stdout), plain(LIGHTNING_FP16)
    assert len(expected) == 8 and len(lines) >= 5  # stopped inside the third optimizer step
    assert lines == expected[: len(lines)]


def test_accelerate_bf16(trace_cli, plain):
    pytest.importorskip("accelerate")
    pytest.importorskip("transformers")
    run = trace(trace_cli, *ACCELERATE_BF16, record_ops_steps=1)
    report = run.report
    # AcceleratedOptimizer.step steps the inner optimizer only when gradients are synchronised.
    assert (report["steps"], report["uses"]["backward_calls"], report["uses"]["optimizer_steps"]) == (3, 6, 3)
    assert report["uses"]["autocast"] == ["bfloat16"]
    assert "bfloat16" in forward_matmul_dtypes(report)
    assert serious(report) == []
    lines = loss_lines(run.stdout)
    assert len(lines) == 6
    assert lines == plain(ACCELERATE_BF16)


def test_accelerate_fp16_on_the_cpu_has_no_autocast_and_no_scaler(trace_cli):
    pytest.importorskip("accelerate")
    pytest.importorskip("transformers")
    script = FRAMEWORKS / "accelerate_loop.py"
    run = trace(trace_cli, script, "--mixed-precision", "fp16", "--max-steps", "2", record_ops_steps=0)
    report = run.report
    assert report["steps"] == 2
    assert report["uses"]["autocast"] == [] and report["uses"]["grad_scaler"] is False
    assert any("never entered torch.autocast" in note for note in report["notes"])


def test_accelerate_scaler_path_counts_skipped_steps(trace_cli, plain):
    pytest.importorskip("accelerate")
    run = trace(trace_cli, *ACCELERATE_SCALER, record_ops_steps=1)
    report = run.report
    lines = loss_lines(run.stdout)
    # Accelerate's own verdict per step, printed by the script, against the tracer's.
    skipped_by_accelerate = [i for i, line in enumerate(lines, 1) if line.endswith("skipped True")]
    assert len(lines) == 6 and skipped_by_accelerate == [1, 2, 3, 4, 5]
    assert (report["steps"], report["skipped"]) == (6, skipped_by_accelerate)
    assert report["uses"]["scaler_steps"] == 6 and report["uses"]["backward_calls"] == 12
    assert report["scale"] == [2.0**24 / 2**k for k in range(6)]
    assert lines == plain(ACCELERATE_SCALER)


def test_timm_style_float16_loop(trace_cli, plain):
    run = trace(trace_cli, *TIMM_STYLE)
    report = run.report
    assert (report["steps"], report["uses"]["backward_calls"]) == (3, 6)
    assert report["uses"]["grad_scaler"] is True and report["scale"] == [65536.0] * 3
    assert forward_matmul_dtypes(report) == {"float16"}
    assert serious(report) == []
    lines = loss_lines(run.stdout)
    assert len(lines) == 6
    assert lines == plain(TIMM_STYLE)


def test_timm_style_skipped_steps_are_iterations(trace_cli):
    script = FRAMEWORKS / "timm_style.py"
    run = trace(trace_cli, script, "--max-steps", "5", "--init-scale", str(2.0**24), record_ops_steps=0)
    report = run.report
    # A skipped step is still an iteration: 5 updates attempted, two micro-batches each.
    assert (report["steps"], report["uses"]["backward_calls"]) == (5, 10)
    halved = [i for i, (before, after) in enumerate(zip(report["scale"], report["scale_after"]), 1) if after < before]
    assert report["skipped"] == halved and len(halved) >= 3 and halved[0] == 1


def test_compiled_model_keeps_compiling_and_says_the_census_is_blind(trace_cli, plain):
    torch = pytest.importorskip("torch")
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    run = trace(trace_cli, *COMPILED)
    report = run.report
    # Dynamo runs frames eagerly while a dispatch mode is active: the census must have stepped
    # aside, so the graph was really captured.
    assert counters["stats"]["unique_graphs"] >= 1
    assert report["steps"] == 3
    assert report["ops"] == []
    assert sum("torch.compile" in note for note in report["notes"]) == 1
    assert serious(report) == []
    assert "global hooks" not in run.stderr + run.stdout
    lines = loss_lines(run.stdout)
    assert len(lines) == 3
    assert lines == plain(COMPILED)


@pytest.mark.slow
def test_compiled_model_with_inductor_is_bit_identical(trace_cli):
    pytest.importorskip("torch")
    args = ("--max-steps", "2", "--backend", "inductor")
    script = FRAMEWORKS / "compiled_model.py"
    run = trace(trace_cli, script, *args)
    assert run.report["steps"] == 2
    lines = loss_lines(run.stdout)
    assert len(lines) == 2
    result = subprocess.run([sys.executable, str(script), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert lines == loss_lines(result.stdout)
