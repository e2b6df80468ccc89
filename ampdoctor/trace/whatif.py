"""``ampdoctor trace --what-if float16``: would float16 with a GradScaler work for this run?

The script runs unchanged. Every iteration, at the moment its gradients hold their true values
(where the session measures them), a histogram of the float32 exponent field of |g| per
parameter and max |g| are queued on the device and read in the iteration's one sync. A shadow
GradScaler with torch's state machine (``ShadowScaler``) is advanced on whether ``g * scale``
would overflow float16. Because the histogram bins are powers of two, the share of a gradient
that float16 would lose is known on the host for any power-of-two scale: the predicted one, and
the smallest one at which the gradient as a whole loses little (the ``init_scale`` to
recommend). "Lost" is AMP505's definition (``rules/underflow_rules.py``): below 2**-20 once scaled,
flushed to zero or kept with at most 4 significant bits; the subnormals from 2**-20 to 2**-14
keep 5 to 10 bits and are not lost. The share tolerated is AMP505's ``underflow_share``.
Module outputs beyond float16's range come from the activation measurements the session already
takes; the module where the overflow is born (output beyond 65504, inputs within) and the
smallest enclosing module whose output is back in range say what to keep in float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from ..float16 import FLOAT16_COARSE_SUBNORMAL, FLOAT16_MAX, FLOAT16_SMALLEST_NORMAL, FLOAT16_SMALLEST_SUBNORMAL
from .rulebase import Thresholds

if TYPE_CHECKING:
    import torch

    from .numerics import PendingIteration
    from .observations import IterationRecord

SAFE, SAFE_WITH_CHANGES, UNSAFE = "safe", "safe with changes", "unsafe"
UNKNOWN = "unknown"  # no optimizer step was traced and nothing overflowed: no evidence either way
# The share of the gradient's non-zero elements that may be lost at a scale before it "needs" a
# larger one: AMP505's threshold (``--threshold underflow_share=...`` changes both).
UNDERFLOW_TOLERANCE = Thresholds().underflow_share
_EXPONENT_BINS = 256


@dataclass
class ShadowScaler:
    """torch's GradScaler scale update (``_amp_update_scale_``) on host numbers."""

    scale: float = 2.0**16
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    growth_tracker: int = 0

    def update(self, found_inf: bool) -> None:
        if found_inf:
            self.scale *= self.backoff_factor
            self.growth_tracker = 0
            return
        successful = self.growth_tracker + 1
        if successful == self.growth_interval:
            grown = self.scale * self.growth_factor
            if math.isfinite(grown):
                self.scale = grown
            self.growth_tracker = 0
        else:
            self.growth_tracker = successful


def underflow_share(histogram: list[float], scale: float, floor: float = FLOAT16_COARSE_SUBNORMAL) -> float:
    """Share of the non-zero elements whose |g| * scale is below ``floor``, a power of two. By
    default AMP505's cut, 2**-20: what float16 flushes to zero or keeps with at most 4
    significant bits, the share lost; with 2**-24 (its smallest subnormal), what it flushes to
    zero. Exact for a power-of-two scale (bin edges are powers of two). The zeros of the run are
    left out: measured at the gradients' true values, they are not float16's doing."""
    nonzero = sum(histogram[1:255])
    if not nonzero:
        return 0.0
    # An element of exponent field e is below 2**(e - 126); it is under the floor for sure
    # when 2**(e - 126) * scale <= floor.
    limit = math.log2(floor) - math.log2(scale) + 126
    lost = sum(histogram[e] for e in range(1, 255) if e <= limit)
    return lost / nonzero


def needed_scale(histograms: dict[str, list[float]], tolerance: float = UNDERFLOW_TOLERANCE) -> float:
    """The smallest power of two at which at most ``tolerance`` of all non-zero gradient
    elements are lost in float16 (``underflow_share``: below 2**-20 once scaled, AMP505's
    definition). Over all parameters together, as AMP505 asks the whole model's share to be
    material: one parameter with negligible gradients (a saturated gate) must not demand a scale
    the others cannot take; the per-parameter shares are reported beside."""
    combined = [sum(bins) for bins in zip(*histograms.values())]
    exponent = -24
    while exponent < 127:
        scale = 2.0**exponent
        if underflow_share(combined, scale) <= tolerance:
            return scale
        exponent += 1
    return math.inf


@dataclass
class ParamWhatIf:
    name: str
    module: Optional[str]
    histogram: list[float] = field(default_factory=lambda: [0.0] * _EXPONENT_BINS)
    max_abs: float = 0.0
    # Per iteration, at that iteration's predicted scale (summed, then averaged): the share lost
    # as AMP505 counts it (below 2**-20 once scaled: flushed, or at most 4 significant bits)...
    lost_total: float = 0.0
    lost_worst: float = 0.0
    # ... the part of it flushed to zero (below 2**-24) ...
    underflow_total: float = 0.0
    underflow_worst: float = 0.0
    # ... and all elements below float16's normal range (2**-14), the subnormals that keep 5 to
    # 10 bits included (not lost; in the JSON report for the record).
    below_normal_total: float = 0.0
    iterations: int = 0

    @property
    def lost_mean(self) -> float:
        return self.lost_total / self.iterations if self.iterations else 0.0

    @property
    def below_normal_mean(self) -> float:
        return self.below_normal_total / self.iterations if self.iterations else 0.0

    @property
    def underflow_mean(self) -> float:
        return self.underflow_total / self.iterations if self.iterations else 0.0


@dataclass
class ActivationOverflow:
    module: str
    module_class: str
    max_abs: float
    step: int
    # The smallest enclosing module whose output stays within float16 (None: none does).
    contained_by: Optional[str] = None


@dataclass
class WhatIfResult:
    target: str
    verdict: str
    reasons: list[str]
    scale: list[float]
    skipped: list[int]
    real_scale: list[Optional[float]]
    real_skipped: list[int]
    params: list[ParamWhatIf]
    overflows: list[ActivationOverflow]
    needed_scale: Optional[float]
    keep_float32: list[str]
    init_scale: Optional[float]
    nonfinite_steps: list[int] = field(default_factory=list)
    # The share of gradient elements that may be lost at ``needed_scale`` (AMP505's threshold).
    tolerance: float = UNDERFLOW_TOLERANCE

    def to_dict(self) -> dict[str, Any]:
        from .compare.comparison import json_number

        return {
            "target": self.target,
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "scale": [json_number(s) for s in self.scale],
            "skipped": list(self.skipped),
            "real_scale": [json_number(s) for s in self.real_scale]
            if any(s is not None for s in self.real_scale)
            else None,
            "real_skipped": list(self.real_skipped),
            "needed_scale": json_number(self.needed_scale),
            "init_scale": self.init_scale,
            "keep_float32": list(self.keep_float32),
            "nonfinite_steps": list(self.nonfinite_steps),
            "gradients": [
                {
                    "name": p.name,
                    "module": p.module,
                    "max_abs": json_number(p.max_abs),
                    "lost_share": p.lost_mean,
                    "lost_worst": p.lost_worst,
                    "underflow_share": p.underflow_mean,
                    "underflow_worst": p.underflow_worst,
                    "below_normal_share": p.below_normal_mean,
                    "overflow_headroom": json_number(FLOAT16_MAX / p.max_abs) if p.max_abs else None,
                }
                for p in self.params
            ],
            "activation_overflows": [
                {
                    "module": o.module,
                    "module_class": o.module_class,
                    "max_abs": json_number(o.max_abs),
                    "step": o.step,
                    "contained_by": o.contained_by,
                }
                for o in self.overflows
            ],
        }


class WhatIfFloat16:
    """Installed on a ``TraceSession`` before it is entered; ``result()`` after the run."""

    def __init__(self, session: Any) -> None:
        self.session = session
        thresholds = getattr(session, "thresholds", None)
        self.tolerance = thresholds.underflow_share if thresholds is not None else UNDERFLOW_TOLERANCE
        self.shadow = ShadowScaler()
        self.scale_trajectory: list[float] = []
        self.skipped: list[int] = []
        self.real_scale: list[Optional[float]] = []
        self.real_skipped: list[int] = []
        self.params: dict[str, ParamWhatIf] = {}
        self.overflows: dict[str, ActivationOverflow] = {}
        self._outputs: dict[str, float] = {}  # per module, the largest output |x| seen
        # Iterations whose gradients or loss were already inf/NaN in the run itself.
        self.nonfinite_steps: list[int] = []
        self._failed = False
        # The what-if measurements of each gradient capture are queued beside the session's own
        # (same moment, same sync).
        session.gradient_listeners.append(self.capture)
        session.pending_readers.append(self._read)

    # -- on the device, at the gradient capture ---------------------------------------------------

    def capture(self, optimizer: Any, label: str, scale: Optional[torch.Tensor], grads_scaled: bool) -> None:
        if self._failed:
            return
        import torch

        from .ops import quiet

        try:
            with torch.no_grad(), quiet():
                rows = []
                for info, grad in self.session.gradients_of(optimizer, label):
                    magnitude = grad.abs().to(torch.float32)
                    if grads_scaled and scale is not None:
                        magnitude = magnitude / scale.to(magnitude.device)
                    exponents = (magnitude.view(torch.int32) >> 23).reshape(-1).to(torch.int64)
                    histogram = torch.bincount(exponents, minlength=_EXPONENT_BINS).to(torch.float32)
                    top = torch.nan_to_num(magnitude, nan=math.inf).amax().reshape(1)
                    rows.append((info, self.session.pending.batch.add(torch.cat([histogram, top]))))
            pending = self.session.pending
            if not hasattr(pending, "what_if_rows"):
                pending.what_if_rows = []
            pending.what_if_rows.extend(rows)
        except Exception as exc:  # never break the script
            self._failed = True
            self.session.instrument_failed("what-if gradient statistics", exc)

    # -- on the host, after the iteration's sync ---------------------------------------------------

    def _read(self, pending: PendingIteration, values: list[Any], record: Optional[IterationRecord]) -> None:
        if self._failed:
            return
        try:
            self._absorb(pending, values, record)
        except Exception as exc:  # runs inside the script's optimizer step: must never raise
            self._failed = True
            self.session.instrument_failed("what-if prediction", exc)

    def _absorb(self, pending: PendingIteration, values: list[Any], record: Optional[IterationRecord]) -> None:
        self._read_activations(pending, values, record)
        if record is None:
            return
        scale = self.shadow.scale
        nonfinite = record.loss is not None and not math.isfinite(record.loss)
        overflow = nonfinite
        for info, slot in getattr(pending, "what_if_rows", []):
            row = values[slot]
            histogram, top = row[:_EXPONENT_BINS], row[_EXPONENT_BINS]
            stats = self.params.get(info.name)
            if stats is None:
                stats = self.params[info.name] = ParamWhatIf(info.name, info.module.path if info.module else None)
            for index, count in enumerate(histogram):
                stats.histogram[index] += count
            if math.isfinite(top):
                stats.max_abs = max(stats.max_abs, top)
            nonfinite = nonfinite or not math.isfinite(top)
            if not math.isfinite(top) or top * scale > FLOAT16_MAX:
                overflow = True
            lost = underflow_share(histogram, scale)
            stats.lost_total += lost
            stats.lost_worst = max(stats.lost_worst, lost)
            flushed = underflow_share(histogram, scale, FLOAT16_SMALLEST_SUBNORMAL)
            stats.underflow_total += flushed
            stats.underflow_worst = max(stats.underflow_worst, flushed)
            stats.below_normal_total += underflow_share(histogram, scale, FLOAT16_SMALLEST_NORMAL)
            stats.iterations += 1
        self.scale_trajectory.append(scale)
        if nonfinite:
            self.nonfinite_steps.append(record.step)
        if overflow:
            self.skipped.append(record.step)
        self.shadow.update(overflow)
        self.real_scale.append(record.scale)
        if record.skipped:
            self.real_skipped.append(record.step)

    def _read_activations(
        self, pending: PendingIteration, values: list[Any], record: Optional[IterationRecord]
    ) -> None:
        step = record.step if record is not None else None
        for row in pending.activations:
            output = values[row.output_slot][0]
            path = row.module.path
            if math.isfinite(output):
                self._outputs[path] = max(self._outputs.get(path, 0.0), output)
            if not output > FLOAT16_MAX:  # NaN too: a non-finite run is its own finding
                continue
            given = values[row.input_slot][0] if row.input_slot is not None else 0.0
            if given > FLOAT16_MAX:
                continue  # carried in from an earlier module, not born here
            known = self.overflows.get(path)
            if known is None:
                self.overflows[path] = ActivationOverflow(path, row.module.class_name, output, step or 0)
            elif output > known.max_abs:
                known.max_abs = output

    # -- the verdict -----------------------------------------------------------------------------

    def result(self) -> WhatIfResult:
        reasons: list[str] = []
        unsafe = changes = False
        keep: list[str] = []
        for overflow in self._born_overflows():
            overflow.contained_by = self._container(overflow.module)
            where = f"{overflow.module} ({overflow.module_class})"
            if overflow.contained_by is None:
                unsafe = True
                reasons.append(
                    f"{where} outputs |x| up to {overflow.max_abs:.4g} > 65504 (iteration {overflow.step}) and "
                    "the values stay beyond float16's range up to the model's output: float16 would "
                    "make them inf"
                )
            else:
                changes = True
                if overflow.contained_by not in keep:
                    keep.append(overflow.contained_by)
                reasons.append(
                    f"{where} outputs |x| up to {overflow.max_abs:.4g} > 65504: keep {overflow.contained_by} "
                    "in float32 (torch.autocast(..., enabled=False) around it, inputs cast with .float())"
                )
        steps = len(self.scale_trajectory)
        if steps and len(self.nonfinite_steps) > steps / 4:
            unsafe = True
            reasons.append(
                f"the run itself has inf/NaN loss or gradients in {len(self.nonfinite_steps)} of {steps} "
                f"iterations (first at {self.nonfinite_steps[0]}): no loss scale helps; see the findings"
            )
        histograms = {name: p.histogram for name, p in self.params.items()}
        needed = needed_scale(histograms, self.tolerance) if histograms else None
        ceiling = max((p.max_abs for p in self.params.values()), default=0.0)
        init_scale = None
        # The largest power-of-two scale at which the largest gradient still fits float16.
        top_scale = 2.0 ** math.floor(math.log2(FLOAT16_MAX / ceiling)) if ceiling > 0 else math.inf
        if unsafe and self.nonfinite_steps:
            pass  # the scale advice below would rest on inf/NaN gradients
        elif needed is not None and needed > top_scale:
            unsafe = True
            reasons.append(
                f"gradients need a scale of at least {_power(needed)} so that at most {self.tolerance:.0%} of "
                f"them {_LOST}, but max |g| = {ceiling:.4g} overflows float16 above {_power(top_scale)}"
            )
        elif steps and len(self.skipped) > steps / 4 and math.isfinite(top_scale):
            changes = True
            init_scale = top_scale
            reasons.append(
                f"max |g| = {ceiling:.4g} overflows float16 at the default scale 2**16: start lower, "
                f"GradScaler(init_scale={top_scale:g}) (any scale from {_power(needed or top_scale)} "
                f"to {_power(top_scale)} keeps the gradients in range)"
            )
        elif needed is not None and math.isfinite(needed) and needed > self._settled_scale():
            changes = True
            init_scale = needed
            reasons.append(
                f"gradients need a scale of at least {_power(needed)} so that at most {self.tolerance:.0%} of "
                f"them {_LOST} (the default scaler would run at {_power(self._settled_scale())}): "
                f"GradScaler(init_scale={needed:g})"
            )
        real = [value for value in self.real_scale if value is not None]
        if real and needed is not None and math.isfinite(needed) and real[-1] < needed:
            reasons.append(
                f"this run's own GradScaler ends at {_power(real[-1])}, below the {_power(needed)} its gradients "
                "need in float16; the shadow (torch's defaults) does not"
            )
        if self.skipped:
            reasons.append(
                f"the shadow scaler skips {len(self.skipped)} of {len(self.scale_trajectory)} steps "
                f"(first at iteration {self.skipped[0]})"
            )
        if not self.scale_trajectory:
            reasons.append("no optimizer step was traced: nothing to predict from the gradients")
        if self._failed:
            reasons.append("the what-if measurements stopped early (see the notes): the prediction is partial")
        verdict = UNSAFE if unsafe else SAFE_WITH_CHANGES if changes else SAFE if self.scale_trajectory else UNKNOWN
        if verdict == SAFE and self.scale_trajectory:
            reasons.insert(0, "no activation beyond 65504 and the gradients fit float16 at the predicted scale")
        params = sorted(self.params.values(), key=lambda p: (-p.lost_mean, -p.underflow_mean))
        return WhatIfResult(
            "float16",
            verdict,
            reasons,
            list(self.scale_trajectory),
            list(self.skipped),
            list(self.real_scale),
            list(self.real_skipped),
            params,
            list(self.overflows.values()),
            needed,
            keep,
            init_scale,
            list(self.nonfinite_steps),
            self.tolerance,
        )

    def _born_overflows(self) -> list[ActivationOverflow]:
        """Overflows of modules that enclose no other overflowing module: a container's output
        is its last child's, and its input check cannot see inside it. The root module's path
        is its class name, so it encloses every other path."""
        found = list(self.overflows.values())

        def encloses(outer: ActivationOverflow) -> bool:
            is_root = "." not in outer.module and outer.module == outer.module_class
            return any(
                other is not outer and (other.module.startswith(outer.module + ".") or is_root) for other in found
            )

        born = [o for o in found if not encloses(o)]
        self.overflows = {o.module: o for o in born}
        return born

    def _settled_scale(self) -> float:
        return self.scale_trajectory[-1] if self.scale_trajectory else self.shadow.scale

    def _container(self, module: str) -> Optional[str]:
        """The smallest module enclosing ``module`` (itself excluded) whose output is within
        float16's range; None when none is."""
        parts = module.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            parent = ".".join(parts[:cut])
            if parent in self._outputs and self._outputs[parent] <= FLOAT16_MAX:
                return parent
        # Only the whole model (whose path is its class name) would hold it: that is no float16.
        return None


# What float16 loses, in AMP505's words.
_LOST = "flush to zero or keep at most 4 significant bits (below 2**-20) once scaled"


def _power(scale: float) -> str:
    if scale > 0 and math.isfinite(scale) and math.log2(scale).is_integer():
        return f"2**{int(math.log2(scale))}"
    return f"{scale:g}"
