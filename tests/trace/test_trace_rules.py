"""Runtime rules on hand-made observations: thresholds, boundaries and messages."""

import pytest

from ampdoctor.trace.observations import BoundaryStats, GradientStats, IterationRecord, Observations, ScalerConfig
from ampdoctor.trace.rulebase import Locator, Thresholds, format_scale
from ampdoctor.trace.rules import evaluate
from ampdoctor.trace.rules.scale_rules import frequent_skipped_steps, loss_scale_collapse
from ampdoctor.trace.rules.underflow_rules import lost_share, underflow_prone_gradients

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
    # The evidence is the coarse band just above where float16 flushes (2**-24 to 2**-20).
    thresholds = Thresholds()
    assert lost_share(zero=0.5, below_subnormal=0.0, coarse_subnormal=0.0, thresholds=thresholds) == 0.0
    assert lost_share(zero=0.5, below_subnormal=0.0, coarse_subnormal=0.002, thresholds=thresholds) == pytest.approx(
        0.502
    )
    assert lost_share(zero=0.0, below_subnormal=0.03, coarse_subnormal=0.0, thresholds=thresholds) == 0.03


def test_underflow_rule_needs_float16_gradients():
    observations = Observations()
    stats = GradientStats("fc.weight", "fc", "Linear", (4, 4), "float32")
    stats.add([0.0, 0.5, 0.0, 0.0, 0.0, 1e-9], step=1, skipped=False, scale=1.0)
    observations.gradients["fc.weight"] = stats
    observations.iterations.append(IterationRecord(step=1))
    assert "AMP505" not in codes(observations)  # no float16 anywhere
    observations.autocast_dtypes.add(("cpu", "float16"))
    assert "AMP505" in codes(observations)


def float16_run(params=(), boundaries=()):
    """A float16 run at GradScaler's initial scale: ``params`` are (name, numel, [zero, below
    2**-24, subnormal, coarse subnormal]) and ``boundaries`` (module, numel, [subnormal,
    coarse])."""
    observations = scaled_run([65536.0])
    observations.autocast_dtypes.add(("cuda", "float16"))
    for name, numel, (zero, below, subnormal, coarse) in params:
        stats = GradientStats(name, name.rsplit(".", 1)[0], "Linear", (numel,), "float32")
        stats.add([zero, below, subnormal, 0.0, coarse, 1e-3], step=1, skipped=False, scale=65536.0)
        observations.gradients[name] = stats
    for module, numel, (subnormal, coarse) in boundaries:
        observations.boundaries[module] = BoundaryStats(
            module, "Linear", numel=numel, subnormal=subnormal * numel, coarse_subnormal=coarse * numel
        )
    return observations


def test_upper_band_subnormals_and_a_one_percent_boundary_share_stay_silent():
    # What healthy float16 runs at scale 65536 look like (GPT-2 with the HF Trainer, a ResNet):
    # query/key gradients with a quarter of their elements between 2**-20 and 2**-14, where
    # float16 still keeps 5 to 10 significant bits; module outputs with 1% to 32% subnormal, a
    # few tenths of a percent of them below 2**-20; and a structural zero share (an embedding's
    # unused rows) beside a populated upper band.
    observations = float16_run(
        params=[
            ("h.7.attn.c_attn.weight", 1_769_472, (0.0005, 0.0, 0.28, 0.004)),
            ("h.6.attn.c_attn.weight", 1_769_472, (0.0005, 0.0, 0.25, 0.004)),
            ("wte.weight", 1_000_000, (0.9, 0.0, 0.05, 0.0)),
            ("h.5.mlp.0.weight", 2_359_296, (0.0001, 0.0, 0.002, 0.0)),
        ],
        boundaries=[
            ("transformer.h.5.attn.c_attn", 1000, (0.014, 0.0002)),
            ("h.7.attn.c_attn", 1000, (0.32, 0.005)),
        ],
    )
    assert "AMP505" not in codes(observations)


def test_a_few_modules_losing_a_little_at_random_init_stay_silent():
    # A GPT at random initialisation (measured on a GPU at scale 65536): attention is uniform,
    # so the query and key gradients are tiny, and 1-1.5% of the c_attn gradients fall below
    # 2**-20, in three of its 51 parameters and at three of its module outputs; the model's
    # gradient as a whole loses well under 1%.
    params = [(f"h.{i}.attn.c_attn.weight", 1_769_472, (0.0005, 0.0, 0.27, 0.013)) for i in (5, 6, 7)]
    params += [(f"h.{i}.mlp.0.weight", 2_359_296, (0.0001, 0.0, 0.002, 0.0)) for i in range(8)]
    params += [("wte.weight", 38_633_472, (0.0, 0.0, 0.0, 0.0))]
    boundaries = [(f"h.{i}.attn.c_attn", 9_437_184, (0.31, 0.012)) for i in (6, 7)]
    boundaries += [(f"h.{i}.mlp.0", 12_582_912, (0.002, 0.0)) for i in range(8)]
    assert "AMP505" not in codes(float16_run(params=params, boundaries=boundaries))
    # The same shares throughout the model are the model's gradients underflowing.
    everywhere = [(f"h.{i}.attn.c_attn", 9_437_184, (0.31, 0.012)) for i in range(8)]
    finding = next(underflow_prone_gradients(float16_run(boundaries=everywhere), Thresholds(), LOCATOR))
    assert len(finding.extra["boundaries"]) == 8


def test_flushed_or_coarse_gradients_fire_at_a_parameter_and_at_a_boundary():
    # Zeros where the band just above 2**-24 is populated flushed there.
    flushed = float16_run(params=[("fc.weight", 4096, (0.2, 0.0, 0.5, 0.002)), ("fc.bias", 64, (0.0, 0.0, 0.0, 0.0))])
    finding = next(underflow_prone_gradients(flushed, Thresholds(), LOCATOR))
    assert finding.extra["parameters"] == [{"name": "fc.weight", "module": "fc", "lost_share": pytest.approx(0.202)}]
    assert "`fc.weight` 20%" in finding.message and "at most 4 significant bits" in finding.message
    # Values kept with at most 4 significant bits, with nothing flushed yet.
    coarse = float16_run(params=[("fc.weight", 4096, (0.0, 0.0, 0.6, 0.05))])
    assert next(underflow_prone_gradients(coarse, Thresholds(), LOCATOR)).extra["parameters"][0][
        "lost_share"
    ] == pytest.approx(0.05)
    # At a module boundary, the nonzero float16 gradients below 2**-20.
    boundary = float16_run(boundaries=[("blocks.1.conv1", 1000, (0.4, 0.03)), ("stem.0", 1000, (0.06, 0.001))])
    finding = next(underflow_prone_gradients(boundary, Thresholds(), LOCATOR))
    assert finding.extra["boundaries"] == [{"module": "blocks.1.conv1", "lost_share": pytest.approx(0.03)}]
    assert finding.extra["parameters"] == [] and "`blocks.1.conv1` 3%" in finding.message


def test_underflow_thresholds_can_be_overridden():
    observations = float16_run(
        params=[("fc.weight", 4096, (0.0, 0.0, 0.3, 0.005))], boundaries=[("fc", 4096, (0.3, 0.005))]
    )
    assert "AMP505" not in codes(observations)
    stricter = Thresholds().with_overrides({"underflow_share": "0.001"})
    finding = next(underflow_prone_gradients(observations, stricter, LOCATOR))
    assert [p["name"] for p in finding.extra["parameters"]] == ["fc.weight"]
    assert [b["module"] for b in finding.extra["boundaries"]] == ["fc"]
    # Zeros count once the coarse band reaches ``underflow_evidence``.
    zeros = float16_run(params=[("fc.weight", 4096, (0.3, 0.0, 0.3, 0.0005))])
    assert "AMP505" not in codes(zeros)
    assert "AMP505" in codes(zeros, Thresholds().with_overrides({"underflow_evidence": "0.0001"}))


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
