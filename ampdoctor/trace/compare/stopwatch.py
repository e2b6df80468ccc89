"""Time, memory and a profile of one run of ``--compare float32``.

``RunClock`` is an iteration listener of the session: it reads the clock at every iteration
boundary (after synchronising the CUDA devices in use), so iteration i lasts from the end of
i-1 to the end of i. Iterations fall in four phases, the same in both runs:

1. the op-recording window (the census slows every op: never timed),
2. ``WARMUP`` warm-up iterations (allocator, kernel selection, caches),
3. ``PROFILED`` iterations under ``torch.profiler`` in the mixed-precision run (left out of the
   float32 run's timing too, so both time the same iterations),
4. the timed iterations: the median and the spread compared.

Among the iterations of phase 4, those on which the mixed-precision run samples the full gradient
statistics (every ``--gradient-interval``-th: a device pass over every gradient, which can cost
more than the iteration itself) are left out too, in both runs, so both time the same iterations
and none of them carries the tracer's extra work. The timed iterations run bare in both runs
(``TraceSession.bare_steps``): no activation hooks (an ``aminmax`` and Python per module call,
whose host work sets the pace on a fast GPU), no inf/NaN gradient check, so they time the script
and not the tracer; the other phases keep every instrument.

The spread is the median absolute deviation relative to the median: an iteration slowed by
something else now and then (a checkpoint, a log line, the system) moves it only when it happens
on more than half of the timed iterations.

Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` (the allocator's peak since the process
started, which is the start of the run); on CPU the process's peak resident set size
(``ru_maxrss``), which includes Python and torch themselves, so the resident size when the
session started is reported beside it.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

WARMUP = 2
PROFILED = 2

WINDOW, WARM, PROFILE, TIMED = "window", "warmup", "profiled", "timed"
GRADIENTS = "gradients"  # a timed-phase iteration on which gradient statistics are sampled

CPU_MEMORY_METHOD = "process peak resident set size (ru_maxrss), Python and torch included"
CUDA_MEMORY_METHOD = "torch.cuda.max_memory_allocated"


@dataclass
class Timing:
    """Per-iteration seconds of the timed phase, with what was left out."""

    seconds: list[float] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    left_out: dict[str, int] = field(default_factory=dict)

    @property
    def median(self) -> Optional[float]:
        return statistics.median(self.seconds) if self.seconds else None

    @property
    def quartiles(self) -> Optional[tuple[float, float]]:
        """(first, third) quartile: the spread reported and compared."""
        if not self.seconds:
            return None
        if len(self.seconds) == 1:
            return self.seconds[0], self.seconds[0]
        q1, _, q3 = statistics.quantiles(self.seconds, n=4, method="inclusive")
        return q1, q3

    @property
    def deviation(self) -> Optional[float]:
        """The median absolute deviation from the median (seconds)."""
        median = self.median
        if median is None:
            return None
        return statistics.median(abs(s - median) for s in self.seconds)

    @property
    def band(self) -> Optional[tuple[float, float]]:
        """(median - deviation, median + deviation): the range compared between the runs."""
        median, deviation = self.median, self.deviation
        if median is None or deviation is None:
            return None
        return median - deviation, median + deviation

    @property
    def spread(self) -> Optional[float]:
        """The median absolute deviation relative to the median (the "±3%")."""
        deviation, median = self.deviation, self.median
        if deviation is None or not median:
            return None
        return deviation / median


# The machine's busy time is counted in ticks of 10 ms per core: over a timed span shorter than
# this, a tick or two counted on either side decides the answer (19 iterations of half a
# millisecond each showed the others keeping 0.7 of 2 cores busy on an idle machine), and the
# others' load is reported unknown.
LOAD_SECONDS = 0.25


@dataclass
class Load:
    """The cores this process and the other processes kept busy (on average) while the timed
    iterations ran: process CPU time, and the machine's busy time from ``/proc/stat`` less this
    process's (Linux; None elsewhere). Two runs measured under different loads are not
    comparable: their ratio says more about the machine than about mixed precision."""

    own_cores: Optional[float] = None
    other_cores: Optional[float] = None


@dataclass
class Memory:
    peak_bytes: Optional[int]
    method: str
    start_bytes: Optional[int] = None  # CPU: resident size when the session started


class RunClock:
    """Listener that times iterations; ``profile=True`` also profiles a few of them.

    ``sampled(step)`` says whether the mixed-precision run samples the full gradient statistics
    on that iteration (the session's schedule): such iterations are not timed."""

    def __init__(
        self,
        window: int,
        profile: bool = False,
        warmup: int = WARMUP,
        profiled: int = PROFILED,
        sampled: Optional[Callable[[int], bool]] = None,
    ) -> None:
        self.window = window
        self.warmup = warmup
        self.profiled = profiled
        self.profile = profile
        self.sampled = sampled
        self.durations: dict[int, float] = {}
        self.steps_seen: list[int] = []
        self.profile_result: Any = None  # profile.ProfileShares
        self.profile_error: Optional[str] = None
        self._last: Optional[float] = None
        self._profiler: Any = None
        self._profile_started: Optional[float] = None
        self._start_rss = _current_rss()
        self._load_first: Optional[tuple[float, float, Optional[float]]] = None
        self._load_last: Optional[tuple[float, float, Optional[float]]] = None

    def phase(self, step: int) -> str:
        if step <= self.window:
            return WINDOW
        if step <= self.window + self.warmup:
            return WARM
        if step <= self.window + self.warmup + self.profiled:
            return PROFILE
        if self.sampled is not None and self.sampled(step):
            return GRADIENTS
        return TIMED

    def __call__(self, record: Any, observations: Any) -> None:
        _synchronize()
        now = time.perf_counter()
        step = record.step
        self.steps_seen.append(step)
        if self._last is not None:
            self.durations[step] = now - self._last
        profile_start = self.window + self.warmup
        if self.profile and step == profile_start:
            self._start_profiler()
        elif self._profiler is not None and step >= profile_start + self.profiled:
            self._stop_profiler()
        if self.phase(step) == TIMED or self.phase(step + 1) == TIMED:
            # The machine's work around the timed iterations: from the boundary before the first
            # to the end of the last (see ``Load``).
            sample = _load_sample()
            if self._load_first is None:
                self._load_first = sample
            self._load_last = sample
        self._last = time.perf_counter()  # the profiler's own start and stop are not timed

    def load(self) -> Load:
        """What the rest of the machine did while the timed iterations ran."""
        first, last = self._load_first, self._load_last
        if first is None or last is None or last[0] <= first[0]:
            return Load()
        wall = last[0] - first[0]
        own = (last[1] - first[1]) / wall
        if first[2] is None or last[2] is None or wall < LOAD_SECONDS:
            return Load(own_cores=own)
        # The others cannot have kept busier than the cores this process left them: more means
        # the counters lagged (a core's ticks are counted when they end).
        others = min((last[2] - first[2]) / wall - own, (os.cpu_count() or 1) - own)
        return Load(own_cores=own, other_cores=max(others, 0.0))

    def finish(self) -> None:
        """The run is over (stopped, ended or crashed): a profile still open is closed."""
        if self._profiler is not None:
            self._stop_profiler()

    def timing(self) -> Timing:
        result = Timing()
        for step in self.steps_seen:
            phase = self.phase(step)
            if phase == TIMED and step in self.durations:
                result.seconds.append(self.durations[step])
                result.steps.append(step)
            else:  # the first iteration has no start to time it from
                result.left_out[phase] = result.left_out.get(phase, 0) + 1
        return result

    def memory(self) -> Memory:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # untyped in torch
            peak = max(torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count()))
            if peak:
                return Memory(int(peak), CUDA_MEMORY_METHOD)
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # Linux reports kilobytes, macOS bytes.
        peak_bytes = peak if os.uname().sysname == "Darwin" else peak * 1024
        return Memory(int(peak_bytes), CPU_MEMORY_METHOD, self._start_rss)

    def _start_profiler(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile

        from ..ops import mark_own_ops, quiet

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # untyped in torch
            activities.append(ProfilerActivity.CUDA)
        # Kineto logs every start and stop on stderr unless told otherwise when it starts; the
        # script's own environment is put back right after.
        saved = os.environ.get("KINETO_LOG_LEVEL")
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
        try:
            with quiet():
                self._profiler = profile(activities=activities, record_shapes=True)
                self._profiler.__enter__()
            mark_own_ops(True)
        except Exception as exc:  # the profile is extra: the run goes on without it
            self._profiler = None
            self.profile_error = f"{type(exc).__name__}: {exc}"
            return
        finally:
            if saved is None:
                os.environ.pop("KINETO_LOG_LEVEL", None)
        self._profile_started = time.perf_counter()

    def _stop_profiler(self) -> None:
        from ..ops import mark_own_ops
        from .profile import shares_of

        mark_own_ops(False)
        profiler, self._profiler = self._profiler, None
        _synchronize()
        wall = time.perf_counter() - (self._profile_started or time.perf_counter())
        try:
            profiler.__exit__(None, None, None)
            self.profile_result = shares_of(profiler.events(), wall)
        except Exception as exc:
            self.profile_error = f"{type(exc).__name__}: {exc}"


def _synchronize() -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # untyped in torch
        torch.cuda.synchronize()


def _current_rss() -> Optional[int]:
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _load_sample() -> tuple[float, float, Optional[float]]:
    """(wall clock, this process's CPU seconds, the machine's busy CPU seconds or None)."""
    return time.perf_counter(), time.process_time(), _machine_busy()


def _machine_busy() -> Optional[float]:
    """CPU seconds all cores spent busy since boot (``/proc/stat``: all but idle and iowait)."""
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = handle.readline().split()
    except OSError:
        return None
    if len(fields) < 6 or fields[0] != "cpu":
        return None
    try:
        ticks = [int(value) for value in fields[1:]]
    except ValueError:
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice: already in user/nice]
    busy = sum(ticks[:8]) - ticks[3] - ticks[4]
    return busy / _TICKS
