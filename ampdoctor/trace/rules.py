"""Runtime rules: ``Observations`` → ``Finding`` (AMP501–AMP510), and ``evaluate``, which runs
them all.

Each rule is a function of the observations, the thresholds and a ``Locator`` (``rulebase.py``).
Every message says what was measured and every help text says what to change, in the training
script's terms. The non-finite rules (AMP503, AMP504) live in ``rules_nonfinite.py``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Callable, Iterator, Optional

from ..findings import Finding
from .backward import OUTPUT
from .observations import GradientStats, Observations
from .rulebase import (  # noqa: F401  (Locator, Thresholds and format_scale are used from here too)
    FLOAT16_MAX,
    FLOAT32_SMALLEST_NORMAL,
    Locator,
    Thresholds,
    _class_of,
    _finding,
    _module_class,
    _module_location,
    format_scale,
)
from .rules_nonfinite import backward_overflow_origin, non_finite_loss, overflow_origin

# -- AMP501 / AMP502: the loss scale ------------------------------------------------------------


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
    start, length = None, 0
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


def loss_scale_collapse(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    scaled = [r for r in observations.iterations if r.scale_after is not None]
    if not scaled:
        return
    below = next((r for r in scaled if r.scale_after < thresholds.collapse_scale), None)
    runs = [(s, n) for s, n in _backoff_runs(observations) if n >= thresholds.collapse_backoffs]
    if below is None and not runs:
        return
    lowest = min(scaled, key=lambda r: r.scale_after)
    run_start, run_length = max(runs, key=lambda run: run[1]) if runs else (None, 0)
    step = below.step if below is not None else run_start + thresholds.collapse_backoffs - 1
    module, source = _overflow_source(observations, run_start or step)
    parts = [f"the loss scale collapsed to {format_scale(lowest.scale_after)} by iteration {lowest.step}"]
    if below is not None:
        parts.append(f"it fell below {thresholds.collapse_scale:g} at iteration {below.step}")
    if run_length:
        parts.append(f"{run_length} backoffs in a row from iteration {run_start}, every one a skipped step")
    message = "; ".join(parts) + "."
    if source:
        message += f" {source[0].upper()}{source[1:]}."
    if lowest.scale_after < FLOAT32_SMALLEST_NORMAL:
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
    yield _finding(
        "AMP501", message, _module_location(locator, observations, module), help,
        step=step, module=module, min_scale=lowest.scale_after, backoffs_in_a_row=run_length or None,
    )


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
    yield _finding(
        "AMP502", message, _module_location(locator, observations, module), help,
        step=skipped[0], module=module, skipped=len(skipped), iterations=len(later),
    )


def _skip_help(observations: Observations) -> str:
    config = observations.scalers[0] if observations.scalers else None
    if config is not None and config.growth_interval < 100:
        return (
            f"GradScaler(growth_interval={config.growth_interval}) grows the scale again right after "
            "each backoff, so it keeps overshooting: keep the default growth_interval=2000."
        )
    if config is not None and config.growth_factor > 2:
        return (
            f"GradScaler(growth_factor={config.growth_factor:g}) overshoots on every growth: keep "
            "the default 2.0."
        )
    return (
        "An op overflows float16 now and then: find it (see the gradients table), keep it in float32 "
        "with `torch.autocast(device, enabled=False)`, or normalise its inputs."
    )


# -- AMP505: gradient underflow ----------------------------------------------------------------


def lost_share(zero: float, below_subnormal: float, subnormal: float, thresholds: Thresholds) -> float:
    """Share of elements float16 loses at the loss scale: below 2**-24 (flushed to zero), in
    the subnormal band (fewer than 10 significant bits), and the zeros when that band is
    populated (evidence that they flushed there rather than being structural)."""
    evidenced_zeros = zero if subnormal >= thresholds.underflow_evidence else 0.0
    return below_subnormal + subnormal + evidenced_zeros


def _float16_gradients(observations: Observations) -> bool:
    """Gradients went through float16: float16 autocast, or float16 parameters."""
    if any(dtype == "float16" for _, dtype in observations.autocast_dtypes):
        return True
    return any(g.dtype == "float16" for g in observations.gradients.values())


def gradient_losses(observations: Observations, thresholds: Thresholds) -> list[tuple[GradientStats, float]]:
    ranked = []
    for stats in observations.gradients.values():
        share = lost_share(stats.mean("zero"), stats.mean("below_subnormal"), stats.mean("subnormal"), thresholds)
        if share > thresholds.underflow_share:
            ranked.append((stats, share))
    return sorted(ranked, key=lambda item: -item[1])


def _suggested_scale(observations: Observations) -> Optional[float]:
    """The largest power of two that keeps the largest gradient at half float16's max."""
    largest = max((g.max_abs for g in observations.gradients.values()), default=0.0)
    if largest <= 0:
        return None
    return 2.0 ** math.floor(math.log2(FLOAT16_MAX / 2 / largest))


def underflow_prone_gradients(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    if not _float16_gradients(observations):
        return
    params = gradient_losses(observations, thresholds)
    # At module boundaries zeros are mostly the inactive units of a following ReLU: only the
    # measured subnormal values count there.
    boundaries = sorted(
        ((b, b.subnormal_share) for b in observations.boundaries.values()),
        key=lambda item: -item[1],
    )
    boundaries = [(b, share) for b, share in boundaries if share > thresholds.underflow_share]
    if not params and not boundaries:
        return
    scale = next((r.scale for r in reversed(observations.iterations) if r.scale is not None), 1.0)
    parts = []
    if params:
        named = ", ".join(f"`{s.name}` {share:.0%}" for s, share in params[:5])
        parts.append(f"{len(params)} parameter gradient(s) fall below float16's normal range once scaled: {named}")
    if boundaries:
        named = ", ".join(f"`{b.module}` {share:.0%}" for b, share in boundaries[:3])
        parts.append(f"float16 gradients reaching {len(boundaries)} module output(s) are subnormal: {named}")
    message = f"gradients underflow float16 at loss scale {format_scale(scale)}; " + "; ".join(parts) + "."
    help = _underflow_help(observations, scale)
    top = params[0][0] if params else None
    module = top.module if top is not None else boundaries[0][0].module
    module_class = top.module_class if top is not None else boundaries[0][0].module_class
    yield _finding(
        "AMP505", message, locator.location(_class_of(observations, module_class)), help,
        module=module, scale=scale, suggested_scale=_suggested_scale(observations),
        parameters=[{"name": s.name, "module": s.module, "lost_share": share} for s, share in params],
        boundaries=[{"module": b.module, "lost_share": share} for b, share in boundaries],
    )


def _underflow_help(observations: Observations, scale: float) -> str:
    suggested = _suggested_scale(observations)
    config = observations.scalers[0] if observations.scalers else None
    if suggested is not None and suggested > scale:
        advice = (
            f"A loss scale of {format_scale(suggested)} would keep them (the largest gradient still "
            f"fits in float16 with 2x headroom)"
        )
        if config is None:
            advice += ": scale the loss with `torch.amp.GradScaler(device)`"
        elif config.init_scale < suggested or config.growth_interval > 10_000:
            advice += (
                f": your GradScaler(init_scale={config.init_scale:g}, growth_interval={config.growth_interval}) "
                "keeps the scale low; use the defaults"
            )
        return advice + "; bfloat16 autocast would keep them too."
    return (
        "The gradients span more than float16's range, so no single loss scale keeps them all: "
        "use bfloat16 autocast (float32's exponent range), or normalise the loss and layers."
    )


# -- AMP506: activations close to float16's max ------------------------------------------------


def activation_overflow_risk(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    limit = FLOAT16_MAX / thresholds.activation_headroom
    reported: set[float] = set()
    for stats in observations.activations.values():
        peak = stats.max_abs.get("float16")
        # A container returning its child's output shows the same peak: report the child only.
        if peak is None or peak <= limit or peak in reported:
            continue
        reported.add(peak)
        step = stats.max_abs_step["float16"]
        message = (
            f"float16 outputs of `{stats.module}` ({stats.module_class}) reached |x| = {peak:.6g} at "
            f"iteration {step}, {peak / FLOAT16_MAX:.0%} of float16's max {FLOAT16_MAX:g}."
        )
        help = (
            f"Keep `{stats.module}` in float32 (`torch.autocast(device, enabled=False)` around it), "
            "normalise its input or scale its weights down, or use bfloat16 autocast."
        )
        yield _finding(
            "AMP506", message, locator.location(_class_of(observations, stats.module_class)), help,
            step=step, module=stats.module, module_class=stats.module_class, max_abs=peak,
        )


# -- AMP507 / AMP508 / AMP509: op census -------------------------------------------------------


def _ops_by_module(observations: Observations, keep: Callable) -> dict[Optional[str], dict[str, int]]:
    grouped: dict[Optional[str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for key, count in observations.ops.items():
        if keep(key):
            grouped[key.module][key.op] += count
    return grouped


def _op_list(ops: dict[str, int]) -> str:
    return ", ".join(f"{op} ×{count}" for op, count in sorted(ops.items(), key=lambda item: -item[1]))


def _module_label(module: Optional[str], observations: Optional[Observations] = None) -> str:
    if not module:
        return "code outside any module"
    cls = _module_class(observations, module) if observations is not None else None
    return f"`{module}` ({cls})" if cls and cls != module else f"`{module}`"


def float32_matmul_in_autocast(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    grouped = _ops_by_module(
        observations,
        # Under an enabled region autocast casts float32 inputs itself, so float32 there is
        # torch's own choice (e.g. the CPU attention math path); the user's float32 shows up in
        # regions disabled inside an enabled one, and float64 anywhere autocast is on.
        lambda k: k.is_matmul and k.phase == "forward"
        and ((k.autocast == "disabled" and k.output_dtype in ("float32", "float64"))
             or (k.autocast == "on" and k.output_dtype == "float64")),
    )
    for module, ops in grouped.items():
        message = (
            f"{_module_label(module, observations)} ran matmul-class ops in float32 inside an autocast region "
            f"({_op_list(ops)} in {observations.op_steps or 1} recorded iteration(s)): no low-precision speed-up there."
        )
        help = (
            "If float32 is not needed here, drop the `autocast(enabled=False)` region or the "
            "`.float()`/`.double()` casts so autocast can run these ops in low precision."
        )
        yield _finding(
            "AMP507", message, _module_location(locator, observations, module), help,
            module=module, ops=dict(ops),
        )


def sensitive_op_in_low_precision(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    from .ops import SENSITIVE_OPS

    grouped = _ops_by_module(
        observations,
        lambda k: k.op in SENSITIVE_OPS and k.phase == "forward" and k.autocast != "on"
        and (k.output_dtype == "float16" or "float16" in k.input_dtypes),
    )
    for module, ops in grouped.items():
        message = (
            f"{_module_label(module, observations)} ran precision-sensitive ops in float16 with autocast off "
            f"({_op_list(ops)}): autocast would have kept them in float32; float16 loses their "
            "accuracy and range."
        )
        help = (
            "Do not make the model or its activations float16 by hand (`.half()`, `.to(torch.float16)`): "
            "keep float32 weights and run the forward under `torch.autocast(device, dtype=torch.float16)`, "
            "or cast these inputs back with `.float()`."
        )
        yield _finding(
            "AMP508", message, _module_location(locator, observations, module), help,
            module=module, ops=dict(ops),
        )


def forward_outside_autocast(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    if not observations.uses_scaler:
        return
    grouped = _ops_by_module(
        observations,
        lambda k: k.is_matmul and k.phase == "forward" and k.autocast == "off" and k.output_dtype == "float32",
    )
    if not grouped:
        return
    modules = list(grouped)
    total = sum(sum(ops.values()) for ops in grouped.values())
    listed = ", ".join(_module_label(m, observations) for m in modules[:6]) + (f" and {len(modules) - 6} more" if len(modules) > 6 else "")
    message = (
        f"a GradScaler scales the loss, but {total} matmul-class forward op(s) ran in float32 with "
        f"autocast off, in {listed}: the forward gets no mixed precision."
    )
    help = (
        "Run the model's forward inside the autocast region, not only the loss: "
        "`with torch.autocast(device, dtype=...): output = model(x); loss = criterion(output, y)`."
    )
    yield _finding(
        "AMP509", message, _module_location(locator, observations, modules[0]), help,
        module=modules[0], modules={str(m): sum(ops.values()) for m, ops in grouped.items()},
    )


# -- AMP510 --------------------------------------------------------------------------------------


def float16_without_scaler(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    if observations.float16_backward_calls == 0 or observations.uses_scaler or observations.untraced_scaler:
        return
    message = (
        f"{observations.float16_backward_calls} backward pass(es) ran through float16 autocast "
        "regions and no enabled GradScaler scaled the loss: float16 gradients below 2**-24 flush "
        "to zero."
    )
    lost = gradient_losses(observations, thresholds)
    if lost:
        message += f" Already {len(lost)} parameter(s) lose more than {thresholds.underflow_share:.0%} of their gradient."
    help = (
        "Create `scaler = torch.amp.GradScaler(device)` and use `scaler.scale(loss).backward()`, "
        "`scaler.step(optimizer)`, `scaler.update()`; or autocast to bfloat16, which needs no scaler."
    )
    yield _finding("AMP510", message, locator.location(), help, backward_calls=observations.float16_backward_calls)


RULES: tuple[Callable[[Observations, Thresholds, Locator], Iterator[Finding]], ...] = (
    loss_scale_collapse,
    frequent_skipped_steps,
    non_finite_loss,
    overflow_origin,
    backward_overflow_origin,
    underflow_prone_gradients,
    activation_overflow_risk,
    float32_matmul_in_autocast,
    sensitive_op_in_low_precision,
    forward_outside_autocast,
    float16_without_scaler,
)


def evaluate(observations: Observations, thresholds: Thresholds, locator: Locator) -> list[Finding]:
    from .placing import place_findings

    observations.name_origin_op()
    findings = [finding for rule in RULES for finding in rule(observations, thresholds, locator)]
    findings = place_findings(findings, observations, locator)
    return sorted(findings, key=lambda f: (-f.severity, f.code, f.extra.get("step") or 0))
