"""What a trace session saw, as plain Python numbers: the input of the runtime rules.

Nothing here refers to a tensor or a module. ``Observations.absorb`` turns the values read in an
iteration's one host sync into per-iteration records and running aggregates.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from .backward import BackwardOrigin, find_origin, produced_maxima
from .numerics import GRADIENT_SHARES, ModuleInfo, ParamInfo, PendingIteration

if TYPE_CHECKING:
    from .ops import GemmKey, OpKey
    from .protocol import ProtocolEvent


@dataclass
class CastStats:
    """What the float8 casts of one operand role of one module lost (summed over the recorded
    iterations): ``nonzero`` values cast, ``flushed`` of them that became zero, the float8
    ``dtype``, the scaling ``granularity``, the casts whose scale was not usable, the casts of an
    all-zero operand, the values flushed under the amax floor and the values the scale took
    beyond the format's maximum."""

    dtype: str
    granularity: str
    casts: int = 0
    nonzero: int = 0
    flushed: int = 0
    # Casts whose scale was NaN (the operand held a NaN) or zero (it held an inf, so its amax
    # was inf): the cast turns the scale's whole group (tensor or row) into NaN or zero.
    nonfinite_scales: int = 0
    # Casts of an operand with no non-zero value (amax 0): torchao's scale then stops at its
    # ceiling, the format's maximum over its amax floor (1e-12), and the GEMM multiplies zeros.
    zero_casts: int = 0
    # Non-zero values flushed in groups whose amax was under that floor: the scale stopped at
    # its ceiling, too small for them whatever the granularity (counted in ``flushed`` too).
    floored: int = 0
    # When the first cast with an unusable scale came, counted over all float8 casts of the run
    # (None: none came): the first is where the inf or NaN entered float8.
    first_unusable: Optional[int] = None
    # Values beyond the format's largest magnitude once scaled (448 for e4m3, 57344 for e5m2),
    # which the cast clips to it. A dynamic scale maps each group's largest value to the maximum
    # itself, so none are clipped; a scale from elsewhere (delayed, static) can clip many.
    clipped: int = 0

    @property
    def flushed_share(self) -> float:
        return self.flushed / self.nonzero if self.nonzero else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "dtype": self.dtype,
            "granularity": self.granularity,
            "casts": self.casts,
            "nonzero": self.nonzero,
            "flushed": self.flushed,
            "nonfinite_scales": self.nonfinite_scales,
            "zero_casts": self.zero_casts,
            "floored": self.floored,
            "clipped": self.clipped,
        }


@dataclass
class ShadowStats:
    """How far a float8 layer's forward output was from the same layer computed in float32 from
    the same high-precision input and weight, over its recorded forwards: per output row (a token,
    a sample), the norm of the difference over the norm of the float32 row, summed over ``rows``.
    Per row, because one outlier's row would otherwise outweigh all the rows it ruined."""

    forwards: int = 0
    rows: int = 0
    error_sum: float = 0.0

    @property
    def relative_error(self) -> Optional[float]:
        """The mean relative error of an output row."""
        return self.error_sum / self.rows if self.rows else None


# (module, role) -> what its casts lost; role: "input", "weight" or "grad_output".
CastKey = tuple[Optional[str], str]
# (module, phase, first operand's shape, second operand's shape) of a float8 GEMM.
Float8GemmKey = tuple[Optional[str], str, tuple[int, ...], tuple[int, ...]]


@dataclass
class IterationRecord:
    step: int
    # The loss scale this iteration's backward used, and the scale update() left; None without
    # an enabled GradScaler.
    scale: Optional[float] = None
    scale_after: Optional[float] = None
    skipped: bool = False
    found_inf: dict[str, float] = field(default_factory=dict)
    # Sum of the losses back-propagated in the iteration (unscaled); None if none was seen.
    loss: Optional[float] = None
    # The first parameters whose gradient held inf/NaN this iteration.
    nonfinite_params: list[str] = field(default_factory=list)

    @property
    def scale_event(self) -> Optional[str]:
        if self.scale is None or self.scale_after is None or self.scale_after == self.scale:
            return None
        return "growth" if self.scale_after > self.scale else "backoff"


@dataclass
class GradientStats:
    """One parameter's gradient over the traced iterations. Shares are fractions of elements.

    ``iterations`` counts the iterations in which the parameter had a gradient: on each, whether
    it held inf/NaN is known (``first_nonfinite_step``). The shares (``totals``, ``worst``, the
    means) and ``max_abs`` come from the ``sampled_iterations`` among them, those with the full
    statistics (see ``TraceSession``'s ``gradient_interval``).
    """

    name: str
    module: Optional[str]
    module_class: Optional[str]
    shape: tuple[int, ...]
    dtype: str
    iterations: int = 0
    sampled_iterations: int = 0
    totals: dict[str, float] = field(default_factory=lambda: dict.fromkeys(GRADIENT_SHARES, 0.0))
    worst: dict[str, float] = field(default_factory=lambda: dict.fromkeys(GRADIENT_SHARES, 0.0))
    max_abs: float = 0.0
    # Shares measured on iterations whose step was applied (skipped steps hold inf/NaN).
    healthy_iterations: int = 0
    healthy_totals: dict[str, float] = field(default_factory=lambda: dict.fromkeys(GRADIENT_SHARES, 0.0))
    last_scale: Optional[float] = None
    first_nonfinite_step: Optional[int] = None
    # (step, shares) of the latest sampled iteration, for listeners such as TensorBoard.
    last_sampled: Optional[tuple[int, dict[str, float]]] = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def mean(self, name: str) -> float:
        """Mean share over the sampled iterations whose step was applied (over all sampled
        iterations if none was applied)."""
        if self.healthy_iterations:
            return self.healthy_totals[name] / self.healthy_iterations
        return self.totals[name] / self.sampled_iterations if self.sampled_iterations else 0.0

    def add(self, values: list[float], step: int, skipped: bool, scale: Optional[float]) -> None:
        """A sampled iteration: the ``gradient_row`` values."""
        shares = dict(zip(GRADIENT_SHARES, values))
        self.iterations += 1
        self.sampled_iterations += 1
        for name, share in shares.items():
            self.totals[name] += share
            self.worst[name] = max(self.worst[name], share)
        if not skipped:
            self.healthy_iterations += 1
            for name, share in shares.items():
                self.healthy_totals[name] += share
        maximum = values[len(GRADIENT_SHARES)]
        if math.isfinite(maximum):
            self.max_abs = max(self.max_abs, maximum)
        if shares["nonfinite"] > 0 and self.first_nonfinite_step is None:
            self.first_nonfinite_step = step
        self.last_scale = scale
        self.last_sampled = (step, shares)

    def add_check(self, nonfinite: bool, step: int, scale: Optional[float]) -> None:
        """An iteration without the full statistics: whether the gradient held inf/NaN."""
        self.iterations += 1
        if nonfinite and self.first_nonfinite_step is None:
            self.first_nonfinite_step = step
        self.last_scale = scale


@dataclass
class ActivationStats:
    module: str
    module_class: str
    calls: int = 0
    # Largest finite |output| per output dtype.
    max_abs: dict[str, float] = field(default_factory=dict)
    max_abs_step: dict[str, int] = field(default_factory=dict)
    first_nonfinite_step: Optional[int] = None


@dataclass
class BoundaryStats:
    """float16 gradients reaching a module's outputs (op-recording window only)."""

    module: str
    module_class: str
    numel: float = 0.0
    zero: float = 0.0
    subnormal: float = 0.0
    # Nonzero below 2**-20 (part of the subnormals): at most 4 significant bits left.
    coarse_subnormal: float = 0.0

    @property
    def zero_share(self) -> float:
        return self.zero / self.numel if self.numel else 0.0

    @property
    def subnormal_share(self) -> float:
        return self.subnormal / self.numel if self.numel else 0.0

    @property
    def coarse_subnormal_share(self) -> float:
        return self.coarse_subnormal / self.numel if self.numel else 0.0


@dataclass
class Origin:
    """Where the first non-finite activation appeared."""

    step: int
    module: str
    module_class: str
    cls: type
    input_max: Optional[float]
    op: Optional[str] = None
    op_input_max: Optional[float] = None


@dataclass
class ScalerConfig:
    device: str
    init_scale: float
    growth_factor: float
    backoff_factor: float
    growth_interval: int


@dataclass
class Observations:
    iterations: list[IterationRecord] = field(default_factory=list)
    gradients: dict[str, GradientStats] = field(default_factory=dict)
    activations: dict[str, ActivationStats] = field(default_factory=dict)
    boundaries: dict[str, BoundaryStats] = field(default_factory=dict)
    origin: Optional[Origin] = None
    # The first module whose backward made a finite gradient inf/NaN (see backward.py), and per
    # module the largest unscaled gradient it produced on watched iterations without overflow.
    backward_origin: Optional[BackwardOrigin] = None
    backward_reference: dict[str, float] = field(default_factory=dict)
    # Skipped steps whose forward pass and loss were finite: overflows born in the backward.
    backward_skips: int = 0
    ops: Counter[OpKey] = field(default_factory=Counter)
    op_ranges: dict[tuple[Optional[str], str], tuple[float, float]] = field(default_factory=dict)
    op_steps: int = 0
    # Matmul-class ops of the census by (module, op, phase, output dtype, input shapes).
    gemms: Counter[GemmKey] = field(default_factory=Counter)
    autocast_dtypes: set[tuple[str, str]] = field(default_factory=set)
    backward_calls: int = 0
    # Backward calls with a float16 autocast region entered since the previous backward.
    float16_backward_calls: int = 0
    scalers: list[ScalerConfig] = field(default_factory=list)
    scaler_steps: int = 0
    plain_optimizer_steps: int = 0
    optimizers: list[str] = field(default_factory=list)
    class_files: dict[type, Optional[str]] = field(default_factory=dict)
    # Losses and activations of an iteration that never reached its step (crash, interrupt).
    unfinished_loss: Optional[float] = None
    # A GradScaler created before the session stepped an optimizer (its scale is not observed).
    untraced_scaler: bool = False
    # Instruments that removed themselves after an error (the report says what is missing).
    instrument_errors: list[str] = field(default_factory=list)
    # torch.compile was called: the op census stopped there (it cannot see into compiled graphs).
    compiled: bool = False
    # (file, line) in the user's code: per (module, op, output dtype) the forward statement that
    # issued the op (op-recording iterations), the first `scaler.step(...)` and backward calls.
    op_sites: dict[tuple[Optional[str], str, Optional[str]], tuple[str, int]] = field(default_factory=dict)
    step_site: Optional[tuple[str, int]] = None
    backward_site: Optional[tuple[str, int]] = None
    # Gradient shares and max |g| are measured on the first iterations (the op-recording window,
    # at least one) and then on every ``gradient_interval``-th; inf/NaN on every iteration.
    gradient_interval: int = 1
    # The user's statement that first entered a float16 autocast region (AMP510 points there).
    float16_autocast_site: Optional[tuple[str, int]] = None
    # dtype name -> where the script first entered an autocast region of that dtype with
    # gradients on (the training step's region: an evaluation pass under no_grad is not it).
    autocast_sites: dict[str, tuple[str, int]] = field(default_factory=dict)
    # How the script failed, when it raised: ("Type: message", the user's innermost line).
    script_error: Optional[tuple[str, Optional[tuple[str, int]]]] = None
    # Per module path, the user's statement that called the module (its first call).
    call_sites: dict[str, Optional[tuple[str, int]]] = field(default_factory=dict)
    # GradScaler protocol mistakes seen as they happened (protocol.ProtocolEvent), lint's codes.
    protocol_events: list[ProtocolEvent] = field(default_factory=list)
    # torchao float8 training, in the op-recording iterations (float8.py): per (module, operand
    # role) what its casts flushed to zero, and the float8 GEMMs by (module, phase, shapes).
    float8_casts: dict[CastKey, CastStats] = field(default_factory=dict)
    float8_gemms: Counter[Float8GemmKey] = field(default_factory=Counter)
    # The last module with weights to finish its forward before the first recorded backward.
    float8_last_layer: Optional[str] = None
    # Per float8 layer, its forward output against a float32 computation of it (float8.py).
    float8_shadows: dict[Optional[str], ShadowStats] = field(default_factory=dict)
    # MXFP8 training layers whose bias took no part in their output (mx_watch.py).
    mx_bias_dropped: list[str] = field(default_factory=list)
    # The MX cast that refused its operand (a size not a multiple of the block): the layer and
    # the operand's shape.
    mx_refused: Optional[tuple[Optional[str], tuple[int, ...]]] = None
    # Where the first MXFP8 training GEMM ran: (device type, device index, torchao's kernel
    # preference by name: "AUTO", "EMULATED" ...).
    mx_device: Optional[tuple[str, Optional[int], str]] = None
    # The training code imported torchao's float8 training (by the end of the recorded iterations).
    float8_imported: bool = False
    # Each torchao conversion: (the user's statement, nn.Linear layers before, float8 layers after).
    float8_conversions: list[tuple[Optional[tuple[str, int]], int, int]] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return len(self.iterations)

    @property
    def uses_scaler(self) -> bool:
        """An enabled GradScaler scaled a loss."""
        return bool(self.scalers)

    @property
    def autocast_used(self) -> bool:
        return bool(self.autocast_dtypes)

    @property
    def stepped(self) -> bool:
        return self.scaler_steps > 0 or self.plain_optimizer_steps > 0

    def absorb(
        self, pending: PendingIteration, values: list[list[float]], record: Optional[IterationRecord], step: int
    ) -> None:
        """Fold one iteration's device values into the records; ``record`` is None for the
        activations of an unfinished iteration (or of a script that never steps)."""
        losses = [values[slot][0] for slot in pending.loss_slots]
        if record is not None:
            self._fill_record(record, pending, values, losses)
            self.iterations.append(record)
            self._absorb_gradients(pending, values, record)
        elif losses:
            self.unfinished_loss = sum(losses)
        forward_finite = self._absorb_activations(pending, values, step)
        self._absorb_boundaries(pending, values)
        if record is not None:
            loss_finite = record.loss is None or math.isfinite(record.loss)
            if record.skipped and forward_finite and loss_finite:
                self.backward_skips += 1
            if pending.backward:
                self._absorb_backward(pending, values, record, forward_finite and loss_finite)

    def _fill_record(
        self, record: IterationRecord, pending: PendingIteration, values: list[list[float]], losses: list[float]
    ) -> None:
        record.loss = sum(losses) if losses else None
        if pending.scale_slots is not None:
            before, after = pending.scale_slots
            record.scale, record.scale_after = values[before][0], values[after][0]
        elif pending.used_scale_slot is not None:
            record.scale = values[pending.used_scale_slot][0]
        for label, slot in pending.found_inf_slots:
            record.found_inf[label] = record.found_inf.get(label, 0.0) + values[slot][0]
        record.skipped = any(v > 0 for v in record.found_inf.values())

    def _absorb_gradients(self, pending: PendingIteration, values: list[list[float]], record: IterationRecord) -> None:
        rows = [row for capture in pending.gradients for row in capture.rows(values)]
        for info, row in rows:
            self._gradient_stats(info).add(row, record.step, record.skipped, record.scale)
            if row[3] > 0 and len(record.nonfinite_params) < 5:
                record.nonfinite_params.append(info.name)
        for capture in pending.gradient_checks:
            for info, nonfinite in capture.nonfinite(values):
                self._gradient_stats(info).add_check(nonfinite, record.step, record.scale)
                if nonfinite and len(record.nonfinite_params) < 5:
                    record.nonfinite_params.append(info.name)

    def _gradient_stats(self, info: ParamInfo) -> GradientStats:
        stats = self.gradients.get(info.name)
        if stats is None:
            module = info.module
            stats = GradientStats(
                info.name,
                module.path if module else None,
                module.class_name if module else None,
                info.shape,
                info.dtype,
            )
            self.gradients[info.name] = stats
        return stats

    def _absorb_activations(self, pending: PendingIteration, values: list[list[float]], step: int) -> bool:
        """Fold in the activation ranges; whether every module output was finite."""
        all_finite = True
        for row in pending.activations:
            info: ModuleInfo = row.module
            stats = self.activations.get(info.path)
            if stats is None:
                stats = self.activations[info.path] = ActivationStats(info.path, info.class_name)
            stats.calls += 1
            output_max = values[row.output_slot][0]
            input_max = values[row.input_slot][0] if row.input_slot is not None else None
            if math.isfinite(output_max):
                if output_max > stats.max_abs.get(row.dtype, -1.0):
                    stats.max_abs[row.dtype] = output_max
                    stats.max_abs_step[row.dtype] = step
                continue
            all_finite = False
            if stats.first_nonfinite_step is None:
                stats.first_nonfinite_step = step
            inputs_finite = input_max is None or math.isfinite(input_max)
            if self.origin is None and inputs_finite:
                self.origin = Origin(step, info.path, info.class_name, info.cls, input_max)
        return all_finite

    def _absorb_backward(
        self, pending: PendingIteration, values: list[list[float]], record: IterationRecord, forward_finite: bool
    ) -> None:
        overflowed = record.skipped or bool(record.nonfinite_params)
        if not overflowed:
            for module, value in produced_maxima(pending.backward, values, record.scale):
                if value > self.backward_reference.get(module, -1.0):
                    self.backward_reference[module] = value
            return
        # A non-finite forward or loss explains the gradients (AMP504 forward, AMP503).
        if self.backward_origin is None and forward_finite:
            self.backward_origin = find_origin(pending.backward, values, record.step, record.scale)

    def _absorb_boundaries(self, pending: PendingIteration, values: list[list[float]]) -> None:
        for info, numel, slot in pending.boundaries:
            zero, subnormal, coarse = values[slot]
            stats = self.boundaries.get(info.path)
            if stats is None:
                stats = self.boundaries[info.path] = BoundaryStats(info.path, info.class_name)
            stats.numel += numel
            stats.zero += zero * numel
            stats.subnormal += subnormal * numel
            stats.coarse_subnormal += coarse * numel

    def name_origin_op(self) -> None:
        """Name the op behind the non-finite origin from the census ranges, when it saw it."""
        origin = self.origin
        if origin is None or origin.op is not None:
            return
        for (module, op), (input_max, output_max) in self.op_ranges.items():
            if module == origin.module and not math.isfinite(output_max) and math.isfinite(input_max):
                origin.op, origin.op_input_max = op, input_max
                return

    def to_summary(self) -> dict[str, Any]:
        return {
            "autocast": sorted({dtype for _, dtype in self.autocast_dtypes}),
            "grad_scaler": self.uses_scaler,
            "scaler_steps": self.scaler_steps,
            "optimizer_steps": self.plain_optimizer_steps,
            "backward_calls": self.backward_calls,
            "optimizers": list(self.optimizers),
        }
