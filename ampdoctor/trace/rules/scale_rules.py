"""AMP501 (the loss scale collapses) and AMP502 (frequent skipped steps): the GradScaler's own
record, with what overflowed behind it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Optional

from ...findings import Finding
from ..backward import OUTPUT
from ..observations import Observations
from ..rulebase import (
    FLOAT32_SMALLEST_NORMAL,
    Locator,
    Thresholds,
    format_scale,
    make_finding,
    module_location,
    rule,
)


def _overflow_source(observations: Observations, step: int) -> tuple[Optional[str], Optional[str]]:
    """(module, description) of what overflowed at or after ``step``: the module whose output
    first became non-finite, else the first parameter whose gradient held inf/NaN."""
    origin = observations.origin
    if origin is not None and origin.step <= step:
        return origin.module, f"the first non-finite activation came from `{origin.module}` ({origin.module_class})"
    backward = observations.backward_origin
    if backward is not None and backward.side != OUTPUT:
        return backward.module, (
            f"the first inf/NaN gradient was born in the backward of `{backward.module}` "
            f"({backward.module_class}), see AMP504"
        )
    for record in observations.iterations:
        if record.step >= step and record.nonfinite_params:
            name = record.nonfinite_params[0]
            stats = observations.gradients.get(name)
            module = stats.module if stats else None
            return module, f"the first inf/NaN gradient was in `{name}` at iteration {record.step}"
    return None, None


def _overflowing_module(observations: Observations, step: int) -> Optional[str]:
    return _overflow_source(observations, step)[0]


def _backoff_runs(observations: Observations) -> Iterator[tuple[int, int]]:
    """(first step, length) of every run of consecutive backoffs."""
    start, length = 0, 0  # start: set by the run's first backoff, before any yield
    for record in observations.iterations:
        if record.scale_event == "backoff":
            start = record.step if length == 0 else start
            length += 1
            continue
        if length:
            yield start, length
        length = 0
    if length:
        yield start, length


@rule("AMP501")
def loss_scale_collapse(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    scaled = [(r, r.scale_after) for r in observations.iterations if r.scale_after is not None]
    if not scaled:
        return
    below = next((r for r, scale in scaled if scale < thresholds.collapse_scale), None)
    runs = [(s, n) for s, n in _backoff_runs(observations) if n >= thresholds.collapse_backoffs]
    if below is None and not runs:
        return
    lowest, lowest_scale = min(scaled, key=lambda pair: pair[1])
    # No run: (0, 0), which the uses below treat as none (a run at iteration 0 is the same to them).
    run_start, run_length = max(runs, key=lambda run: run[1]) if runs else (0, 0)
    step = below.step if below is not None else run_start + thresholds.collapse_backoffs - 1
    module, source = _overflow_source(observations, run_start or step)
    parts = [f"the loss scale collapsed to {format_scale(lowest_scale)} by iteration {lowest.step}"]
    if below is not None:
        parts.append(f"it fell below {thresholds.collapse_scale:g} at iteration {below.step}")
    if run_length:
        parts.append(f"{run_length} backoffs in a row from iteration {run_start}, every one a skipped step")
    message = "; ".join(parts) + "."
    if source:
        message += f" {source[0].upper()}{source[1:]}."
    if lowest_scale < FLOAT32_SMALLEST_NORMAL:
        message += (
            " The scale is below 2**-126, so it no longer protects the weights: its float32 inverse"
            " overflows to inf, found_inf stays 0 on finite gradients, and the step writes inf/NaN"
            " into the parameters."
        )
    help = (
        "Something produces inf/NaN gradients on every step, so GradScaler keeps halving: find it "
        "(see the gradients table and AMP504), make that op finite (an eps in sqrt/log/div, a "
        "clamp), or run it in float32 with `torch.autocast(device, enabled=False)`; bfloat16 "
        "autocast needs no scaler."
    )
    yield make_finding(
        "AMP501",
        message,
        module_location(locator, observations, module),
        help,
        step=step,
        module=module,
        min_scale=lowest_scale,
        backoffs_in_a_row=run_length or None,
    )


@rule("AMP502")
def frequent_skipped_steps(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    later = [r for r in observations.iterations[thresholds.skip_warmup :] if r.scale is not None]
    skipped = [r.step for r in later if r.skipped]
    if not later or len(skipped) / len(later) <= thresholds.skip_share:
        return
    share = len(skipped) / len(later)
    message = (
        f"{len(skipped)} of {len(later)} iterations after the first {thresholds.skip_warmup} skipped "
        f"their optimizer step ({share:.0%}; above {thresholds.skip_share:.0%}), first at iteration {skipped[0]}."
    )
    help = _skip_help(observations)
    module = _overflowing_module(observations, skipped[0])
    yield make_finding(
        "AMP502",
        message,
        module_location(locator, observations, module),
        help,
        step=skipped[0],
        module=module,
        skipped=len(skipped),
        iterations=len(later),
    )


def _skip_help(observations: Observations) -> str:
    config = observations.scalers[0] if observations.scalers else None
    if config is not None and config.growth_interval < 100:
        return (
            f"GradScaler(growth_interval={config.growth_interval}) grows the scale again right after "
            "each backoff, so it keeps overshooting: keep the default growth_interval=2000."
        )
    if config is not None and config.growth_factor > 2:
        return f"GradScaler(growth_factor={config.growth_factor:g}) overshoots on every growth: keep the default 2.0."
    return (
        "An op overflows float16 now and then: find it (see the gradients table), keep it in float32 "
        "with `torch.autocast(device, enabled=False)`, or normalise its inputs."
    )
