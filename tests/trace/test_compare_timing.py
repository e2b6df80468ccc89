"""Which iterations ``--compare float32`` times, and what it concludes from them.

The numbers come from a CUDA run (NVIDIA H200, a nanoGPT-style GPT of 95.7M parameters, float16
autocast with a GradScaler, ``--steps 20 --compare float32``, default ``--record-ops-steps 2``
and ``--gradient-interval 4``): its timed iterations 7 to 20, in which iterations 8, 12, 16 and
20 sampled the gradient statistics and took 0.35-0.49 s against 55-125 ms for the others.
"""

from __future__ import annotations

import contextlib
import io

import pytest
import torch
from torch import nn

from ampdoctor.trace.compare.compare_child import CompareChild
from ampdoctor.trace.compare.compare_text import headline, summary_lines
from ampdoctor.trace.compare.comparison import COMPARED, TOO_SHORT, RunRecord, compare_runs
from ampdoctor.trace.compare.stopwatch import RunClock
from ampdoctor.trace.session import TraceSession

TIMED_STEPS = list(range(7, 21))
MIXED_SECONDS = [
    0.07019458199999917,
    0.48397811300000626,
    0.06267156200000557,
    0.05693734500000858,
    0.06979613900000459,
    0.4179604049999881,
    0.0599812170000007,
    0.05611621799999966,
    0.05462200399999517,
    0.40178835400000423,
    0.06206420099999832,
    0.0627180390000035,
    0.07944669500000145,
    0.3589459109999922,
]
FLOAT32_SECONDS = [
    0.12503335400000992,
    0.386088811999997,
    0.12350014099999385,
    0.12466243900000507,
    0.12436574199999484,
    0.4865594540000018,
    0.12497184999999433,
    0.12504510099999777,
    0.1253775849999954,
    0.34486669800000413,
    0.12305068900001004,
    0.12262082300000543,
    0.12255786099999,
    0.36282028799999466,
]
MIXED_PEAK, FLOAT32_PEAK = 4796450816, 5735049728
DEVICE_BUSY_SHARE = 0.41630330122131587
MIXED_SETTING = {"autocast": [["cuda", "float16"]], "scalers": 1}


def _schedule(record_ops_steps: int = 2, gradient_interval: int = 4):
    return TraceSession(
        record_ops_steps=record_ops_steps, gradient_interval=gradient_interval
    ).gradient_sample_scheduled


def _clocked(seconds: list[float], sampled) -> RunClock:
    """A clock that saw iterations 1-20, the last 14 lasting ``seconds`` (the first six did not
    count in the run measured; here they are given an hour each, so timing one would show)."""
    clock = RunClock(window=2, sampled=sampled)
    clock.steps_seen = list(range(1, 21))
    clock.durations = dict.fromkeys(range(2, 7), 3600.0)
    clock.durations.update(zip(TIMED_STEPS, seconds))
    return clock


def _record(role: str, clock: RunClock, peak: int, **extra) -> RunRecord:
    timing = clock.timing()
    return RunRecord(
        role=role,
        steps=20,
        stopped="steps",
        seconds=timing.seconds,
        timed_steps=timing.steps,
        left_out=timing.left_out,
        peak_bytes=peak,
        memory_method="torch.cuda.max_memory_allocated",
        losses=[10.88],
        **extra,
    )


def test_gradient_samples_are_not_timed():
    timing = _clocked(MIXED_SECONDS, _schedule()).timing()
    assert timing.steps == [7, 9, 10, 11, 13, 14, 15, 17, 18, 19]
    assert timing.left_out == {"window": 2, "warmup": 2, "profiled": 2, "gradients": 4}
    assert max(timing.seconds) < 0.08
    # Without a schedule (a session sampling nothing past its window) every iteration is timed.
    assert _clocked(MIXED_SECONDS, None).timing().steps == TIMED_STEPS


def test_the_h200_run_is_measurably_faster_once_the_samples_are_left_out():
    sampled = _schedule()
    mixed = _record("mixed", _clocked(MIXED_SECONDS, sampled), MIXED_PEAK, **MIXED_SETTING)
    float32 = _record("float32", _clocked(FLOAT32_SECONDS, sampled), FLOAT32_PEAK)
    assert mixed.timed_steps == float32.timed_steps  # both time the same iterations
    result = compare_runs(mixed, float32, 1.1, 0.10)
    assert result.status == COMPARED and result.measurable and result.paying_off is True
    assert result.speedup == pytest.approx(0.12451409049999995 / 0.06236788150000194)
    assert mixed.timing.spread < 0.1 and float32.timing.spread < 0.01
    assert headline(result) == "Mixed precision vs float32 (float16 autocast on cuda): 2.00x faster"
    time_line = summary_lines(result)[0]
    assert time_line.startswith("time    125 → 62.4 ms/iteration (float32 → mixed, median of 10 iterations")
    assert time_line.endswith("left out: 2 op-recording, 2 warm-up, 2 profiled, 4 gradient samples)")
    data = result.to_dict()["runs"]["mixed"]
    assert data["left_out"]["gradients"] == 4 and data["deviation_seconds"] == pytest.approx(mixed.timing.deviation)


def test_the_h200_timings_as_reported_are_measurable_despite_the_slow_samples():
    """The verdict holds even on the timings the run reported (samples included): a minority of
    slow iterations no longer decides the spread."""
    mixed = RunRecord("mixed", steps=20, seconds=MIXED_SECONDS, timed_steps=TIMED_STEPS, **MIXED_SETTING)
    mixed.peak_bytes = MIXED_PEAK
    float32 = RunRecord("float32", steps=20, seconds=FLOAT32_SECONDS, timed_steps=TIMED_STEPS, peak_bytes=FLOAT32_PEAK)
    result = compare_runs(mixed, float32, 1.1, 0.10)
    assert result.speedup == pytest.approx(1.8866298517883044)
    assert result.measurable and result.paying_off is True
    assert result.memory_change == pytest.approx(-0.16366011743847952)
    assert mixed.timing.spread < 0.2 and float32.timing.spread < 0.02
    assert headline(result).endswith("1.89x faster")


def test_the_device_line_does_not_contradict_a_measured_speed_up():
    sampled = _schedule()
    mixed = _record("mixed", _clocked(MIXED_SECONDS, sampled), MIXED_PEAK, **MIXED_SETTING)
    float32 = _record("float32", _clocked(FLOAT32_SECONDS, sampled), FLOAT32_PEAK)
    faster = compare_runs(mixed, float32, 1.1, 0.10)
    faster.device_busy_share = DEVICE_BUSY_SHARE
    (line,) = [line for line in summary_lines(faster) if line.startswith("device")]
    assert line == "device  busy 42% of each profiled iteration (under torch.profiler, the tracer's own work taken off)"
    # The same busy share where the runs take the same time: the waiting is the reason.
    same = compare_runs(mixed, _record("float32", _clocked(MIXED_SECONDS, sampled), FLOAT32_PEAK), 1.1, 0.10)
    same.device_busy_share = DEVICE_BUSY_SHARE
    assert not same.measurable
    (line,) = [line for line in summary_lines(same) if line.startswith("device")]
    assert line.endswith(": mixed precision cannot speed up the time the GPU waits")


def test_overlapping_timings_with_an_outlier_stay_not_measurable():
    mixed = RunRecord("mixed", seconds=[0.100, 0.104, 0.098, 0.102, 0.101, 0.400], **MIXED_SETTING)
    float32 = RunRecord("float32", seconds=[0.103, 0.099, 0.105, 0.101, 0.102, 0.350])
    result = compare_runs(mixed, float32, 1.1, 0.10)
    assert result.status == COMPARED and not result.measurable and result.paying_off is False
    assert headline(result).endswith("no measurable difference in speed")


def test_sampling_every_iteration_leaves_nothing_to_time_and_says_why():
    sampled = _schedule(gradient_interval=1)
    mixed = _record("mixed", _clocked(MIXED_SECONDS, sampled), MIXED_PEAK, **MIXED_SETTING)
    float32 = _record("float32", _clocked(FLOAT32_SECONDS, sampled), FLOAT32_PEAK)
    assert mixed.left_out["gradients"] == 14 and not mixed.seconds
    result = compare_runs(mixed, float32, 1.1, 0.10)
    assert result.status == TOO_SHORT
    assert "sample gradient statistics" in result.explanation
    assert result.explanation.endswith("raise --steps or --gradient-interval.")
    few = _schedule(gradient_interval=2)
    result = compare_runs(
        _record("mixed", _clocked(MIXED_SECONDS[:8], few), MIXED_PEAK, **MIXED_SETTING),
        _record("float32", _clocked(FLOAT32_SECONDS[:8], few), FLOAT32_PEAK),
        1.1,
        0.10,
    )
    assert not result.measurable
    assert (
        result.explanation
        == "speed not measurable: 4 timed iteration(s), 5 needed (raise --steps or --gradient-interval)"
    )


def _train(steps: int) -> None:
    model = nn.Linear(8, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(torch.randn(4, 8)).float().pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


@pytest.mark.parametrize("role, sampled", [("float32", 1), ("mixed", 4)])
def test_each_run_leaves_out_the_sampled_iterations(role, sampled, monkeypatch):
    # Iterations 1 (window), 2-3 (warm-up), 4-5 (profiled), then 6-13 timed but for 8 and 12.
    with contextlib.redirect_stdout(io.StringIO()), TraceSession(record_ops_steps=1, gradient_interval=4) as session:
        child = CompareChild(role, session)
        if role == "mixed":  # the profile is not what is tested here
            monkeypatch.setattr(child.clock, "profile", False)
        with child:
            _train(13)
    timing = child.clock.timing()
    assert timing.steps == [6, 7, 9, 10, 11, 13]
    assert timing.left_out == {"window": 1, "warmup": 2, "profiled": 2, "gradients": 2}
    # The float32 run samples the gradient statistics in the op-recording window only.
    stats = next(iter(session.observations.gradients.values()))
    assert stats.sampled_iterations == sampled


def _instrument_work(session: TraceSession, monkeypatch) -> dict[int, tuple[int, int, int]]:
    """Per iteration: (activation measurements on the device, module outputs recorded, gradient
    captures) made while it ran, counted at its end."""
    from ampdoctor.trace import activations

    counts = {"max_abs": 0, "captures": 0}
    measure = activations.max_abs

    def counted_max_abs(tensors):
        counts["max_abs"] += 1
        return measure(tensors)

    monkeypatch.setattr(activations, "max_abs", counted_max_abs)
    monitor = session._gradients
    capture = monitor.capture

    def counted_capture(*args, **kwargs):
        counts["captures"] += 1
        return capture(*args, **kwargs)

    monkeypatch.setattr(monitor, "capture", counted_capture)
    per_step: dict[int, tuple[int, int, int]] = {}
    seen = {"max_abs": 0, "captures": 0, "calls": 0}

    def listener(record, observations) -> None:
        calls = sum(stats.calls for stats in observations.activations.values())
        per_step[record.step] = (
            counts["max_abs"] - seen["max_abs"],
            calls - seen["calls"],
            counts["captures"] - seen["captures"],
        )
        seen.update(max_abs=counts["max_abs"], captures=counts["captures"], calls=calls)

    session.iteration_listeners.append(listener)
    return per_step


def _train_scaled(steps: int) -> None:
    """As ``_train``, with a GradScaler (unscale_ before the step): the scaler's gradient path."""
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(steps):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(torch.randn(4, 8)).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


@pytest.mark.parametrize("train", [_train, _train_scaled])
@pytest.mark.parametrize("role", ["float32", "mixed"])
def test_timed_iterations_run_without_the_per_module_instruments(role, train, monkeypatch):
    with contextlib.redirect_stdout(io.StringIO()), TraceSession(record_ops_steps=1, gradient_interval=4) as session:
        child = CompareChild(role, session)
        if role == "mixed":
            monkeypatch.setattr(child.clock, "profile", False)
        per_step = _instrument_work(session, monkeypatch)
        with child:
            train(13)
    timed = child.clock.timing().steps
    assert timed == [6, 7, 9, 10, 11, 13]
    assert sorted(per_step) == list(range(1, 14))
    for step, (measured, recorded, captures) in per_step.items():
        if step in timed:
            assert (measured, recorded, captures) == (0, 0, 0), step
        elif step > 2:  # the first iterations close late (a plain step): their counts shift
            # Every untimed iteration observes: the Linear's input and output, its gradients.
            assert measured >= 2 and recorded >= 1 and captures == 1, step
    # The activation ranges and gradients still come from the untimed iterations.
    assert session.observations.activations and session.observations.gradients
    assert not child.clock.profile_error


def test_plain_trace_observes_activations_on_every_iteration(monkeypatch):
    with contextlib.redirect_stdout(io.StringIO()), TraceSession(record_ops_steps=1, gradient_interval=4) as session:
        per_step = _instrument_work(session, monkeypatch)
        _train(13)
    assert sorted(per_step) == list(range(1, 14))
    for step, (measured, recorded, captures) in per_step.items():
        if step > 2:
            assert measured >= 2 and recorded >= 1 and captures == 1, step
    assert session.bare_steps is None
