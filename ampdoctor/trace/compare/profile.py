"""Where the time of a few iterations went, from ``torch.profiler``, keyed so the op census can
attribute it to modules.

The profiler names ops and their input shapes, not modules; the census names the module, the
op, the dtypes and the same input shapes for every matmul-class op. So time is summed per (op,
input shapes) here and shared out among the census's modules that ran that op with those shapes,
in proportion to how often each ran it (``gemm_time_by_module``).

Only the outermost matmul-class op of a nest is counted (``linear`` → ``addmm``, ``conv2d`` →
``convolution`` → ``mkldnn_convolution`` is one matmul), and only the outermost ``_to_copy`` of
a nest (a dtype or device conversion). Times are CPU time including children, or, where CUDA
was profiled, the device time of the op's kernels: what the device spent. ampdoctor's own
instrumentation runs inside ``ops.OWN_RANGE`` ranges while the profile is taken: its ops are
left out, and its time is taken off the wall time that shares are computed against.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from ..opnames import MATMUL_OPS
from ..ops import OWN_RANGE

if TYPE_CHECKING:
    from ..ops import GemmKey

Shapes = tuple[tuple[int, ...], ...]
CAST_OPS = frozenset({"_to_copy"})


@dataclass
class ProfileShares:
    wall_seconds: float
    # (op, input shapes) -> seconds, for the outermost matmul-class ops.
    gemm: dict[tuple[str, Shapes], float] = field(default_factory=dict)
    gemm_calls: Counter[tuple[str, Shapes]] = field(default_factory=Counter)
    # input shapes -> seconds, for the outermost conversions.
    cast: dict[Shapes, float] = field(default_factory=dict)
    # Seconds the CUDA devices were busy running kernels (None without CUDA activity).
    device_busy_seconds: Optional[float] = None
    on_device: bool = False
    # Self time per aten op (seconds): where the time went, whatever the rules say.
    self_seconds: dict[str, float] = field(default_factory=dict)
    # ampdoctor's own instrumentation inside the profiled iterations (left out of the shares).
    instrumentation_seconds: float = 0.0

    @property
    def script_seconds(self) -> float:
        """The profiled iterations' wall time without ampdoctor's instrumentation."""
        return max(self.wall_seconds - self.instrumentation_seconds, 0.0)

    @property
    def gemm_seconds(self) -> float:
        return sum(self.gemm.values())

    @property
    def cast_seconds(self) -> float:
        return sum(self.cast.values())

    def share(self, seconds: float) -> Optional[float]:
        return seconds / self.script_seconds if self.script_seconds > 0 else None

    def top_ops(self, count: int = 5) -> list[tuple[str, float]]:
        return sorted(self.self_seconds.items(), key=lambda item: -item[1])[:count]

    def to_dict(self) -> dict[str, Any]:
        return {
            "top_ops": [{"op": op, "seconds": seconds, "share": self.share(seconds)} for op, seconds in self.top_ops()],
            "wall_seconds": self.wall_seconds,
            "instrumentation_seconds": self.instrumentation_seconds,
            "gemm_seconds": self.gemm_seconds,
            "cast_seconds": self.cast_seconds,
            "device_busy_seconds": self.device_busy_seconds,
            "time": "device" if self.on_device else "cpu",
        }


def normalise_shapes(shapes: Iterable[Any]) -> Shapes:
    """Input shapes without the empty entries the profiler writes for non-tensor arguments and
    0-dim tensors (the census keeps floating-point tensors only), as tuples."""
    return tuple(tuple(int(d) for d in shape) for shape in shapes if shape)


def _op_name(event: Any) -> Optional[str]:
    name = getattr(event, "name", "")
    return name[6:] if name.startswith("aten::") else None


def _inside(event: Any, ops: frozenset[str]) -> bool:
    parent = getattr(event, "cpu_parent", None)
    while parent is not None:
        if _op_name(parent) in ops:
            return True
        parent = getattr(parent, "cpu_parent", None)
    return False


def _own(event: Any) -> bool:
    """Whether the event is ampdoctor's instrumentation (inside an ``OWN_RANGE``)."""
    while event is not None:
        if getattr(event, "name", None) == OWN_RANGE:
            return True
        event = getattr(event, "cpu_parent", None)
    return False


def _event_seconds(event: Any, on_device: bool) -> float:
    if on_device:
        return float(getattr(event, "device_time_total", 0.0) or 0.0) / 1e6
    return float(event.cpu_time_total) / 1e6


def shares_of(events: Iterable[Any], wall_seconds: float) -> ProfileShares:
    events = list(events)
    own_seconds = sum(
        float(e.cpu_time_total) / 1e6
        for e in events
        if getattr(e, "name", None) == OWN_RANGE and not _own(getattr(e, "cpu_parent", None))
    )
    events = [e for e in events if not _own(e)]
    device_busy = 0.0
    on_device = False
    for event in events:
        busy = getattr(event, "self_device_time_total", 0.0) or 0.0
        if busy:
            on_device = True
            device_busy += busy / 1e6
    result = ProfileShares(wall_seconds=wall_seconds, on_device=on_device, instrumentation_seconds=own_seconds)
    result.device_busy_seconds = device_busy if on_device else None
    gemm: dict[tuple[str, Shapes], float] = defaultdict(float)
    cast: dict[Shapes, float] = defaultdict(float)
    own: dict[str, float] = defaultdict(float)
    for event in events:
        op = _op_name(event)
        if op is not None:
            own[op] += (
                float(getattr(event, "self_device_time_total", 0.0) or 0.0)
                if on_device
                else float(event.self_cpu_time_total)
            ) / 1e6
        if op in MATMUL_OPS and not _inside(event, MATMUL_OPS):
            key = (op, normalise_shapes(getattr(event, "input_shapes", None) or ()))
            gemm[key] += _event_seconds(event, on_device)
            result.gemm_calls[key] += 1
        elif op in CAST_OPS and not _inside(event, CAST_OPS):
            cast[normalise_shapes((getattr(event, "input_shapes", None) or ())[:1])] += _event_seconds(event, on_device)
    result.gemm = dict(gemm)
    result.cast = dict(cast)
    result.self_seconds = dict(own)
    return result


def gemm_time_by_module(shares: ProfileShares, census_gemms: dict[GemmKey, int]) -> dict[Optional[str], float]:
    """Seconds of matmul-class time per module: each (op, shapes) entry of the profile is shared
    among the census's (module, op, phase, dtype, shapes) entries with that op and those shapes,
    by count. Time with no census entry is kept under None."""
    by_key: dict[tuple[str, Shapes], list[tuple[Optional[str], int]]] = defaultdict(list)
    for (module, op, _phase, _dtype, shapes), count in census_gemms.items():
        by_key[(op, shapes)].append((module, count))
    per_module: dict[Optional[str], float] = defaultdict(float)
    for key, seconds in shares.gemm.items():
        owners = by_key.get(key)
        if not owners:
            per_module[None] += seconds
            continue
        total = sum(count for _, count in owners)
        for module, count in owners:
            per_module[module] += seconds * count / total
    return dict(per_module)
