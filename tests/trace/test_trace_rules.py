"""Runtime rules on hand-made observations: thresholds, boundaries and messages."""

import pytest

from ampdoctor.trace.observations import GradientStats, IterationRecord, Observations, ScalerConfig
from ampdoctor.trace.rulebase import Locator, Thresholds, format_scale
from ampdoctor.trace.rules import evaluate
from ampdoctor.trace.rules.scale import frequent_skipped_steps, loss_scale_collapse
from ampdoctor.trace.rules.underflow import lost_share

LOCATOR = Locator("train.py", {})


def scaled_run(scales, skipped=()):
    """Observations of a scaler whose scale after each iteration is ``scales[i]``."""
    observations = Observations(scalers=[ScalerConfig("cpu", 65536.0, 2.0, 0.5, 2000)])
    before = 65536.0
    for step, after in enumerate(scales, start=1):
        observations.iterations.append(
            IterationRecord(step=step, scale=before, scale_after=after, skipped=step in skipped, loss=1.0)
        )
        before = after
    return observations


def codes(observations, thresholds=None):
    thresholds = Thresholds() if thresholds is None else thresholds
    return [f.code for f in evaluate(observations, thresholds, LOCATOR)]


def test_nine_backoffs_in_a_row_are_calibration_ten_are_a_collapse():
    nine = scaled_run([65536.0 / 2**n for n in range(1, 10)] + [128.0] * 5, skipped=range(1, 10))
    assert "AMP501" not in codes(nine)
    ten = scaled_run([65536.0 / 2**n for n in range(1, 11)], skipped=range(1, 11))
    finding = next(loss_scale_collapse(ten, Thresholds(), LOCATOR))
    assert finding.extra["step"] == 10 and finding.extra["backoffs_in_a_row"] == 10


def test_a_growth_breaks_the_backoff_run():
    scales = [32768.0, 16384.0, 8192.0, 4096.0, 2048.0, 4096.0, 2048.0, 1024.0, 512.0, 256.0, 128.0]
    assert "AMP501" not in codes(scaled_run(scales, skipped=range(1, 12)))


def test_scale_below_one_is_a_collapse_and_below_2_pow_126_says_weights_are_unprotected():
    observations = scaled_run([0.5])
    assert codes(observations) == ["AMP501"]
    tiny = scaled_run([2.0**-130])
    message = next(loss_scale_collapse(tiny, Thresholds(), LOCATOR)).message
    assert "no longer protects the weights" in message and "found_inf stays 0" in message
    assert "no longer protects" not in next(loss_scale_collapse(observations, Thresholds(), LOCATOR)).message


def test_skip_share_is_measured_after_the_warm_up_and_must_exceed_the_threshold():
    # 40 iterations; skips in the warm-up do not count; 1 of 20 later ones is exactly 5%.
    at_threshold = scaled_run([65536.0] * 40, skipped=set(range(1, 15)) | {30})
    assert list(frequent_skipped_steps(at_threshold, Thresholds(), LOCATOR)) == []
    above = scaled_run([65536.0] * 40, skipped={30, 31})
    finding = next(frequent_skipped_steps(above, Thresholds(), LOCATOR))
    assert finding.extra == {"step": 30, "skipped": 2, "iterations": 20}
    relaxed = Thresholds().with_overrides({"skip_share": "0.2"})
    assert list(frequent_skipped_steps(above, relaxed, LOCATOR)) == []


def test_zeros_count_as_underflow_only_with_subnormal_evidence():
    thresholds = Thresholds()
    assert lost_share(zero=0.5, below_subnormal=0.0, subnormal=0.0, thresholds=thresholds) == 0.0
    assert lost_share(zero=0.5, below_subnormal=0.0, subnormal=0.002, thresholds=thresholds) == pytest.approx(0.502)
    assert lost_share(zero=0.0, below_subnormal=0.03, subnormal=0.0, thresholds=thresholds) == 0.03


def test_underflow_rule_needs_float16_gradients():
    observations = Observations()
    stats = GradientStats("fc.weight", "fc", "Linear", (4, 4), "float32")
    stats.add([0.0, 0.5, 0.0, 0.0, 1e-9], step=1, skipped=False, scale=1.0)
    observations.gradients["fc.weight"] = stats
    observations.iterations.append(IterationRecord(step=1))
    assert "AMP505" not in codes(observations)  # no float16 anywhere
    observations.autocast_dtypes.add(("cpu", "float16"))
    assert "AMP505" in codes(observations)


def test_non_finite_loss_of_an_unfinished_iteration_is_reported():
    observations = scaled_run([65536.0, 65536.0])
    observations.unfinished_loss = float("nan")
    finding = [f for f in evaluate(observations, Thresholds(), LOCATOR) if f.code == "AMP503"][0]
    assert finding.extra["step"] == 3 and "NaN" in finding.message


def test_threshold_overrides_are_typed_and_checked():
    assert Thresholds().with_overrides({"collapse_backoffs": "12"}).collapse_backoffs == 12
    with pytest.raises(ValueError, match="unknown threshold"):
        Thresholds().with_overrides({"nope": "1"})
    with pytest.raises(ValueError, match="needs a number"):
        Thresholds().with_overrides({"skip_share": "many"})


def test_scales_are_printed_as_powers_of_two_where_that_helps():
    assert format_scale(65536.0) == "65536"
    assert format_scale(0.0625) == "0.0625 (2**-4)"
    assert format_scale(3.0) == "3"
