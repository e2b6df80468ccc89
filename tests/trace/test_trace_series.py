"""The report's per-iteration series hold what the script itself saw at each optimizer step:
the loss, the skipped steps, and the iteration at which a module's output peaked and became
non-finite; with and without a GradScaler, with gradient accumulation and with two optimizers
per iteration."""

import math
import re

import pytest
from conftest import SCRIPTS

SCRIPT = str(SCRIPTS / "printed_series.py")
SPIKE_AT, NONFINITE_AT = 3, 5


def printed(stdout: str) -> list[tuple[float, bool]]:
    return [(float(loss), skipped == "1") for loss, skipped in re.findall(r"loss (\S+) skipped (\d)", stdout)]


def same(reported, expected: float) -> bool:
    if isinstance(reported, str):
        return (reported == "NaN" and math.isnan(expected)) or reported == ("Infinity" if expected > 0 else "-Infinity")
    return reported == pytest.approx(expected, rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["bf16", "fp16", "accumulation", "gan"])
def test_per_iteration_series_match_the_scripts_own_values(trace_cli, mode):
    run = trace_cli(SCRIPT, "--steps", "0", "--fail-on", "never", "--no-lint", "--", mode)
    steps = printed(run.stdout)
    report = run.report
    assert len(steps) == report["steps"] == 6
    assert len(report["loss"]) == 6
    for number, (reported, (expected, _)) in enumerate(zip(report["loss"], steps), start=1):
        assert same(reported, expected), (number, report["loss"], steps)
    assert report["skipped"] == [n for n, (_, skipped) in enumerate(steps, start=1) if skipped]
    spike = next(a for a in report["activations"] if a["module_class"] == "Spike")
    assert spike["first_nonfinite_step"] == NONFINITE_AT
    assert list(spike["max_abs_step"].values()) == [SPIKE_AT]
    first_weight = next(g for g in report["gradients"] if g["name"] == "0.weight")
    # float16 with a scaler: the spike's scaled gradients already overflow at SPIKE_AT (the step is skipped).
    expected_nonfinite = SPIKE_AT if mode == "fp16" else NONFINITE_AT
    assert first_weight["first_nonfinite_step"] == expected_nonfinite
    if mode == "fp16":
        assert report["skipped"][0] == SPIKE_AT


@pytest.mark.slow
def test_a_stop_after_n_iterations_keeps_the_last_ones_loss(trace_cli):
    whole = printed(trace_cli(SCRIPT, "--steps", "0", "--fail-on", "never", "--no-lint", "--", "bf16").stdout)
    run = trace_cli(SCRIPT, "--steps", "2", "--fail-on", "never", "--no-lint", "--", "bf16")
    # The stop comes inside the second step, before the script prints its loss.
    assert run.report["steps"] == 2
    assert run.report["loss"] == pytest.approx([loss for loss, _ in whole[:2]], rel=1e-5)
