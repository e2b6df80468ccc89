"""``ampdoctor trace --compare float32`` end to end: two child runs of real scripts.

The tests check what the comparison finds and reports, never how fast anything ran (speed is
measured in benchmarks/compare_bench.py). Where a finding only appears when mixed precision does
not pay off, ``--threshold compare_speedup=1000`` makes every run "not paying off", so the
explanation is tested whatever this machine's speed-up is.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ampdoctor.catalog import all_rules

ROOT = Path(__file__).resolve().parents[2]
COMPARE = ROOT / "fixtures" / "trace" / "compare"
FRAMEWORKS = ROOT / "fixtures" / "trace" / "frameworks"
EXPLAIN = ("--threshold", "compare_speedup=1000")
# What these tests check does not hang on the speed verdict's load check: the machine running
# them may change its load between the two runs (the check has a test of its own, at the end).
STEADY = ("--threshold", "compare_load_change=1000", "--threshold", "compare_busy=0")
# An AMX/AVX512 machine made to behave as an AVX2-only one (torch's kernels and oneDNN's).
AVX2_ONLY = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
# Alignment advice (AMP512) is given only where GEMMs run on tiled units: judged as if they did.
TENSOR_CORES = {"AMPDOCTOR_ASSUME_HARDWARE": "tensor-cores"}

pytestmark = pytest.mark.slow


def compare(
    tmp_path: Path,
    script: Path,
    *args: str,
    env: dict | None = None,
    timeout: float = 300,
    against: str = "float32",
):
    report_path = tmp_path / "report.json"
    command = [
        sys.executable,
        "-m",
        "ampdoctor",
        "trace",
        str(script),
        "--compare",
        against,
        "--no-lint",
        "--no-progress",
        "--json",
        str(report_path),
        *STEADY,
        *args,
    ]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env={**os.environ, **(env or {})}
    )
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    return result, report


def _marker_line(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.fixture(scope="module")
def unaligned(tmp_path_factory):
    folder = tmp_path_factory.mktemp("unaligned")
    result, report = compare(
        folder,
        COMPARE / "unaligned_linear.py",
        "--steps",
        "7",
        "--record-ops-steps",
        "1",
        "--html",
        "page.html",
        *EXPLAIN,
        env=TENSOR_CORES,
    )
    return result, report, folder / "page.html"


def test_unaligned_linear_gets_amp512_at_its_line(unaligned):
    result, report, _ = unaligned
    assert report is not None, result.stderr
    (finding,) = [f for f in report["findings"] if f["code"] == "AMP512"]
    assert finding["line"] == _marker_line(COMPARE / "unaligned_linear.py", "the GEMM AMP512 names")
    assert finding["module"] == "proj"
    assert "K=100" in finding["message"] and "100 to 104" in finding["help"]
    shapes = finding["extra"]["shapes"][0]
    assert shapes["op"] == "addmm" and shapes["misaligned"] == {"K": 100}
    assert report["compare"]["causes"][0]["code"] in {"AMP512", "AMP513"}


def test_without_tensor_cores_or_amx_the_hardware_comes_first_and_no_padding_is_advised(tmp_path):
    script = COMPARE / "unaligned_linear.py"
    result, report = compare(tmp_path, script, "--steps", "7", "--record-ops-steps", "1", *EXPLAIN, env=AVX2_ONLY)
    assert report is not None, result.stderr
    codes = [f["code"] for f in report["findings"]]
    assert "AMP512" not in codes and codes.count("AMP514") == 1
    assert report["compare"]["causes"][0]["code"] == "AMP514"
    (finding,) = [f for f in report["findings"] if f["code"] == "AMP514"]
    assert finding["line"] == _marker_line(script, 'torch.autocast("cpu"')  # the autocast, not the matmul
    assert finding["severity"] == "warning" and "slower than" in finding["message"]


def test_both_runs_are_reported(unaligned):
    result, report, _ = unaligned
    data = report["compare"]
    assert data["status"] == "compared" and data["against"] == "float32"
    mixed, float32 = data["runs"]["mixed"], data["runs"]["float32"]
    # The float32 run really ran float32 matmuls; the run as written bfloat16 ones.
    assert set(float32["matmul_dtypes"]) == {"float32"}
    assert set(mixed["matmul_dtypes"]) == {"bfloat16"}
    assert float32["switched_off"]["autocast_regions_disabled"] >= 7
    assert mixed["autocast"] == [["cpu", "bfloat16"]] and float32["autocast"] == []
    for run in (mixed, float32):
        assert run["steps"] == 7
        assert run["left_out"] == {"window": 1, "warmup": 2, "profiled": 2}
        assert len(run["iteration_seconds"]) == 2 and run["timed_steps"] == [6, 7]
        assert run["median_seconds"] > 0 and run["peak_memory_bytes"] > 0
        assert "ru_maxrss" in run["memory_method"]
    assert data["loss_at"]["step"] == 7
    assert data["profile"]["gemm_seconds"] > 0
    assert data["hardware"][0]["device"] == "cpu"
    # The terminal block: headline and at most five lines under it, above the findings.
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Mixed precision vs float32"))
    block = [line for line in lines[start + 1 : start + 7] if line.startswith("  ")]
    assert 1 <= len(block) <= 5
    assert lines.index(next(line for line in lines if line.startswith("Findings"))) > start


def test_the_mixed_run_losses_are_those_of_a_plain_python_run(unaligned, tmp_path):
    _, report, _ = unaligned
    plain = subprocess.run(
        [sys.executable, str(COMPARE / "unaligned_linear.py")], capture_output=True, text=True, cwd=COMPARE, timeout=300
    )
    losses = [float(line.split()[1]) for line in plain.stdout.splitlines() if line.startswith("loss ")]
    traced = report["compare"]["runs"]["mixed"]["loss"]
    assert len(traced) == 7
    # Bit for bit from the first iteration (JSON keeps every digit of a float), also without a
    # GradScaler, where an iteration is closed by the optimizer step that ends it.
    assert traced == losses[:7]


def test_the_html_page_has_the_comparison_and_its_charts(unaligned):
    _, _report, page = unaligned
    text = page.read_text(encoding="utf-8")
    section = text.split('<section id="compare">')[1].split("</section>")[0]
    assert "Mixed precision vs float32" in section and "ms/iteration" in section
    assert section.count("<svg") == 1 and "Time per iteration" in section and "Memory" in section


CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed")
def test_chromium_renders_the_comparison(unaligned, tmp_path):
    _, _, page = unaligned
    profile = tmp_path / "profile"
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        "--dump-dom",
        page.as_uri(),
    ]
    dom = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    section = dom.stdout.split('<section id="compare">')[1].split("</section>")[0]
    assert '<div class="chart"><svg' in section
    assert [line for line in dom.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line] == []


def test_padded_linear_gets_no_amp512(tmp_path):
    result, report = compare(
        tmp_path, COMPARE / "aligned_linear.py", "--steps", "7", "--record-ops-steps", "1", *EXPLAIN
    )
    assert report is not None, result.stderr
    assert report["compare"]["status"] == "compared"
    assert "AMP512" not in {f["code"] for f in report["findings"]}


def test_a_model_cast_by_hand_gets_one_line(tmp_path):
    result, report = compare(tmp_path, COMPARE / "half_model.py", "--steps", "6")
    assert report["compare"]["status"] == "cast by hand"
    line = next(line for line in result.stdout.splitlines() if line.startswith("Mixed precision vs float32"))
    assert "no float32 run to make" in line
    assert not [f for f in report["findings"] if f["code"] in ("AMP512", "AMP513", "AMP514")]


def test_a_float32_script_has_nothing_to_compare(tmp_path):
    result, report = compare(tmp_path, COMPARE / "float32_only.py", "--steps", "6")
    assert report["compare"]["status"] == "nothing to compare"
    assert "nothing to compare" in result.stdout
    assert result.returncode == 0


def test_a_crash_in_the_float32_run_is_reported(tmp_path):
    result, report = compare(tmp_path, COMPARE / "crash_in_float32.py", "--steps", "6")
    assert report["completed"] is True  # the run as written is fine
    data = report["compare"]
    assert data["status"] == "float32 run failed"
    assert "RuntimeError" in data["explanation"] and "bfloat16 activations" in data["explanation"]
    assert "the float32 run failed" in result.stdout


def test_a_hard_crash_in_the_float32_run_is_reported(tmp_path):
    script = tmp_path / "dies.py"
    script.write_text(
        textwrap.dedent("""
        import os, signal
        import torch
        model = torch.nn.Linear(4, 4)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(5):
            with torch.autocast("cpu", dtype=torch.bfloat16) as region:
                loss = model(torch.randn(2, 4)).float().sum()
            if not torch.amp.autocast_mode.autocast.__init__.__name__ == "__init__" or not region._enabled:
                os.kill(os.getpid(), signal.SIGKILL)
            loss.backward()
            optimizer.step()
    """)
    )
    _result, report = compare(tmp_path, script, "--steps", "4")
    data = report["compare"]
    assert data["status"] == "float32 run failed"
    assert "SIGKILL" in data["explanation"]


def test_a_crash_in_the_mixed_run_is_reported(tmp_path):
    script = tmp_path / "raises.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        model = torch.nn.Linear(4, 4)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(5):
            with torch.autocast("cpu", dtype=torch.bfloat16) as region:
                loss = model(torch.randn(2, 4)).float().sum()
            if region._enabled and step == 2:
                raise ValueError("only with mixed precision")
            loss.backward()
            optimizer.step()
    """)
    )
    result, report = compare(tmp_path, script, "--steps", "4")
    assert result.returncode == 1
    assert report["stopped"] == "error" and "only with mixed precision" in report["error"]
    assert report["compare"]["runs"]["float32"]["steps"] == 4


def test_timeout_applies_to_each_run(tmp_path):
    script = tmp_path / "slow.py"
    script.write_text(
        textwrap.dedent("""
        import time
        import torch
        model = torch.nn.Linear(4, 4)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(1000):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(torch.randn(2, 4)).float().sum()
            loss.backward()
            optimizer.step()
            time.sleep(0.5)
    """)
    )
    result, report = compare(tmp_path, script, "--steps", "1000", "--timeout", "4", timeout=120)
    assert result.returncode == 124
    assert report["stopped"] == "timeout"
    assert report["compare"]["runs"]["float32"]["stopped"] == "timeout"


def test_compare_cannot_be_combined_with_torchrun(tmp_path):
    result, report = compare(tmp_path, COMPARE / "float32_only.py", "--nproc-per-node", "2")
    assert result.returncode == 2 and report is None
    assert "--compare and --nproc-per-node" in result.stderr


def test_timm_style_framework_loop(tmp_path):
    result, report = compare(
        tmp_path,
        FRAMEWORKS / "timm_style.py",
        "--steps",
        "7",
        "--record-ops-steps",
        "1",
        "--fail-on",
        "never",
        "--",
        "--max-steps",
        "12",
    )
    assert report is not None, result.stderr
    assert report["compare"]["status"] == "compared", report["compare"]
    assert report["compare"]["runs"]["float32"]["switched_off"]["scalers_disabled"] >= 1


# -- the rule pages' examples (AMP512-AMP514) ----------------------------------------------------

EXAMPLES = [
    pytest.param(rule, example, id=f"{rule.code}-{example.kind}")
    for rule in all_rules().values()
    for example in rule.examples
    if "compare" in example.options
]


@pytest.mark.parametrize("rule,example", EXAMPLES)
def test_compare_rule_page_example(rule, example, tmp_path):
    script = tmp_path / "example.py"
    script.write_text(example.source)
    env = AVX2_ONLY if "cpu-avx2" in example.options else TENSOR_CORES if "tensor-cores" in example.options else None
    extra = () if rule.code == "AMP514" else EXPLAIN  # AMP514: the emulated slow-down is real
    result, report = compare(
        tmp_path, script, "--steps", "7", "--record-ops-steps", "1", "--fail-on", "never", *extra, env=env
    )
    assert report is not None, result.stderr
    found = [f for f in report["findings"] if f["code"] == rule.code]
    if example.kind == "bad":
        assert found, (report["compare"], report["findings"])
        line = example.expected[0][0]
        assert found[0]["line"] == line
        assert found[0]["severity"] == rule.severity.label
    else:
        assert not found, found


def test_nanogpt_style_script(tmp_path):
    # Gradient accumulation with autocast entered per micro-step, a disabled GradScaler (bfloat16)
    # and a 65-symbol vocabulary: the output layer's GEMM has N=65. Its share of the profiled GEMM
    # time (9% on a quiet machine) moves with the machine's load (3% and less beside four busy
    # processes): the advice is asked for whatever the share, whose threshold
    # test_trace_hardware_rules.py tests on the GEMMs' arithmetic, the same on every machine.
    result, report = compare(
        tmp_path,
        COMPARE / "nanogpt_style.py",
        "--steps",
        "7",
        "--record-ops-steps",
        "1",
        "--fail-on",
        "never",
        "--threshold",
        "align_share=0",
        *EXPLAIN,
        env=TENSOR_CORES,
    )
    assert report is not None, result.stderr
    data = report["compare"]
    assert data["status"] == "compared"
    assert data["runs"]["mixed"]["autocast_regions"] == 4 * 7
    assert data["runs"]["float32"]["switched_off"]["autocast_regions_disabled"] == 4 * 7
    assert set(data["runs"]["float32"]["matmul_dtypes"]) == {"float32"}
    lm_head = [f for f in report["findings"] if f["code"] == "AMP512" and f["module"] == "lm_head"]
    assert lm_head and "N=65" in lm_head[0]["message"] and "65 to 72" in lm_head[0]["help"]
    assert data["profile"]["top_ops"]


# -- a machine whose load changes between the runs ------------------------------------------------


def test_load_that_ends_between_the_runs_gives_no_verdict(tmp_path):
    """Busy processes on every core while the float32 run is timed, none in the mixed-precision
    run: the ratio would say more about them than about mixed precision."""
    script = COMPARE / "steady_work.py"
    report_path = tmp_path / "report.json"
    # The machine's load is read from /proc/stat, in ticks of 10 ms: the timed iterations of each
    # run must last long enough for a core's worth of difference to show (a run of 19 iterations
    # of half a millisecond is reported with the others' load unknown, stopwatch.LOAD_SECONDS).
    command = [sys.executable, "-m", "ampdoctor", "trace", str(script), "--compare", "float32", "--steps", "100"]
    command += ["--no-lint", "--no-progress", "--json", str(report_path), "--record-ops-steps", "1"]
    spin = [sys.executable, "-c", "while True: pass"]
    busy = [subprocess.Popen(spin) for _ in range(os.cpu_count() or 1)]
    try:
        process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=tmp_path)
        for line in process.stderr:
            if "mixed-precision run" in line:
                break
    finally:
        for child in busy:
            child.kill()
            child.wait()
    process.communicate(timeout=300)
    data = json.loads(report_path.read_text())["compare"]
    if (data["runs"]["mixed"].get("other_cores") or 0) > 0.5:
        # Processes of someone else's kept the machine busy in the run meant to be quiet: the
        # case under test could not be set up (the report then says both runs were busy).
        pytest.skip(f"the machine was not quiet during the mixed-precision run: {data['explanation']}")
    assert data["status"] == "compared" and data["load_changed"] is True, data["explanation"]
    float32, mixed = data["runs"]["float32"], data["runs"]["mixed"]
    assert float32["other_cores"] - mixed["other_cores"] > 0.5
    assert data["speedup"] is None and "load changed" in data["explanation"]


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is not installed (the fp8 extra)")
def test_a_float8_run_is_compared_with_the_same_model_unconverted(tmp_path):
    script = ROOT / "fixtures" / "trace" / "float8_tabular_healthy.py"
    result, report = compare(tmp_path, script, "--steps", "7", "--record-ops-steps", "1")
    assert report is not None, result.stderr
    data = report["compare"]
    assert data["status"] == "compared", data.get("explanation")
    mixed, float32 = data["runs"]["mixed"], data["runs"]["float32"]
    # Two of the three layers train in float8 as written (the filter keeps the head out); none
    # in the float32 run, whose conversion returned the model unchanged.
    assert mixed["float8_layers"] == 2 and float32["float8_layers"] == 0
    assert float32["switched_off"]["float8_conversions_skipped"] == 1
    assert "float8_conversions_skipped" not in mixed["switched_off"]


FLOAT8_AUTOCAST = """\
import torch
from torch import nn
from torchao.float8 import convert_to_float8_training

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 16))
convert_to_float8_training(model, module_filter_fn=lambda m, fqn: fqn != "4")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(12):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(torch.randn(64, 64))
    loss = nn.functional.mse_loss(out.float(), torch.randn(64, 16))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is not installed (the fp8 extra)")
def test_a_float8_run_is_compared_with_bfloat16(tmp_path):
    script = ROOT / "fixtures" / "trace" / "float8_tabular_healthy.py"
    result, report = compare(tmp_path, script, "--steps", "12", "--record-ops-steps", "1", against="bfloat16")
    assert report is not None, result.stderr
    data = report["compare"]
    assert data["against"] == "bfloat16" and data["status"] == "compared", data.get("explanation")
    assert set(data["runs"]) == {"mixed", "bfloat16"}
    float8, bf16 = data["runs"]["mixed"], data["runs"]["bfloat16"]
    # The script trains its float32 master weights in float8 without autocast: the baseline has
    # the conversion skipped and each training forward run in a bfloat16 autocast region.
    assert float8["float8_layers"] == 2 and float8["autocast"] == []
    assert bf16["float8_layers"] == 0 and bf16["autocast"] == [["cpu", "bfloat16"]]
    assert bf16["switched_off"] == {"float8_conversions_skipped": 1, "bfloat16_regions_added": 12}
    assert set(bf16["matmul_dtypes"]) == {"bfloat16"}
    assert "bfloat16 run (float8 switched off, bfloat16 on)" in result.stderr
    assert "float8 run (as written)" in result.stderr
    assert "float8 vs bfloat16 (2 torchao float8 layers)" in result.stdout
    # AMP512-AMP514 explain mixed precision against float32: none of them here.
    assert not {"AMP512", "AMP513"} & {f["code"] for f in report["findings"]}


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is not installed (the fp8 extra)")
def test_a_float8_script_with_its_own_bfloat16_autocast_keeps_it_in_the_baseline(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(FLOAT8_AUTOCAST)
    result, report = compare(tmp_path, script, "--steps", "12", "--record-ops-steps", "1", against="bfloat16")
    assert report is not None, result.stderr
    bf16 = report["compare"]["runs"]["bfloat16"]
    assert report["compare"]["status"] == "compared", report["compare"].get("explanation")
    assert bf16["switched_off"] == {"float8_conversions_skipped": 1, "bfloat16_regions_added": 0}
    assert bf16["autocast"] == [["cpu", "bfloat16"]] and bf16["autocast_regions"] == 12


MXFP8_SCRIPT = """\
import torch
from torch import nn
from torchao.prototype.moe_training.config import MXFP8TrainingOpConfig, MXFP8TrainingRecipe
from torchao.quantization import quantize_

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(64, 256, bias=False), nn.GELU(), nn.Linear(256, 256, bias=False), nn.GELU(), nn.Linear(256, 16)
)
config = MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.MXFP8_EMULATED_RCEIL)
quantize_(model, config, filter_fn=lambda module, fqn: isinstance(module, nn.Linear) and fqn != "4")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(12):
    loss = nn.functional.mse_loss(model(torch.randn(64, 64)), torch.randn(64, 16))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is not installed (the fp8 extra)")
def test_an_mxfp8_run_is_compared_with_bfloat16_with_mx_training_switched_off(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(MXFP8_SCRIPT)
    result, report = compare(tmp_path, script, "--steps", "12", "--record-ops-steps", "1", against="bfloat16")
    assert report is not None, result.stderr
    data = report["compare"]
    assert data["status"] == "compared", data.get("explanation")
    mx, bf16 = data["runs"]["mixed"], data["runs"]["bfloat16"]
    # quantize_ with the MX training config is skipped in the baseline: plain layers, bfloat16.
    assert mx["float8_layers"] == 2 and bf16["float8_layers"] == 0
    assert bf16["switched_off"] == {"float8_conversions_skipped": 1, "bfloat16_regions_added": 12}


def test_compare_bfloat16_without_float8_has_nothing_to_compare(tmp_path):
    result, report = compare(tmp_path, COMPARE / "aligned_linear.py", "--steps", "7", against="bfloat16")
    assert report is not None, result.stderr
    data = report["compare"]
    assert data["status"] == "nothing to compare" and "--compare float32" in data["explanation"]
