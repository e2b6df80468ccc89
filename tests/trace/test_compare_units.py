"""--compare float32, piece by piece: hardware detection, GEMM alignment, the verdict, the
switch-off, the census shapes and the profile's attribution (all in this process)."""

from __future__ import annotations

import contextlib
import io

import pytest
import torch
from torch import nn

from ampdoctor.trace.compare.compare_text import headline, summary_lines
from ampdoctor.trace.compare.comparison import CAST_BY_HAND, COMPARED, FAILED, NOTHING, RunRecord, compare_runs
from ampdoctor.trace.compare.hardware import cpu_flags, cpu_hardware, cuda_hardware
from ampdoctor.trace.compare.precision_off import PrecisionOff
from ampdoctor.trace.compare.profile import ProfileShares, gemm_time_by_module, shares_of
from ampdoctor.trace.rules.compare_rules import gemm_dimensions, misaligned, padded
from ampdoctor.trace.session import TraceSession

# -- hardware ------------------------------------------------------------------------------------


def test_cpu_flags_are_read_from_cpuinfo_text():
    text = "processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu avx2 avx512_bf16 amx_tile\n"
    assert cpu_flags(text) == {"fpu", "avx2", "avx512_bf16", "amx_tile"}
    assert cpu_flags("Features\t: fp asimd bf16\n") == {"fp", "asimd", "bf16"}


@pytest.mark.parametrize(
    "dtype,capability,flags,isa,fast",
    [
        ("bfloat16", "AVX2", {"avx2", "fma"}, "ALL", False),  # the AVX2-only machine
        ("bfloat16", "AVX512", {"avx512f", "avx512_bf16"}, "ALL", True),
        ("bfloat16", "AVX512", {"amx_bf16", "amx_tile"}, "ALL", True),
        ("bfloat16", "AVX2", {"amx_bf16", "avx512_bf16"}, "ALL", False),  # torch limited to AVX2
        ("bfloat16", "AVX512", {"amx_bf16", "avx512_bf16"}, "AVX2", False),  # oneDNN limited
        ("float16", "AVX512", {"avx512_bf16", "amx_bf16"}, "ALL", False),  # bf16 only
        ("float16", "AVX512", {"avx512_fp16"}, "ALL", True),
        ("float16", "AVX512", {"amx_fp16"}, "AVX512_CORE_AMX_FP16", True),
    ],
)
def test_cpu_low_precision_support(dtype, capability, flags, isa, fast):
    hw = cpu_hardware(dtype, capability=capability, flags=flags, machine="x86_64", name="cpu", isa_limit=isa)
    assert hw.fast is fast, hw.reason
    assert hw.capability == capability


def test_arm_cpu_flags():
    assert cpu_hardware("bfloat16", capability="DEFAULT", flags={"bf16"}, machine="aarch64", name="arm").fast
    assert not cpu_hardware("bfloat16", capability="DEFAULT", flags={"asimd"}, machine="aarch64", name="arm").fast


def test_reasons_say_what_is_missing():
    slow = cpu_hardware("bfloat16", capability="AVX2", flags={"avx2"}, machine="x86_64", name="cpu", isa_limit="ALL")
    assert "AVX512-BF16 or AMX-BF16" in slow.reason and "AVX2" in slow.reason


@pytest.mark.parametrize(
    "dtype,capability,fast",
    [("float16", (6, 1), False), ("float16", (7, 0), True), ("bfloat16", (7, 5), False), ("bfloat16", (8, 0), True)],
)
def test_cuda_compute_capability(dtype, capability, fast):
    hw = cuda_hardware(dtype, capability=capability, name="GPU")
    assert hw.fast is fast
    assert hw.capability == f"{capability[0]}.{capability[1]}"


# -- GEMM alignment ------------------------------------------------------------------------------


def test_gemm_dimensions_of_each_op():
    assert gemm_dimensions("addmm", ((1000,), (64, 100), (100, 1000))) == {"M": 64, "N": 1000, "K": 100}
    assert gemm_dimensions("mm", ((64, 100), (100, 1000))) == {"M": 64, "N": 1000, "K": 100}
    assert gemm_dimensions("bmm", ((4, 30, 64), (4, 64, 30))) == {"M": 30, "N": 30, "K": 64}
    assert gemm_dimensions("convolution", ((8, 3, 32, 32), (60, 3, 3, 3), (60,))) == {
        "out_channels": 60,
        "in_channels": 3,
    }
    assert gemm_dimensions("_scaled_dot_product_flash_attention_for_cpu", ((1, 2, 3, 4),)) is None


def test_small_and_aligned_dimensions_are_not_reported():
    assert misaligned({"M": 64, "N": 1000, "K": 100}) == {"K": 100}
    assert misaligned({"out_channels": 60, "in_channels": 3}) == {"out_channels": 60}  # 3 channels: too small
    assert misaligned({"M": 4, "N": 10, "K": 104}) == {}


def test_padding_suggestions():
    assert padded(100) == "104"
    assert padded(50257) == "50264 (a multiple of 8) or 50304 (of 64)"


# -- the verdict ---------------------------------------------------------------------------------


def _run(role, seconds, peak=None, start=None, losses=(2.0,), **extra):
    return RunRecord(
        role=role,
        seconds=list(seconds),
        timed_steps=list(range(7, 7 + len(seconds))),
        left_out={"window": 2, "warmup": 2, "profiled": 2},
        peak_bytes=peak,
        start_bytes=start,
        memory_method="m",
        losses=list(losses),
        **extra,
    )


MIXED_SETTING = {"autocast": [["cuda", "float16"]], "scalers": 1}


def test_separate_spreads_give_a_ratio():
    mixed = _run("mixed", [0.077, 0.078, 0.076, 0.079, 0.0775], peak=int(4.8e9), **MIXED_SETTING)
    float32 = _run("float32", [0.112, 0.110, 0.113, 0.111, 0.1115], peak=int(8.2e9))
    result = compare_runs(mixed, float32, 1.1, 0.10)
    assert result.status == COMPARED and result.measurable
    assert result.speedup == pytest.approx(0.1115 / 0.0775)
    assert result.memory_change == pytest.approx(4.8 / 8.2 - 1)
    assert result.paying_off is True
    assert headline(result).endswith("1.44x faster")
    lines = summary_lines(result)
    assert len(lines) + 1 <= 6
    assert lines[0].startswith("time    112 → 77.5 ms/iteration")
    assert "−41%" in lines[1]


def test_overlapping_spreads_are_no_measurable_difference():
    mixed = _run("mixed", [0.100, 0.130, 0.090, 0.120, 0.110], **MIXED_SETTING)
    float32 = _run("float32", [0.110, 0.125, 0.095, 0.105, 0.115])
    result = compare_runs(mixed, float32, 1.1, 0.10)
    assert not result.measurable
    assert result.paying_off is False
    assert headline(result).endswith("no measurable difference in speed")


def test_a_few_timed_iterations_claim_no_ratio():
    mixed = _run("mixed", [0.010, 0.011], **MIXED_SETTING)
    float32 = _run("float32", [0.100, 0.101])
    result = compare_runs(mixed, float32, 1.1, 0.10)
    assert not result.measurable and result.paying_off is False
    assert headline(result).endswith("speed not measurable: 2 timed iteration(s), 5 needed (raise --steps)")


def test_cpu_memory_is_compared_above_the_start():
    mixed = _run("mixed", [0.1] * 4, peak=600_000_000, start=500_000_000, **MIXED_SETTING)
    float32 = _run("float32", [0.2] * 4, peak=700_000_000, start=500_000_000)
    result = compare_runs(mixed, float32, 1.1, 0.10)
    assert result.memory_change == pytest.approx(100 / 200 - 1)


def test_states_without_a_comparison():
    plain = _run("mixed", [0.1])
    assert compare_runs(plain, _run("float32", [0.1]), 1.1, 0.1).status == NOTHING
    half = _run("mixed", [0.1], low_precision_parameters=["fc.weight"])
    result = compare_runs(half, _run("float32", [0.1]), 1.1, 0.1)
    assert result.status == CAST_BY_HAND and "fc.weight" in result.explanation
    assert headline(result).count("\n") == 0 and summary_lines(result) == []
    failed = compare_runs(_run("mixed", [0.1], **MIXED_SETTING), None, 1.1, 0.1, failure="it was killed by SIGKILL")
    assert failed.status == FAILED and "SIGKILL" in failed.explanation


def test_loss_at_the_last_common_step():
    mixed = _run("mixed", [0.1], losses=[3.0, 2.5, 2.0], **MIXED_SETTING)
    float32 = _run("float32", [0.1], losses=[3.0, 2.4])
    assert compare_runs(mixed, float32, 1.1, 0.1).common_loss() == (2, 2.5, 2.4)


def test_run_record_round_trips_through_json():
    record = _run(
        "float32", [0.1, 0.2], peak=5, losses=[float("nan"), 1.0], matmul_dtypes={"float32": 4}, other_cores=1.5
    )
    back = RunRecord.from_dict(record.to_dict())
    assert back.seconds == record.seconds and back.matmul_dtypes == {"float32": 4}
    assert back.losses[1] == 1.0 and back.other_cores == 1.5 and back.own_cores is None


SEPARATE = ([0.077, 0.078, 0.076, 0.079, 0.0775], [0.112, 0.110, 0.113, 0.111, 0.1115])


def test_a_change_of_the_machines_load_between_the_runs_gives_no_verdict(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)  # on a large machine a tenth of its cores counts
    mixed = _run("mixed", SEPARATE[0], other_cores=1.9, **MIXED_SETTING)
    float32 = _run("float32", SEPARATE[1], other_cores=0.1)
    result = compare_runs(mixed, float32, 1.1, 0.10)
    assert result.status == COMPARED and result.load_changed
    assert result.speedup is None and not result.measurable and result.paying_off is None
    assert "load changed" in headline(result) and "1.9" in headline(result) and "x faster" not in headline(result)
    assert result.to_dict()["load_changed"] is True
    assert summary_lines(result)[0].startswith("time    112 → 77.5 ms/iteration")  # the times, not a ratio
    steady = compare_runs(mixed, float32, 1.1, 0.10, load_change=5.0)  # the threshold raised
    assert not steady.load_changed and steady.speedup == pytest.approx(0.1115 / 0.0775)
    monkeypatch.setattr("os.cpu_count", lambda: 64)
    assert not compare_runs(mixed, float32, 1.1, 0.10).load_changed  # 1.8 cores of 64: noise


@pytest.mark.parametrize("loads", [(0.2, 0.4), (1.8, 1.6), (None, 1.9)], ids=["quiet", "steady", "unmeasured"])
def test_a_steady_or_unmeasured_load_keeps_the_verdict(loads):
    mixed = _run("mixed", SEPARATE[0], other_cores=loads[0], **MIXED_SETTING)
    float32 = _run("float32", SEPARATE[1], other_cores=loads[1])
    result = compare_runs(mixed, float32, 1.1, 0.10)
    assert not result.load_changed and result.measurable and result.speedup == pytest.approx(0.1115 / 0.0775)


CPU_SETTING = {"autocast": [["cpu", "bfloat16"]], "scalers": 0}


def test_a_saturated_machine_that_starves_the_cpu_threads_gives_no_verdict(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    # Two busy processes beside a 2-thread CPU run: the machine is full and the run got 1 core.
    mixed = _run("mixed", SEPARATE[0], own_cores=1.04, other_cores=0.95, threads=2, **CPU_SETTING)
    float32 = _run("float32", SEPARATE[1], own_cores=0.99, other_cores=0.97, threads=2)
    result = compare_runs(mixed, float32, 1.1, 0.10)
    assert result.status == COMPARED and result.machine_busy and not result.load_changed
    assert result.speedup is None and not result.measurable and result.paying_off is None
    assert "machine was busy" in headline(result) and "x faster" not in headline(result)
    assert "of its 2 cores busy during the mixed-precision run" in result.explanation
    assert "2 threads got 1.0" in result.explanation
    assert result.to_dict()["machine_busy"] is True
    off = compare_runs(mixed, float32, 1.1, 0.10, busy=0.0)  # the threshold switched off
    assert not off.machine_busy and off.speedup == pytest.approx(0.1115 / 0.0775)


@pytest.mark.parametrize(
    "mixed_load, setting",
    [
        ((1.9, 0.05), CPU_SETTING),  # a quiet machine: the threads got their cores
        ((0.9, 0.3), CPU_SETTING),  # a script that keeps one core busy on a machine with room left
        ((1.0, 1.0), MIXED_SETTING),  # CUDA: the host thread keeps about one core busy anyway
    ],
    ids=["quiet", "room-left", "cuda"],
)
def test_the_busy_check_holds_back_only_for_starved_cpu_runs(monkeypatch, mixed_load, setting):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    own, other = mixed_load
    mixed = _run("mixed", SEPARATE[0], own_cores=own, other_cores=other, threads=2, **setting)
    float32 = _run("float32", SEPARATE[1], own_cores=own, other_cores=other, threads=2)
    result = compare_runs(mixed, float32, 1.1, 0.10)
    assert not result.machine_busy and result.speedup == pytest.approx(0.1115 / 0.0775)


def test_the_run_record_keeps_the_thread_count():
    record = _run("float32", [0.1, 0.2], own_cores=1.5, other_cores=0.2, threads=2)
    assert RunRecord.from_dict(record.to_dict()).threads == 2


def test_the_clock_measures_the_load_around_the_timed_iterations(monkeypatch):
    from types import SimpleNamespace

    from ampdoctor.trace.compare import stopwatch

    # (wall, own CPU, machine busy) at each boundary: over the timed span of 4 s the process used
    # 4 CPU seconds (1 core) and the machine 12 (3 cores): the others kept 2 cores busy.
    samples = iter([(10.0, 100.0, 500.0), (12.0, 102.0, 506.0), (14.0, 104.0, 512.0)])
    monkeypatch.setattr(stopwatch, "_load_sample", lambda: next(samples))
    monkeypatch.setattr(stopwatch, "_synchronize", lambda: None)
    monkeypatch.setattr(stopwatch.os, "cpu_count", lambda: 4)
    clock = stopwatch.RunClock(window=1, warmup=1, profiled=0)
    for step in range(1, 5):  # 1 window, 2 warm-up, 3 and 4 timed
        clock(SimpleNamespace(step=step), None)
    load = clock.load()
    assert load.own_cores == pytest.approx(1.0) and load.other_cores == pytest.approx(2.0)


def _clock_over(first, last):
    from ampdoctor.trace.compare import stopwatch

    clock = stopwatch.RunClock(window=0, warmup=0, profiled=0)
    clock._load_first, clock._load_last = first, last
    return clock.load()


def test_a_timed_span_of_a_few_ticks_leaves_the_others_load_unknown():
    from ampdoctor.trace.compare.stopwatch import LOAD_SECONDS

    # 10 ms in which the machine counted 2 ticks more than the process used: 2 cores' worth of
    # "others" that a tick's lag alone explains.
    short = _clock_over((10.0, 1.0, 100.0), (10.01, 1.01, 100.03))
    assert short.other_cores is None and short.own_cores == pytest.approx(1.0)
    span = LOAD_SECONDS * 2
    long = _clock_over((10.0, 1.0, 100.0), (10.0 + span, 1.0 + span, 100.0 + 2 * span))
    assert long.other_cores == pytest.approx(1.0)


def test_the_others_never_get_more_cores_than_the_process_left(monkeypatch):
    from ampdoctor.trace.compare import stopwatch

    monkeypatch.setattr(stopwatch.os, "cpu_count", lambda: 2)
    # The process kept 1.8 cores busy; the counters say 2.5: the others had at most 0.2.
    load = _clock_over((10.0, 1.0, 100.0), (11.0, 2.8, 102.5))
    assert load.own_cores == pytest.approx(1.8) and load.other_cores == pytest.approx(0.2)
    # Busier than the machine could be from this process alone: none for the others.
    load = _clock_over((10.0, 1.0, 100.0), (11.0, 3.0, 102.5))
    assert load.other_cores == 0.0


def test_without_proc_stat_the_others_load_is_unknown(monkeypatch):
    from ampdoctor.trace.compare import stopwatch

    monkeypatch.setattr(stopwatch, "_machine_busy", lambda: None)
    clock = stopwatch.RunClock(window=0, warmup=0, profiled=0)
    first, last = stopwatch._load_sample(), stopwatch._load_sample()
    clock._load_first, clock._load_last = first, (first[0] + 1.0, first[1] + 0.5, None)
    assert clock.load().other_cores is None and clock.load().own_cores == pytest.approx(0.5)
    assert last[2] is None


# -- the switch-off ------------------------------------------------------------------------------


def test_precision_off_disables_autocast_and_scalers_inside_a_session():
    model = nn.Linear(8, 8)
    with contextlib.redirect_stdout(io.StringIO()), TraceSession() as session:
        with PrecisionOff() as switch:
            scaler = torch.amp.GradScaler("cpu")
            with pytest.warns(FutureWarning):
                legacy = torch.cpu.amp.GradScaler()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(torch.randn(4, 8))
                assert not torch.is_autocast_enabled("cpu")

            @torch.autocast("cpu", dtype=torch.bfloat16)
            def decorated(x):
                return model(x)

            assert decorated(torch.randn(2, 8)).dtype == torch.float32
            loss = out.sum()
            assert scaler.scale(loss) is loss  # disabled: the loss unchanged
            assert not scaler.is_enabled()
            assert not legacy.is_enabled()
    assert out.dtype == torch.float32
    assert switch.autocast_regions_disabled == 2
    assert switch.scalers_disabled >= 1
    assert session.observations.autocast_dtypes == set()
    # Removed: autocast and GradScaler work again.
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model(torch.randn(4, 8)).dtype == torch.bfloat16
    assert torch.amp.GradScaler("cpu").is_enabled()


def test_bfloat16_on_runs_forwards_without_autocast_in_bfloat16_and_leaves_the_scripts_own():
    from ampdoctor.trace.compare.bfloat16_on import Bfloat16On

    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    with contextlib.redirect_stdout(io.StringIO()), TraceSession():
        with Bfloat16On() as switch:
            out = model(torch.randn(4, 8))
            assert out.dtype == torch.bfloat16  # the outermost forward ran in bfloat16
            assert not torch.is_autocast_enabled("cpu")  # and the region closed with it
            with torch.autocast("cpu", dtype=torch.float16):  # the script's own region stays
                assert model(torch.randn(4, 8)).dtype == torch.float16
            with torch.no_grad():  # an evaluation pass is not the training step
                assert model(torch.randn(4, 8)).dtype == torch.float32
    assert switch.regions_added == 1  # one per outermost forward, not one per layer
    assert switch.to_dict() == {"float8_conversions_skipped": 0, "bfloat16_regions_added": 1}
    assert model(torch.randn(4, 8)).dtype == torch.float32  # removed: forwards run as written


def test_after_the_first_iteration_only_the_outermost_modules_are_hooked():
    from ampdoctor.trace.compare.bfloat16_on import Bfloat16On

    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    probe = nn.Linear(8, 8)
    with contextlib.redirect_stdout(io.StringIO()), TraceSession():
        with Bfloat16On() as switch:
            model(torch.randn(4, 8))  # the first iteration's forward: model is outermost
            switch.settle()
            assert len(switch._handles) == 2  # a pre- and a post-hook, on model alone
            assert model(torch.randn(4, 8)).dtype == torch.bfloat16
            assert model[0](torch.randn(4, 8)).dtype == torch.float32  # not a forward seen outermost
            assert probe(torch.randn(4, 8)).dtype == torch.float32
            assert not torch.is_autocast_enabled("cpu")
    assert model(torch.randn(4, 8)).dtype == torch.float32


def test_a_compiled_model_runs_in_the_added_region_around_its_compiled_call():
    from ampdoctor.trace.compare.bfloat16_on import Bfloat16On

    model = torch.compile(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8)), backend="eager")
    with contextlib.redirect_stdout(io.StringIO()), TraceSession():
        with Bfloat16On() as switch:
            assert model(torch.randn(4, 8)).dtype == torch.bfloat16
            switch.settle()
            assert model(torch.randn(4, 8)).dtype == torch.bfloat16
            assert not torch.is_autocast_enabled("cpu")
    assert switch.regions_added == 2


def test_a_forward_that_raises_closes_the_added_region():
    from ampdoctor.trace.compare.bfloat16_on import Bfloat16On

    class Broken(nn.Module):
        def forward(self, x):
            raise ValueError("bad batch")

    with contextlib.redirect_stdout(io.StringIO()), TraceSession():
        with Bfloat16On():
            with pytest.raises(ValueError):
                Broken()(torch.randn(2, 2))
            assert not torch.is_autocast_enabled("cpu")
            assert nn.Linear(2, 2)(torch.randn(2, 2)).dtype == torch.bfloat16  # the next one still is


def test_against_bfloat16_compares_float8_and_names_both_runs():
    from ampdoctor.trace.compare.comparison import BFLOAT16, failed_status

    float8 = _run("mixed", SEPARATE[1], float8_layers=3, losses=[2.0, 1.5])
    bf16 = _run("bfloat16", SEPARATE[0], autocast=[["cpu", "bfloat16"]], losses=[2.0, 1.4])
    result = compare_runs(float8, bf16, 1.1, 0.1, against=BFLOAT16)
    assert result.status == COMPARED and result.speedup == pytest.approx(0.0775 / 0.1115)
    assert headline(result) == "float8 vs bfloat16 (3 torchao float8 layers): 1.44x slower"
    lines = summary_lines(result)
    assert "(bfloat16 → float8," in lines[0]
    assert any(line.startswith("loss    after 2 iterations 1.5 (float8) vs 1.4 (bfloat16)") for line in lines)
    assert any(line.startswith("why     the CPU has no float8 GEMMs") for line in lines)
    document = result.to_dict()
    assert document["against"] == "bfloat16" and set(document["runs"]) == {"mixed", "bfloat16"}
    assert document["loss_at"] == {"step": 2, "mixed": 1.5, "bfloat16": 1.4}
    # A script without float8 layers has nothing to compare with bfloat16 (mixed precision alone
    # is what --compare float32 measures); a baseline that died is named as the bfloat16 run.
    amp = _run("mixed", SEPARATE[1], **MIXED_SETTING)
    nothing = compare_runs(amp, bf16, 1.1, 0.1, against=BFLOAT16)
    assert nothing.status == NOTHING and "--compare float32" in nothing.explanation
    # float8 that is faster pays off, whatever its memory (it is adopted for speed).
    faster = compare_runs(
        _run("mixed", SEPARATE[0], peak=110, float8_layers=3),
        _run("bfloat16", SEPARATE[1], peak=100),
        1.1,
        0.1,
        against=BFLOAT16,
    )
    assert faster.paying_off is True and faster.memory_change == pytest.approx(0.1)
    failed = compare_runs(float8, None, 1.1, 0.1, failure="it was killed by SIGKILL", against=BFLOAT16)
    assert failed.status == failed_status(BFLOAT16) == "bfloat16 run failed"
    assert failed.explanation.startswith("the bfloat16 run failed: it was killed by SIGKILL")


# -- census shapes and the profile ---------------------------------------------------------------


def test_census_records_gemm_shapes_by_module():
    model = nn.Sequential(nn.Linear(100, 1000), nn.ReLU(), nn.Linear(1000, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with TraceSession(steps=None, record_ops_steps=1) as session:
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(torch.randn(64, 100)).float().sum()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    gemms = session.observations.gemms
    forward = {(k[0], k[1], k[3], k[4]) for k in gemms if k[2] == "forward"}
    assert ("0", "addmm", "bfloat16", ((1000,), (64, 100), (100, 1000))) in forward
    assert ("2", "addmm", "bfloat16", ((8,), (64, 1000), (1000, 8))) in forward
    assert any(k[0] == "0" and k[2] == "backward" and k[1] == "mm" for k in gemms)


def test_profiled_time_is_attributed_to_census_modules():
    a, b = torch.randn(64, 100), torch.randn(100, 1000)
    with torch.profiler.profile(record_shapes=True) as prof:
        for _ in range(3):
            torch.nn.functional.linear(a, b.t())
            a.to(torch.bfloat16)
    shares = shares_of(prof.events(), wall_seconds=1.0)
    assert shares.gemm_seconds > 0 and shares.cast_seconds > 0
    (key,) = shares.gemm
    assert key == ("mm", ((64, 100), (100, 1000))) or key[0] in ("addmm", "mm")
    census = {("fc", key[0], "forward", "float32", key[1]): 3, ("other", key[0], "forward", "float32", key[1]): 1}
    by_module = gemm_time_by_module(shares, census)
    assert by_module["fc"] == pytest.approx(3 * by_module["other"])


def test_unmatched_profile_time_is_kept_apart():
    shares = ProfileShares(wall_seconds=1.0, gemm={("mm", ((2, 3), (3, 4))): 0.5})
    assert gemm_time_by_module(shares, {}) == {None: 0.5}


def test_ampdoctor_own_ops_are_left_out_of_the_profile():
    from ampdoctor.trace.ops import mark_own_ops, quiet

    a, b = torch.randn(64, 100), torch.randn(100, 1000)
    with torch.profiler.profile(record_shapes=True) as prof:
        mark_own_ops(True)
        try:
            torch.mm(a, b)
            with quiet():  # what the session's hooks run: not the script's time
                torch.mm(b.t(), a.t())
                torch.bitwise_right_shift(torch.ones(8, dtype=torch.int32), 2)
        finally:
            mark_own_ops(False)
    shares = shares_of(prof.events(), wall_seconds=10.0)
    assert list(shares.gemm) == [("mm", ((64, 100), (100, 1000)))]
    assert "bitwise_right_shift" not in shares.self_seconds
    assert 0 < shares.instrumentation_seconds < 10.0
    assert shares.script_seconds == pytest.approx(10.0 - shares.instrumentation_seconds)


def test_amp507_gains_its_share_of_gemm_time():
    from collections import Counter

    from ampdoctor.findings import Finding, Location, Severity
    from ampdoctor.trace.observations import Observations
    from ampdoctor.trace.rules.compare_rules import with_gemm_share

    shapes = ((10,), (64, 64), (64, 10))
    obs = Observations()
    obs.gemms = Counter(
        {
            ("head", "addmm", "forward", "float32", shapes): 2,
            ("body", "addmm", "forward", "bfloat16", ((64,), (64, 16), (16, 64))): 2,
        }
    )
    profile = ProfileShares(
        wall_seconds=1.0, gemm={("addmm", shapes): 0.25, ("addmm", ((64,), (64, 16), (16, 64))): 0.75}
    )
    finding = Finding(
        code="AMP507",
        severity=Severity.INFO,
        message="`head` ran float32 matmuls.",
        location=Location("train.py", 3),
        extra={"module": "head"},
    )
    (result,) = with_gemm_share([finding], obs, profile)
    assert result.extra["gemm_time_share"] == pytest.approx(0.25)
    assert result.message.endswith("25% of the run's GEMM time.")
    assert with_gemm_share([finding], obs, None) == [finding]
