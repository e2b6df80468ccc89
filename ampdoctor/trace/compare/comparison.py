"""``--compare float32`` (and ``bfloat16``): the two runs' measurements and what they say, as
users ask it.

Each run (a child process, see compare_run.py) describes itself as a ``RunRecord``; the run as
written (the "mixed" role) builds the ``Comparison`` from its own record and the baseline's (the
float32 run, or for a float8 script the bfloat16 run), and the report shows it (terminal block,
JSON ``compare`` object, HTML section).

A speed ratio is stated only when the two runs' bands (median ± the median absolute deviation of
the per-iteration times) do not overlap; otherwise the difference is not measurable and the
report says so. The median absolute deviation ignores a minority of slow iterations (where the
interquartile range is stretched by any that reach the upper quarter). The same for memory:
peaks within ``MEMORY_NOISE`` of each other are "no measurable difference".

The runs run one after the other, so a machine whose load changes between them (other work
starting or ending on a shared machine) makes the same command give ratios several times apart.
Each run measures how many cores the other processes kept busy while it was timed
(``stopwatch.Load``); when that differs between the runs by more than the ``compare_load_change``
threshold (cores), the comparison gives no speed verdict and says why. The same when the machine
was saturated during a run of CPU autocast and the script's threads got less than
``compare_busy`` of the cores they would use: each parallel region then waits for its slowest,
descheduled thread, and the same command's ratio turned from 2.7x slower to 4x faster to 1.7x
faster under a steady two-process load on a 2-core machine.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, cast

if TYPE_CHECKING:
    from .stopwatch import Timing

LOW_PRECISION = ("float16", "bfloat16")


def json_number(value: Optional[float]) -> Any:
    """A float for JSON: inf and NaN as the strings the trace report uses."""
    if value is None or math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


MEMORY_NOISE = 0.02  # peaks closer than this (relative) are the same
MIN_TIMED = 5  # fewer timed iterations per run cannot show a spread worth comparing

COMPARED = "compared"
NOTHING = "nothing to compare"
CAST_BY_HAND = "cast by hand"
FAILED = "float32 run failed"  # "bfloat16 run failed" against bfloat16 (``failed_status``)
TOO_SHORT = "too few iterations"
# What the run as written is compared with.
FLOAT32, BFLOAT16 = "float32", "bfloat16"


def failed_status(against: str) -> str:
    return f"{against} run failed"


@dataclass
class RunRecord:
    """What one run measured (numbers only: it crosses a process boundary as JSON)."""

    role: str  # "mixed" (as written), "float32" or "bfloat16" (the baseline)
    steps: int = 0
    stopped: str = "end"
    error: Optional[str] = None
    seconds: list[float] = field(default_factory=list)
    timed_steps: list[int] = field(default_factory=list)
    left_out: dict[str, int] = field(default_factory=dict)
    peak_bytes: Optional[int] = None
    memory_method: str = ""
    start_bytes: Optional[int] = None
    losses: list[Optional[float]] = field(default_factory=list)
    # Forward matmul-class ops of the census by output dtype.
    matmul_dtypes: dict[str, int] = field(default_factory=dict)
    autocast: list[list[str]] = field(default_factory=list)
    scalers: int = 0
    low_precision_parameters: list[str] = field(default_factory=list)
    # Layers that ran float8 GEMMs (torchao) in the op-recording iterations.
    float8_layers: int = 0
    switched_off: dict[str, int] = field(default_factory=dict)
    profile_error: Optional[str] = None
    # Outermost enabled autocast regions entered over the run.
    autocast_regions: int = 0
    # Cores kept busy on average during the timed iterations, by this process and by the others.
    own_cores: Optional[float] = None
    other_cores: Optional[float] = None
    # torch's intra-op threads (the cores a CPU run would keep busy on a quiet machine)
    threads: Optional[int] = None

    @property
    def regions_per_step(self) -> Optional[float]:
        return self.autocast_regions / self.steps if self.steps else None

    @property
    def timing(self) -> Timing:
        from .stopwatch import Timing

        return Timing(list(self.seconds), list(self.timed_steps), dict(self.left_out))

    def to_dict(self) -> dict[str, Any]:
        timing = self.timing
        quartiles = timing.quartiles
        return {
            "role": self.role,
            "steps": self.steps,
            "stopped": self.stopped,
            "error": self.error,
            "iteration_seconds": list(self.seconds),
            "timed_steps": list(self.timed_steps),
            "left_out": dict(self.left_out),
            "median_seconds": timing.median,
            "quartiles_seconds": list(quartiles) if quartiles else None,
            "deviation_seconds": timing.deviation,
            "spread": timing.spread,
            "peak_memory_bytes": self.peak_bytes,
            "memory_method": self.memory_method,
            "start_memory_bytes": self.start_bytes,
            "loss": [json_number(v) for v in self.losses],
            "matmul_dtypes": dict(self.matmul_dtypes),
            "autocast": [list(pair) for pair in self.autocast],
            "scalers": self.scalers,
            "low_precision_parameters": list(self.low_precision_parameters),
            "float8_layers": self.float8_layers,
            "switched_off": dict(self.switched_off),
            "profile_error": self.profile_error,
            "autocast_regions": self.autocast_regions,
            "own_cores": self.own_cores,
            "other_cores": self.other_cores,
            "threads": self.threads,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        def number(value: Optional[str | float]) -> Optional[float]:
            if isinstance(value, str):
                return float(value.replace("Infinity", "inf"))
            return value

        return cls(
            role=data.get("role", "float32"),
            steps=int(data.get("steps") or 0),
            stopped=data.get("stopped") or "end",
            error=data.get("error"),
            seconds=[float(v) for v in data.get("iteration_seconds") or []],
            timed_steps=[int(v) for v in data.get("timed_steps") or []],
            left_out={str(k): int(v) for k, v in (data.get("left_out") or {}).items()},
            peak_bytes=data.get("peak_memory_bytes"),
            memory_method=data.get("memory_method") or "",
            start_bytes=data.get("start_memory_bytes"),
            losses=[number(v) for v in data.get("loss") or []],
            matmul_dtypes=dict(data.get("matmul_dtypes") or {}),
            autocast=[list(pair) for pair in data.get("autocast") or []],
            scalers=int(data.get("scalers") or 0),
            low_precision_parameters=list(data.get("low_precision_parameters") or []),
            float8_layers=int(data.get("float8_layers") or 0),
            switched_off=dict(data.get("switched_off") or {}),
            profile_error=data.get("profile_error"),
            autocast_regions=int(data.get("autocast_regions") or 0),
            own_cores=data.get("own_cores"),
            other_cores=data.get("other_cores"),
            threads=data.get("threads"),
        )


@dataclass
class Cause:
    """One reason mixed precision does not pay off: a finding's code and its share of time."""

    code: str
    share: Optional[float]
    basis: str  # what the share is of: "iteration time" or "GEMM time"
    module: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "share": self.share, "of": self.basis, "module": self.module}


@dataclass
class Comparison:
    status: str
    mixed: RunRecord  # the run as written
    baseline: Optional[RunRecord]  # the float32 run, or the bfloat16 one (``against``)
    explanation: str = ""
    speedup: Optional[float] = None  # baseline median / mixed median
    measurable: bool = False
    memory_change: Optional[float] = None  # mixed peak / baseline peak - 1
    memory_measurable: bool = False
    paying_off: Optional[bool] = None
    causes: list[Cause] = field(default_factory=list)
    device_busy_share: Optional[float] = None
    hardware: list[dict[str, Any]] = field(default_factory=list)
    thresholds: dict[str, float] = field(default_factory=dict)
    profile: Optional[dict[str, Any]] = None
    load_changed: bool = False
    machine_busy: bool = False
    against: str = FLOAT32

    @property
    def compared(self) -> bool:
        return self.status == COMPARED

    @property
    def fast_enough(self) -> bool:
        """A measurable speed-up of at least the ``compare_speedup`` goal."""
        goal = self.thresholds.get("compare_speedup", 1.0)
        return self.measurable and self.speedup is not None and self.speedup >= goal

    def common_loss(self) -> Optional[tuple[int, Optional[float], Optional[float]]]:
        """(step, mixed loss, baseline loss) at the last step both runs reached with a loss."""
        if self.baseline is None:
            return None
        common = min(len(self.mixed.losses), len(self.baseline.losses))
        for index in range(common - 1, -1, -1):
            a, b = self.mixed.losses[index], self.baseline.losses[index]
            if a is not None and b is not None:
                return index + 1, a, b
        return None

    def to_dict(self) -> dict[str, Any]:
        loss = self.common_loss()
        return {
            "against": self.against,
            "status": self.status,
            "explanation": self.explanation or None,
            "speedup": self.speedup,
            "measurable": self.measurable,
            "load_changed": self.load_changed,
            "machine_busy": self.machine_busy,
            "memory_change": self.memory_change,
            "memory_measurable": self.memory_measurable,
            "paying_off": self.paying_off,
            "loss_at": {"step": loss[0], "mixed": loss[1], self.against: loss[2]} if loss else None,
            "causes": [cause.to_dict() for cause in self.causes],
            "device_busy_share": self.device_busy_share,
            "hardware": list(self.hardware),
            "profile": self.profile,
            "thresholds": dict(self.thresholds),
            "runs": {"mixed": self.mixed.to_dict(), self.against: self.baseline.to_dict() if self.baseline else None},
        }


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def compare_runs(
    mixed: RunRecord,
    baseline: Optional[RunRecord],
    speedup_goal: float,
    memory_goal: float,
    failure: Optional[str] = None,
    load_change: float = 0.5,
    busy: float = 0.75,
    against: str = FLOAT32,
) -> Comparison:
    """The verdict of the two runs (causes and hardware are added by compare_rules.py).
    ``baseline``: the float32 run's record, or (``against`` bfloat16) the bfloat16 run's."""
    thresholds = {"compare_speedup": speedup_goal, "compare_memory_saving": memory_goal}

    def verdict(status: str, explanation: str) -> Comparison:
        return Comparison(status, mixed, baseline, thresholds=thresholds, explanation=explanation, against=against)

    if against == BFLOAT16 and not mixed.float8_layers:
        return verdict(
            NOTHING,
            "nothing to compare: --compare bfloat16 measures float8 training against bfloat16, and the "
            "script trains no layer in float8 (torchao's convert_to_float8_training); --compare float32 "
            "measures mixed precision against float32.",
        )
    if not mixed.autocast and not mixed.scalers and not mixed.low_precision_parameters and not mixed.float8_layers:
        return verdict(
            NOTHING,
            "nothing to compare: the script never enters torch.autocast, uses no "
            "GradScaler and trains no layer in float8, so it already runs in float32.",
        )
    if mixed.low_precision_parameters and against == FLOAT32:
        names = ", ".join(mixed.low_precision_parameters[:3])
        more = f" and {len(mixed.low_precision_parameters) - 3} more" if len(mixed.low_precision_parameters) > 3 else ""
        return verdict(
            CAST_BY_HAND,
            f"no float32 run to make: the script casts the model itself (low-precision parameters "
            f"{names}{more}, from `.half()` or `.to(dtype)`), which switching autocast off cannot undo.",
        )
    if baseline is None or failure:
        return verdict(failed_status(against), f"the {against} run failed: {failure or 'it wrote no measurements'}.")
    if baseline.stopped == "error":
        return verdict(failed_status(against), f"the {against} run failed: the script raised {baseline.error}.")
    result = verdict(COMPARED, "")
    a, b = mixed.timing, baseline.timing
    if a.median and b.median:
        result.speedup = b.median / a.median
        enough = min(len(a.seconds), len(b.seconds)) >= MIN_TIMED
        # A timing with a median has a band.
        result.measurable = enough and not _overlap(
            cast("tuple[float, float]", a.band), cast("tuple[float, float]", b.band)
        )
        if not enough:
            result.explanation = (
                f"speed not measurable: {min(len(a.seconds), len(b.seconds))} timed iteration(s), "
                f"{MIN_TIMED} needed ({_raise(mixed)})"
            )
    else:
        result.status = TOO_SHORT
        result.explanation = (
            "too few iterations to time: the op-recording window, the warm-up, the profiled "
            f"iterations and those that sample gradient statistics are left out; {_raise(mixed)}."
        )
    changed = load_changed(mixed, baseline, load_change)
    if changed and result.speedup is not None:
        result.speedup, result.measurable, result.load_changed = None, False, True
        result.explanation = (
            f"the machine's load changed between the runs (other processes kept {baseline.other_cores:.1f} "
            f"cores busy during the {against} run, {mixed.other_cores:.1f} during the {written_run(against)} run): "
            "no verdict on speed; run again on a quieter machine"
        )
    starved = busy_run(mixed, baseline, busy) if result.speedup is not None and not changed else None
    if starved is not None:
        name, run = starved
        result.speedup, result.measurable, result.machine_busy = None, False, True
        result.explanation = (
            f"the machine was busy: other processes kept {run.other_cores:.1f} of its {os.cpu_count() or 1} cores "
            f"busy during the {name} run, and the script's {run.threads} threads got {run.own_cores:.1f}: "
            "no verdict on speed; run again on a quieter machine"
        )
    mixed_used, baseline_used = used_memory(mixed), used_memory(baseline)
    if mixed_used and baseline_used:
        result.memory_change = mixed_used / baseline_used - 1
        result.memory_measurable = abs(result.memory_change) > MEMORY_NOISE
    if result.speedup is not None:
        # Mixed precision is adopted for speed and for memory: short of either goal, explain.
        # (No speed verdict, no verdict at all: the causes explain a slow-down nobody measured.)
        fast_enough = result.fast_enough
        # float8 is adopted for speed: its master weights and most of its activations stay as
        # they are in bfloat16, and no memory saving is asked of it.
        saves_memory = (
            against == BFLOAT16
            or result.memory_change is None
            or (result.memory_measurable and -result.memory_change >= memory_goal)
        )
        result.paying_off = fast_enough and saves_memory
    return result


def written_run(against: str) -> str:
    """The run as written, named as the comparison names it ("the {written_run(...)} run")."""
    return "float8" if against == BFLOAT16 else "mixed-precision"


def busy_run(mixed: RunRecord, baseline: RunRecord, share: float = 0.75) -> Optional[tuple[str, RunRecord]]:
    """The run (name, record) that ran CPU autocast on a saturated machine (this process and
    the others together kept 90% of the cores busy) with less than ``share`` (the
    ``compare_busy`` threshold) of the cores its threads would use; None when neither did."""
    if not mixed.autocast or any(device != "cpu" for device, _dtype in mixed.autocast):
        return None  # a GPU run's host thread keeps about one core busy whatever the load
    cores = os.cpu_count() or 1
    for name, run in ((written_run(baseline.role), mixed), (baseline.role, baseline)):
        if run.own_cores is None or run.other_cores is None or not run.threads:
            continue
        if run.own_cores + run.other_cores >= 0.9 * cores and run.own_cores < share * min(run.threads, cores):
            return name, run
    return None


def load_changed(mixed: RunRecord, baseline: RunRecord, cores: float = 0.5) -> bool:
    """Whether the other processes' load differed between the runs by more than ``cores`` (the
    ``compare_load_change`` threshold), or a tenth of the machine's cores on a large one: the two
    ratios of the same command, one measured under each load, disagreed several times over on a
    2-core machine."""
    if mixed.other_cores is None or baseline.other_cores is None:
        return False
    allowed = max(cores, 0.1 * (os.cpu_count() or 1))
    return abs(mixed.other_cores - baseline.other_cores) > allowed


def _raise(run: RunRecord) -> str:
    """What to raise for more timed iterations: --steps, and --gradient-interval where the
    gradient samples took a large part of the timed phase."""
    sampled = run.left_out.get("gradients", 0)
    if sampled and sampled * 3 >= sampled + len(run.seconds):
        return "raise --steps or --gradient-interval"
    return "raise --steps"


def used_memory(run: RunRecord) -> Optional[int]:
    """The memory a run's training used: the CUDA allocator's peak, or on CPU the process's
    peak resident size above its size when tracing started (Python and torch were loaded by
    then, so what remains is the script's own)."""
    if not run.peak_bytes:
        return None
    if run.start_bytes and run.peak_bytes > run.start_bytes:
        return run.peak_bytes - run.start_bytes
    return run.peak_bytes
