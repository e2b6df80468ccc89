"""The two child runs of ``--compare float32`` (or ``bfloat16``), seen from inside.

``CompareChild`` is what the trace command adds to a session in a child: the clock (both runs),
timed iterations that run bare (both runs: no activation hooks, no gradient check; see
``TraceSession.bare_steps``), the baseline's switch (the float32 run: mixed precision off,
precision_off.py; the bfloat16 run: float8 off and bfloat16 on, bfloat16_on.py), the profile (the
run as written). After the run, the baseline writes its ``RunRecord`` and report to the file the
parent named; the run as written reads it, and its report is evaluated with the comparison
(``TraceSession.compared``: its findings take the same path as the run's own).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import TYPE_CHECKING, Any, Optional

import torch

from .comparison import LOW_PRECISION, RunRecord, compare_runs
from .stopwatch import TIMED, RunClock

if TYPE_CHECKING:
    from ..report.trace_report import TraceReport
    from ..rules.compare_rules import Compared
    from ..session import TraceSession
    from .bfloat16_on import Bfloat16On
    from .precision_off import PrecisionOff

FLOAT32, MIXED, BFLOAT16 = "float32", "mixed", "bfloat16"
BASELINES = (FLOAT32, BFLOAT16)


class CompareChild:
    def __init__(
        self,
        role: str,
        session: TraceSession,
        baseline: Optional[str] = None,
        out: Optional[str] = None,
        against: str = FLOAT32,
    ) -> None:
        if role not in (*BASELINES, MIXED) or against not in BASELINES:
            raise ValueError(f"unknown compare role {role!r} or baseline {against!r}")
        self.role = role
        self.against = against
        self.session = session
        self.baseline = baseline
        self.out = out
        # Both runs leave out the iterations on which the mixed-precision run samples gradient
        # statistics (the same schedule: both get the same --gradient-interval); the baseline
        # does not sample them at all.
        self.clock = RunClock(
            window=session.record_ops_steps, profile=role == MIXED, sampled=session.gradient_sample_scheduled
        )
        # The timed iterations run bare in both runs: what is timed is the script, not the
        # tracer's per-module hooks (whose host work sets the pace on a fast GPU). The other
        # iterations keep every instrument, so the findings still come from observations.
        session.bare_steps = lambda step: self.clock.phase(step) == TIMED
        if role in BASELINES:
            session.samples_past_window = False
        self.switch: Optional[PrecisionOff | Bfloat16On] = None
        self.outer_regions = 0
        session.iteration_listeners.append(self.clock)
        session.autocast_listeners.append(self._region_entered)

    def _region_entered(self, device: str, dtype: Any, enabled: bool, depth: int) -> None:
        """Count the outermost enabled autocast regions entered with gradients on: each one casts
        the weights afresh (the cast cache lives as long as the outermost region). An evaluation
        pass under ``torch.no_grad()`` is not the training step's cost."""
        if enabled and depth == 1 and torch.is_grad_enabled():
            self.outer_regions += 1

    def __enter__(self) -> CompareChild:
        if self.role == FLOAT32:
            from .precision_off import PrecisionOff

            self.switch = PrecisionOff()
            self.switch.install()
        elif self.role == BFLOAT16:
            from .bfloat16_on import Bfloat16On

            switch = self.switch = Bfloat16On()
            switch.install()
            self.session.iteration_listeners.append(lambda record, observations: switch.settle())
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.clock.finish()
        if self.switch is not None:
            self.switch.remove()
        if self.role == MIXED:  # the run is over: its report is evaluated with the comparison
            self.session.compared = self.compared

    def record(self) -> RunRecord:
        """This run's measurements, as the other run and the comparison read them."""
        obs = self.session.observations
        outcome = self.session.outcome
        timing = self.clock.timing()
        memory = self.clock.memory()
        load = self.clock.load()
        matmuls: Counter[str] = Counter()
        for key, count in obs.ops.items():
            if key.is_matmul and key.phase == "forward" and key.output_dtype:
                matmuls[key.output_dtype] += count
        return RunRecord(
            role=self.role,
            steps=obs.steps,
            stopped=outcome.reason,
            error=outcome.error,
            seconds=timing.seconds,
            timed_steps=timing.steps,
            left_out=timing.left_out,
            peak_bytes=memory.peak_bytes,
            memory_method=memory.method,
            start_bytes=memory.start_bytes,
            losses=[r.loss for r in obs.iterations],
            matmul_dtypes=dict(matmuls),
            autocast=sorted([list(pair) for pair in obs.autocast_dtypes]),
            scalers=len(obs.scalers),
            low_precision_parameters=[g.name for g in obs.gradients.values() if g.dtype in LOW_PRECISION],
            float8_layers=len({module for module, _role in obs.float8_casts}),
            switched_off=self.switch.to_dict() if self.switch is not None else {},
            profile_error=self.clock.profile_error,
            autocast_regions=self.outer_regions,
            own_cores=load.own_cores,
            other_cores=load.other_cores,
            threads=_threads(),
        )

    def finish(self, report: TraceReport) -> None:
        """After the run: the baseline hands its measurements and report over to the run as
        written (which took them into its findings through ``compared``)."""
        if self.role not in BASELINES:
            return
        from ...atomic import write_text_atomic

        document = {"run": self.record().to_dict(), "report": report.to_dict()}
        assert self.out is not None  # the baseline is always told where to write
        write_text_atomic(self.out, json.dumps(document, allow_nan=False))

    def compared(self) -> Compared:
        """The run as written against the baseline's measurements: what ``rules.evaluate``
        takes to judge this run's findings and the comparison together (the report shows
        ``comparison``)."""
        from ..rules.compare_rules import Compared
        from .hardware import hardware_for

        baseline, failure = read_baseline(self.baseline)
        limits = self.session.thresholds
        comparison = compare_runs(
            self.record(),
            baseline,
            limits.compare_speedup,
            limits.compare_memory_saving,
            failure,
            limits.compare_load_change,
            limits.compare_busy,
            against=self.against,
        )
        obs = self.session.observations
        hardware = [hw for device, dtype in sorted(obs.autocast_dtypes) if (hw := hardware_for(device, dtype))]
        comparison.hardware = [hw.to_dict() for hw in hardware]
        profile = self.clock.profile_result
        if profile is not None:
            comparison.profile = profile.to_dict()
            if profile.device_busy_seconds is not None and profile.script_seconds > 0:
                # The tracer's own work inside the profiled iterations is not the script's.
                comparison.device_busy_share = min(profile.device_busy_seconds / profile.script_seconds, 1.0)
        comparison.thresholds.update(cast_share=limits.cast_share, align_share=limits.align_share)
        return Compared(comparison, profile, hardware)


def read_baseline(path: Optional[str]) -> tuple[Optional[RunRecord], Optional[str]]:
    """The baseline run's record, or why there is none (the parent writes ``{"failed": ...}``
    when that run crashed before writing)."""
    if not path or not os.path.exists(path):
        return None, "it wrote no measurements"
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except (OSError, ValueError) as exc:
        return None, f"its measurements are unreadable ({exc})"
    if document.get("failed"):
        return None, str(document["failed"])
    return RunRecord.from_dict(document.get("run") or {}), None


def _threads() -> int:
    """torch's intra-op thread count: the cores a CPU run keeps busy on a quiet machine."""
    return int(torch.get_num_threads())
