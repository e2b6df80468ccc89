"""AMP505 (gradients underflow float16 at the loss scale) and AMP510 (float16 backward without a
GradScaler), and the share of a gradient that float16 loses, which the reports show too."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from typing import Optional

from ...findings import Finding
from ...float16 import FLOAT16_MAX
from ..observations import GradientStats, Observations
from ..rulebase import Locator, Thresholds, class_of, format_scale, make_finding, rule


def lost_share(zero: float, below_subnormal: float, coarse_subnormal: float, thresholds: Thresholds) -> float:
    """Share of elements float16 loses at the loss scale: below 2**-24 (flushed to zero), the
    coarse subnormals from 2**-24 to 2**-20 (at most 4 significant bits left, a rounding error
    over 2**-5 of the value), and the zeros when that coarse band is populated (evidence that
    the values reach down to where float16 flushes, so that the zeros flushed there rather than
    being structural). The subnormals from 2**-20 to 2**-14 keep 5 to 10 bits: not lost."""
    evidenced_zeros = zero if coarse_subnormal >= thresholds.underflow_evidence else 0.0
    return below_subnormal + coarse_subnormal + evidenced_zeros


def stats_lost_share(stats: GradientStats, thresholds: Thresholds) -> float:
    """``lost_share`` of a parameter's mean shares."""
    return lost_share(stats.mean("zero"), stats.mean("below_subnormal"), stats.mean("coarse_subnormal"), thresholds)


def float16_gradients(observations: Observations) -> bool:
    """Gradients went through float16: float16 autocast, or float16 parameters."""
    if any(dtype == "float16" for _, dtype in observations.autocast_dtypes):
        return True
    return any(g.dtype == "float16" for g in observations.gradients.values())


def gradient_losses(observations: Observations, thresholds: Thresholds) -> list[tuple[GradientStats, float]]:
    ranked = []
    for stats in observations.gradients.values():
        share = stats_lost_share(stats, thresholds)
        if share > thresholds.underflow_share:
            ranked.append((stats, share))
    return sorted(ranked, key=lambda item: -item[1])


_DEFAULT_INIT_SCALE = 2.0**16
_DEFAULT_GROWTH_INTERVAL = 2000


def _model_share(observations: Observations, params: list[tuple[GradientStats, float]]) -> float:
    """The share of all the model's gradient elements that the flagged parameters lose."""
    total = sum(math.prod(stats.shape) for stats in observations.gradients.values())
    lost = sum(share * math.prod(stats.shape) for stats, share in params)
    return lost / total if total else 0.0


def _boundary_share(observations: Observations) -> float:
    """The share of all the float16 gradient elements measured at module outputs that are lost."""
    total = sum(b.numel for b in observations.boundaries.values())
    lost = sum(b.coarse_subnormal for b in observations.boundaries.values())
    return lost / total if total else 0.0


def _suggested_scale(observations: Observations) -> Optional[float]:
    """The largest power of two that keeps the largest gradient at half float16's max."""
    largest = max((g.max_abs for g in observations.gradients.values()), default=0.0)
    if largest <= 0:
        return None
    return 2.0 ** math.floor(math.log2(FLOAT16_MAX / 2 / largest))


@rule("AMP505")
def underflow_prone_gradients(
    observations: Observations, thresholds: Thresholds, locator: Locator
) -> Iterator[Finding]:
    if not float16_gradients(observations):
        return
    params = gradient_losses(observations, thresholds)
    if _model_share(observations, params) <= thresholds.underflow_share:
        # A few elements of a small tensor (a bias whose gradient is rounding noise, such as the
        # key bias of attention, which softmax ignores) are not the model's gradients underflowing.
        params = []
    # At module boundaries the gradients are float16 values already, and zeros are mostly the
    # inactive units of a following ReLU: only the measured coarse subnormals count there. As
    # for parameters, a few modules losing a little (the query and key gradients of attention at
    # random initialisation) are not the model's gradients underflowing: they count when the
    # share lost over all the measured boundaries is material too.
    boundaries = sorted(
        ((b, b.coarse_subnormal_share) for b in observations.boundaries.values()),
        key=lambda item: -item[1],
    )
    if _boundary_share(observations) <= thresholds.underflow_share:
        boundaries = []
    boundaries = [(b, share) for b, share in boundaries if share > thresholds.underflow_share]
    if not params and not boundaries:
        return
    scale = next((r.scale for r in reversed(observations.iterations) if r.scale is not None), 1.0)
    parts = []
    if params:
        named = ", ".join(f"`{s.name}` {share:.0%}" for s, share in params[:5])
        parts.append(
            f"{len(params)} parameter gradient(s) flush to zero or keep at most 4 significant bits "
            f"(below 2**-24 or 2**-20) once scaled: {named}"
        )
    if boundaries:
        named = ", ".join(f"`{b.module}` {share:.0%}" for b, share in boundaries[:3])
        parts.append(
            f"float16 gradients reaching {len(boundaries)} module output(s) keep at most 4 significant bits "
            f"(nonzero below 2**-20): {named}"
        )
    message = f"gradients underflow float16 at loss scale {format_scale(scale)}; " + "; ".join(parts) + "."
    help = _underflow_help(observations, scale)
    top = params[0][0] if params else None
    module = top.module if top is not None else boundaries[0][0].module
    module_class = top.module_class if top is not None else boundaries[0][0].module_class
    yield make_finding(
        "AMP505",
        message,
        locator.location(class_of(observations, module_class)),
        help,
        module=module,
        scale=scale,
        suggested_scale=_suggested_scale(observations),
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
        elif config.init_scale < _DEFAULT_INIT_SCALE or config.growth_interval > _DEFAULT_GROWTH_INTERVAL:
            advice += (
                f": your GradScaler(init_scale={config.init_scale:g}, growth_interval={config.growth_interval}) "
                "keeps the scale low; the defaults (init_scale=65536, growth_interval=2000) let it grow"
            )
        else:
            advice += (
                f": GradScaler doubles the scale by itself after every {config.growth_interval} steps "
                f"without overflow; to start there, `GradScaler(init_scale={suggested:g})`"
            )
        return advice + "; bfloat16 autocast would keep them too."
    return (
        "The gradients span more than float16's range, so no single loss scale keeps them all: "
        "use bfloat16 autocast (float32's exponent range), or normalise the loss and layers."
    )


@rule("AMP510")
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
        message += (
            f" Already {len(lost)} parameter(s) lose more than {thresholds.underflow_share:.0%} of their gradient."
        )
    help = (
        "Create `scaler = torch.amp.GradScaler(device)` and use `scaler.scale(loss).backward()`, "
        "`scaler.step(optimizer)`, `scaler.update()`; or autocast to bfloat16, which needs no scaler."
    )
    at = _where_float16_starts(observations)
    if at is not None and "transformers" in sys.modules:
        # The Trainer ran the backward: its own mixed precision brings the scaler.
        help = (
            "Remove this autocast region and let the Trainer do mixed precision: "
            "`TrainingArguments(fp16=True)` (it then makes and steps the GradScaler) or `bf16=True`. " + help
        )
    yield make_finding(
        "AMP510",
        message,
        locator.location(),
        help,
        backward_calls=observations.float16_backward_calls,
        at=at,
    )


def _where_float16_starts(observations: Observations) -> Optional[tuple[str, int]]:
    """The backward call when the user's code makes it (placing.py points there); when a
    framework does (the user's frame is `trainer.train()`), the float16 autocast region."""
    import linecache

    site = observations.backward_site
    if site is not None and "backward" in linecache.getline(site[0], site[1]):
        return None
    return observations.float16_autocast_site
