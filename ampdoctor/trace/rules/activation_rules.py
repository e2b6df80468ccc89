"""AMP506: float16 activations close to float16's largest value."""

from __future__ import annotations

from collections.abc import Iterator

from ...findings import Finding
from ...float16 import FLOAT16_MAX
from ..observations import Observations
from ..rulebase import Locator, Thresholds, class_of, make_finding, rule


@rule("AMP506")
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
        yield make_finding(
            "AMP506",
            message,
            locator.location(class_of(observations, stats.module_class)),
            help,
            step=step,
            module=stats.module,
            module_class=stats.module_class,
            max_abs=peak,
        )
