"""benchmarks/cuda/: the summary compares printed losses bit for bit, flags unexpected exit
statuses and skipped steps, and reads the report's headline; each training script's CPU path
(``--device cpu --size tiny``) runs and prints its losses as ``... loss REPR hex HEX``."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks" / "cuda"


def _summarize():
    spec = importlib.util.spec_from_file_location("cuda_summarize", BENCH / "summarize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _losses(values: list[float]) -> str:
    return "".join(f"step {i} loss {v!r} hex {v.hex()} scale 65536.0\n" for i, v in enumerate(values))


def _write_run(logs: Path, rows: list[list[str]], outputs: dict[str, str]) -> Path:
    (logs / "env.txt").write_text("torch 2.x cuda available True\n")
    (logs / "steps.tsv").write_text("".join("\t".join(row) + "\n" for row in rows))
    for name, text in outputs.items():
        (logs / f"{name}.out").write_text(text)
        (logs / f"{name}.err").write_text("")
    summary = logs / "summary.txt"
    module = _summarize()
    saved = sys.argv
    sys.argv = ["summarize.py", str(logs), str(summary)]
    try:
        module.main()
    finally:
        sys.argv = saved
    return summary


def test_equal_losses_are_counted_and_a_one_bit_difference_is_found(tmp_path):
    plain = [4.25, 4.125, 3.9990234375]
    nudged = plain[:2] + [float.fromhex("0x1.ffe0000000001p+1")]  # the last bit of the third
    report = {
        "steps": 2,
        "stopped": "steps",
        "completed": True,
        "uses": {"autocast": ["float16"], "grad_scaler": True, "scaler_steps": 2},
        "scale": [65536.0, 65536.0],
        "skipped": [],
        "findings": [
            {"code": "AMP201", "severity": "error", "message": "clipped while scaled", "path": "/x/t.py", "line": 9}
        ],
        "static_findings": [{"code": "AMP301", "line": 4}],
    }
    (tmp_path / "r.json").write_text(json.dumps(report))
    rows = [
        ["plain", "-", "0", "0", "3.50", "90", "-", "python t.py"],
        ["traced", "plain", "1", "1", "5.25", "90", str(tmp_path / "r.json"), "python -m ampdoctor trace t.py"],
        ["nudged", "plain", "0", "1", "5.00", "90", "-", "python t.py"],
        ["late", "-", "0", "skipped", "0", "0", "-", "python t.py"],
    ]
    outputs = {"plain": _losses(plain), "traced": _losses(plain[:2]), "nudged": _losses(nudged)}
    text = _write_run(tmp_path, rows, outputs).read_text()

    traced = text.split("== traced")[1].split("== nudged")[0]
    assert "exit 1 ok" in traced
    assert "losses: 2 of 2 values equal bit for bit" in traced
    assert "AMP201 error t.py:9: clipped while scaled" in traced
    assert "lint: AMP301 line 4" in traced
    nudged_block = text.split("== nudged")[1]
    assert "exit 1 UNEXPECTED (expected 0)" in nudged_block
    assert "losses: DIFFER at value 3 of 3 compared (step 2 loss" in nudged_block
    assert "== late: SKIPPED" in text


def test_a_run_that_printed_no_losses_is_not_called_equal(tmp_path):
    rows = [
        ["plain", "-", "0", "0", "1.0", "60", "-", "python t.py"],
        ["traced", "plain", "0", "124", "60.0", "60", str(tmp_path / "missing.json"), "python -m ampdoctor trace t.py"],
    ]
    text = _write_run(tmp_path, rows, {"plain": _losses([1.5]), "traced": "Traceback ...\n"}).read_text()
    assert "losses: not compared (0 printed here, 1 in the plain run)" in text
    assert "TIMED OUT" in text
    assert "report: none" in text


SCRIPTS = [
    ("nanogpt_train.py", ()),
    ("buggy_fp16.py", ("--bug", "clip")),
    ("buggy_fp16.py", ("--bug", "none")),
    pytest.param("hf_gpt2_trainer.py", (), marks=pytest.mark.frameworks),
    pytest.param("lightning_fp16.py", (), marks=pytest.mark.frameworks),
    pytest.param("accelerate_fp16.py", (), marks=pytest.mark.frameworks),
]


@pytest.mark.slow
@pytest.mark.parametrize("script,extra", SCRIPTS)
def test_script_runs_on_the_cpu_and_prints_hex_losses(script, extra, tmp_path):
    module = {
        "hf_gpt2_trainer.py": "transformers",
        "lightning_fp16.py": "lightning",
        "accelerate_fp16.py": "accelerate",
    }
    if script in module:
        pytest.importorskip(module[script])
    command = [sys.executable, str(BENCH / script), "--device", "cpu", "--size", "tiny", "--max-steps", "2", *extra]
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    (tmp_path / "run.out").write_text(result.stdout)
    values = _summarize().hex_values(tmp_path / "run.out")
    assert len(values) >= 2
    for label, hexed in values:
        if " loss" in label:
            assert 0.0 < float.fromhex(hexed) < 20.0


@pytest.mark.slow
def test_the_huge_mask_fill_crashes_under_float16():
    command = [sys.executable, str(BENCH / "buggy_fp16.py"), "--device", "cpu", "--size", "tiny", "--bug", "mask"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert result.returncode == 1
    assert "without overflow" in result.stderr


@pytest.mark.slow
def test_only_runs_just_the_steps_it_names(tmp_path):
    env = {
        "PATH": "/usr/bin:/bin",
        "OUT": str(tmp_path / "out"),
        "DEVICE": "cpu",
        "SIZE": "tiny",
        "PYTHON": sys.executable,
        "ONLY": "buggy_clip_plain",
        "BUDGET": "200",
    }
    run = subprocess.run(
        ["bash", str(BENCH / "run.sh")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=280
    )
    assert run.returncode == 0, run.stderr
    assert "buggy_clip_plain (limit" in run.stdout
    assert "nanogpt_plain: not selected" in run.stdout and "hf_trace: not selected" in run.stdout
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "== buggy_clip_plain: exit 0 ok" in summary
    assert "== nanogpt_plain" not in summary and "== hf_trace" not in summary
