"""Gradient and activation statistics computed on the device, read once per iteration.

Every statistic is a small tensor on the device of the tensor it describes. They are collected
in a ``PendingIteration`` and read with one transfer per device when the iteration closes
(``DeviceBatch.read``): tracing never waits for the device in the middle of a forward or
backward pass. Reductions of a few numbers (the largest magnitude among a tensor's min and max,
shares from counts) are left to the host at that read rather than spent as device ops.

- Activations: global forward pre/post hooks (``torch.nn.modules.module``) measure max |x| of
  every module's floating inputs and outputs, with one ``aminmax`` pass per tensor. A module whose output is non-finite while its
  inputs were finite is where a non-finite value was born. Inputs are measured in the pre-hook,
  before an in-place module (``ReLU(inplace=True)``) overwrites them, and a module's input that
  is the previous module's unchanged output reuses that measurement.
- Gradients: per parameter, at the moment the gradients hold their true values (after
  ``scaler.unscale_`` or before a plain ``optimizer.step``), the shares of elements that are
  zero, that would fall below float16's smallest subnormal (2**-24) or smallest normal (2**-14)
  when multiplied by the loss scale, that are non-finite, and max |g|. ``gradient_row`` states
  the definition; ``GradientMonitor`` computes the same numbers for all parameters at once, in
  cache-sized chunks of the flattened gradients, with integer arithmetic on float32 bits. These
  statistics are sampled (the session decides which iterations: the op-recording window, then
  every n-th). On the other iterations, one ``aminmax`` per gradient tells which parameters held
  inf/NaN, so non-finite gradients are seen on every iteration; it is skipped when the scaler's
  own ``found_inf`` already says that none did and can be read without a device sync.
- Boundaries: during the op-recording window only, the float16 gradients that flow into module
  outputs during backward (``register_multi_grad_hook``, as ``ModuleTracker`` does; no full
  backward hooks, which break in-place modules): shares of zeros and subnormals.
"""

from __future__ import annotations

import math
import re
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

import torch
from torch.autograd.graph import register_multi_grad_hook
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.utils.weak import WeakIdKeyDictionary

from .compiled import outside_compiled
from .ops import _float_tensors, dtype_name, quiet

FLOAT16_MAX = 65504.0
FLOAT16_SMALLEST_SUBNORMAL = 2.0**-24
FLOAT16_SMALLEST_NORMAL = 2.0**-14

# Flush early when an iteration never closes (a script that never steps an optimizer), so the
# pending statistics stay bounded; one extra sync per this many module calls.
_MAX_PENDING_ACTIVATIONS = 20_000

GRADIENT_FIELDS = ("zero", "below_subnormal", "subnormal", "nonfinite", "max_abs")


@dataclass
class ModuleInfo:
    """What ampdoctor remembers about a module: names and its class, never the module."""

    path: str
    cls: type

    @property
    def class_name(self) -> str:
        return self.cls.__name__


@dataclass
class ParamInfo:
    name: str
    module: Optional[ModuleInfo]
    shape: tuple[int, ...]
    dtype: str


class ModuleRegistry:
    """Names modules and parameters as ``named_modules()``/``named_parameters()`` of the first
    module seen running without a known parent (a root module's own path is its class name)."""

    def __init__(self) -> None:
        self._modules: "weakref.WeakKeyDictionary[torch.nn.Module, ModuleInfo]" = weakref.WeakKeyDictionary()
        self._params = WeakIdKeyDictionary()
        # id(param) -> (weak reference, info): the per-iteration lookup, without building a
        # weak key per call; the weak reference tells a reused id from the parameter.
        self._param_ids: dict[int, tuple[Any, ParamInfo]] = {}
        self.class_files: dict[type, Optional[str]] = {}

    def module(self, module: torch.nn.Module) -> ModuleInfo:
        info = self._modules.get(module)
        if info is None:
            self._register_root(module)
            info = self._modules[module]
        return info

    def param(self, param: torch.Tensor, fallback: Callable[[], str]) -> ParamInfo:
        """The parameter's info; ``fallback()`` names one that no registered module owns."""
        known = self._param_ids.get(id(param))
        if known is not None and known[0]() is param:
            return known[1]
        info = self._params.get(param)
        if info is None:
            info = ParamInfo(fallback(), None, tuple(param.shape), dtype_name(param.dtype))
            self._params[param] = info
        key = id(param)
        self._param_ids[key] = (weakref.ref(param, lambda _, key=key: self._param_ids.pop(key, None)), info)
        return info

    def _register_root(self, root: torch.nn.Module) -> None:
        root_label = type(root).__name__
        for path, sub in root.named_modules(remove_duplicate=False):
            if sub not in self._modules:
                self._modules[sub] = ModuleInfo(path or root_label, type(sub))
                self._remember_class_file(type(sub))
        for name, param in root.named_parameters(remove_duplicate=False):
            if param not in self._params:
                owner_path = name.rpartition(".")[0]
                owner = root.get_submodule(owner_path) if owner_path else root
                self._params[param] = ParamInfo(
                    name, self._modules[owner], tuple(param.shape), dtype_name(param.dtype)
                )

    def _remember_class_file(self, cls: type) -> None:
        # Resolved while the script runs: a class defined in the script lives in a __main__
        # module that is gone by the time the report is written.
        if cls in self.class_files:
            return
        import inspect

        try:
            self.class_files[cls] = inspect.getsourcefile(cls)
        except (TypeError, OSError):
            self.class_files[cls] = None


def class_source(cls: type, class_files: dict[type, Optional[str]]) -> tuple[Optional[str], Optional[int]]:
    """(file, line) where ``cls`` is defined, found by text search: cheap and needs no module."""
    path = class_files.get(cls)
    if not path:
        return None, None
    pattern = re.compile(rf"^\s*class\s+{re.escape(cls.__name__)}\b")
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if pattern.match(line):
                    return path, number
    except OSError:
        return path, None
    return path, None


class DeviceBatch:
    """Device tensors read back together as flat lists of floats, one transfer per device.

    Parts keep their dtype until the read, where each (device, dtype) group is gathered with one
    op and converted to float32 once (exact for every float dtype), rather than one conversion
    per part.
    """

    def __init__(self) -> None:
        self._parts: list[torch.Tensor] = []
        # slot -> the parts whose largest absolute value the slot reads as (see add_abs_max)
        self._abs_max: dict[int, range] = {}

    def add(self, tensor: torch.Tensor) -> int:
        self._parts.append(tensor.detach())
        return len(self._parts) - 1

    def add_abs_max(self, extremes: list[torch.Tensor]) -> int:
        """A slot that reads as ``[max |v|]`` over the values of ``extremes`` (NaN if any is NaN):
        the reduction of a few numbers is left to the host, rather than costing device ops."""
        parts = self._parts
        first = len(parts)
        for tensor in extremes:
            parts.append(tensor.detach() if tensor.requires_grad else tensor)
        self._abs_max[first] = range(first, len(parts))
        return first

    def read(self) -> list[list[float]]:
        parts = self._parts
        groups: dict[tuple[torch.device, torch.dtype, bool], list[int]] = {}
        for index, part in enumerate(parts):
            key = (part.device, part.dtype, part.dim() == 0)
            indices = groups.get(key)
            if indices is None:
                groups[key] = [index]
            else:
                indices.append(index)
        by_device: dict[torch.device, list[tuple[bool, list[int], torch.Tensor]]] = {}
        for (device, _, scalars), indices in groups.items():
            members = [parts[i] for i in indices]
            gathered = torch.stack(members) if scalars else torch.cat([p.reshape(-1) for p in members])
            by_device.setdefault(device, []).append((scalars, indices, gathered.to(torch.float32)))
        values: list[list[float]] = [[]] * len(parts)
        for groups_on_device in by_device.values():
            flat = torch.cat([gathered for _, _, gathered in groups_on_device]).tolist()  # the host sync
            offset = 0
            for scalars, indices, _ in groups_on_device:
                if scalars:
                    for position, index in enumerate(indices, start=offset):
                        values[index] = [flat[position]]
                    offset += len(indices)
                    continue
                for index in indices:
                    size = parts[index].numel()
                    values[index] = flat[offset : offset + size]
                    offset += size
        for slot, members in self._abs_max.items():
            if len(members) == 2 and len(values[members[0]]) == len(values[members[1]]) == 1:
                # The common case, one tensor's [min] and [max].
                low, high = values[members[0]][0], values[members[1]][0]
                # NaN != NaN: a NaN anywhere makes the slot NaN, as the device reduction would.
                values[slot] = [math.nan if low != low or high != high else max(abs(low), abs(high))]
                continue
            numbers = [v for part in members for v in values[part]]
            values[slot] = [math.nan if any(v != v for v in numbers) else max(map(abs, numbers))]
        return values


@dataclass
class ActivationRow:
    module: ModuleInfo
    dtype: Optional[str]
    input_slot: Optional[int]
    output_slot: int


@dataclass
class PendingIteration:
    """Everything one iteration produced, still on the device."""

    batch: DeviceBatch = field(default_factory=DeviceBatch)
    loss_slots: list[int] = field(default_factory=list)
    scale_slots: Optional[tuple[int, int]] = None
    used_scale_slot: Optional[int] = None
    found_inf_slots: list[tuple[str, int]] = field(default_factory=list)
    activations: list[ActivationRow] = field(default_factory=list)
    gradients: list["GradientChunks"] = field(default_factory=list)
    gradient_checks: list["GradientCheck"] = field(default_factory=list)
    # (module, number of gradient elements, slot of boundary_row)
    boundaries: list[tuple[ModuleInfo, int, int]] = field(default_factory=list)
    # backward.GradEvent: gradients entering and leaving module calls, on watched iterations
    backward: list = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.batch._parts


def max_abs(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Device scalars whose largest absolute value is max |x| over the tensors: the minimum and
    maximum of each non-empty one, from one ``aminmax`` pass (NaN propagates). Read them with
    ``DeviceBatch.add_abs_max``; an empty list if there is nothing to measure."""
    extremes: list[torch.Tensor] = []
    for tensor in tensors:
        if tensor.numel() > 0:
            extremes.extend(torch.aminmax(tensor.detach()))
    return extremes


class ActivationMonitor:
    """Global forward hooks measuring max |x| of module inputs and outputs, on the device.

    The hooks run on every module call, so they do little Python work: one ``aminmax`` per
    tensor not measured before in this iteration, its two results queued as they are (no
    per-call conversion or reduction), and a dict keyed by ``id`` (checked with a weak
    reference and the version counter) to reuse the measurement of a tensor passed on
    unchanged, such as the previous module's output."""

    def __init__(self, registry: ModuleRegistry, session: Any) -> None:
        self._registry = registry
        self._session = session
        self._handles: list[Any] = []
        # Per open forward call: (id of the module, its info, slot of its inputs' max |x| or None).
        self._open_calls: list[tuple[int, ModuleInfo, Optional[int]]] = []
        # id(tensor) -> (weak reference, version, slot), for this iteration's measurements.
        self._known: dict[int, tuple[Any, int, int]] = {}
        self._grad_handles: list[Any] = []
        self.record_boundaries = False
        # backward.BackwardWatch, set by the session: gradient hooks on watched iterations.
        self.backward_watch: Any = None

    def install(self) -> None:
        self._handles = [
            register_module_forward_pre_hook(outside_compiled(self._before_forward)),
            register_module_forward_hook(outside_compiled(self._after_forward)),
        ]

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.stop_boundaries()

    def new_iteration(self) -> None:
        """Forget slots of the batch just read; a forward still open keeps its depth."""
        self._open_calls = [(key, info, None) for key, info, _ in self._open_calls]
        self._known = {}

    def stop_boundaries(self) -> None:
        self.record_boundaries = False
        for handle in self._grad_handles:
            handle.remove()
        self._grad_handles.clear()

    def _measure(self, tensors: list[torch.Tensor]) -> Optional[int]:
        """Slot holding max |x| over ``tensors``, reusing this iteration's earlier measurement of
        an unchanged tensor."""
        if not tensors:
            return None
        # Inference tensors have no version counter, so their measurements are not reused.
        single = tensors[0] if len(tensors) == 1 and not tensors[0].is_inference() else None
        if single is not None:
            known = self._known.get(id(single))
            if known is not None and known[0]() is single and known[1] == single._version:
                return known[2]
        with quiet():  # max_abs detaches: no autograd graph is recorded, no no_grad needed
            extremes = max_abs(tensors)
        if not extremes:
            return None
        slot = self._session.pending.batch.add_abs_max(extremes)
        if single is not None:
            self._known[id(single)] = (weakref.ref(single), single._version, slot)
        return slot

    def _before_forward(self, module: torch.nn.Module, args: Any) -> None:
        try:
            info = self._registry.module(module)
            self._open_calls.append((id(module), info, self._measure(_float_tensors(args))))
        except Exception as exc:  # never let the instrument break the script
            self._fail(exc)

    def _after_forward(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        try:
            self._record_output(module, args, output)
        except Exception as exc:
            self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        self.remove()
        self._session.instrument_failed("activation hooks", exc)

    def _open_call(self, module: torch.nn.Module) -> tuple[ModuleInfo, Optional[int]]:
        """The info and input slot the pre-hook recorded for this call. Calls left open above
        it are forwards that raised (their post-hooks never ran): they are dropped."""
        calls = self._open_calls
        key = id(module)
        if calls and calls[-1][0] == key:
            _, info, input_slot = calls.pop()
            return info, input_slot
        for index in range(len(calls) - 1, -1, -1):
            if calls[index][0] == key:
                _, info, input_slot = calls[index]
                del calls[index:]
                return info, input_slot
        return self._registry.module(module), None

    def _record_output(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        info, input_slot = self._open_call(module)
        outputs = _float_tensors(output)
        output_slot = self._measure(outputs)
        if output_slot is None:
            return
        if self.backward_watch is not None and self.backward_watch.active:
            self.backward_watch.watch(info, module, args, outputs)
        pending = self._session.pending
        pending.activations.append(ActivationRow(info, dtype_name(outputs[0].dtype), input_slot, output_slot))
        if self.record_boundaries:
            self._watch_gradients(info, outputs)
        if len(pending.activations) > _MAX_PENDING_ACTIVATIONS:
            self._session.flush_partial()

    def _watch_gradients(self, info: ModuleInfo, outputs: list[torch.Tensor]) -> None:
        watched = [t for t in outputs if t.requires_grad and t.dtype == torch.float16]
        if not watched:
            return

        def on_gradients(grads) -> None:
            try:
                grads = [g for g in grads if g is not None and g.dtype == torch.float16 and g.numel() > 0]
                if not grads:
                    return
                with torch.no_grad(), quiet():
                    row = boundary_row(grads)
                pending = self._session.pending
                pending.boundaries.append((info, sum(g.numel() for g in grads), pending.batch.add(row)))
            except Exception as exc:  # runs inside backward: must never raise
                self.stop_boundaries()
                self._session.instrument_failed("boundary gradient hooks", exc)

        self._grad_handles.append(register_multi_grad_hook(watched, on_gradients))


def boundary_row(grads: list[torch.Tensor]) -> torch.Tensor:
    """[zero share, subnormal share] of the float16 gradients reaching a module's outputs."""
    numel = sum(g.numel() for g in grads)
    zeros = sum((g == 0).sum(dtype=torch.float32) for g in grads)
    subnormal = sum(((g != 0) & (g.abs() < FLOAT16_SMALLEST_NORMAL)).sum(dtype=torch.float32) for g in grads)
    return torch.stack([zeros / numel, subnormal / numel])


# Gradient statistics run over chunks of at most this many elements, packed from the flattened
# gradients: a handful of ops per chunk instead of a dozen per parameter, in a scratch buffer that
# stays in cache and is reused across iterations (no allocation per iteration). At 2**16, every
# per-piece sum of the rows below (each element at most 255) is below 2**24: exact in float32.
GRADIENT_CHUNK = 1 << 16

# Rows of int32 values whose per-piece sums, less ``_ROW_FLOORS`` times the piece's length, count
# elements: |g| != 0; |g|*scale != 0; |g|*scale >= 2**-24; |g|*scale >= 2**-14; |g| not finite.
# The row order lets paired rows come from one op over both |g| and |g| * scale.
_NONZERO, _SCALED_NONZERO, _AT_LEAST_SUBNORMAL, _NONFINITE, _AT_LEAST_NORMAL = range(5)
_COUNTED_ROWS = 5
_ROW_FLOORS = (0, 0, 102, 254, 112)
# Biased float32 exponents: 2**-24 and 2**-14 have exponent fields 103 and 113; inf and NaN 255.
_EXPONENT_SHIFT = 23


def gradient_row(grad: torch.Tensor, scale: Optional[torch.Tensor], grads_scaled: bool) -> torch.Tensor:
    """[zero, below subnormal, subnormal, non-finite shares, max |g| unscaled] of one gradient.

    "Below subnormal" and "subnormal" compare |g| times the loss scale with float16's
    thresholds: the value the gradient had (or would have had) in float16 during backward.
    This is the definition, written plainly; ``GradientChunks`` computes the same numbers in
    fewer, cheaper passes, and the tests hold the two equal.
    """
    magnitude = grad.detach().abs().to(torch.float32)
    if scale is None:
        scaled, true = magnitude, magnitude
    else:
        scale = scale.to(magnitude.device)
        scaled, true = (magnitude, magnitude / scale) if grads_scaled else (magnitude * scale, magnitude)
    finite = torch.isfinite(magnitude)
    nonzero = scaled > 0
    shares = torch.stack(
        [
            (magnitude == 0).to(torch.float32).mean(),
            (nonzero & (scaled < FLOAT16_SMALLEST_SUBNORMAL)).to(torch.float32).mean(),
            (nonzero & (scaled < FLOAT16_SMALLEST_NORMAL) & (scaled >= FLOAT16_SMALLEST_SUBNORMAL))
            .to(torch.float32)
            .mean(),
            (~finite).to(torch.float32).mean(),
            torch.where(finite, true, torch.zeros_like(true)).amax(),
        ]
    )
    return shares


@dataclass
class GradientChunk:
    """One chunk's results in two ``DeviceBatch`` slots: per piece, the five row sums, and the
    largest finite |g|; piece i belongs to ``GradientChunks.params[owners[i]]``."""

    sums_slot: int
    maxima_slot: int
    owners: list[int]
    lengths: list[int]


@dataclass
class GradientChunks:
    """The gradient statistics of one capture, still on the device."""

    params: list[ParamInfo] = field(default_factory=list)
    numels: list[int] = field(default_factory=list)
    chunks: list[GradientChunk] = field(default_factory=list)

    def rows(self, values: list[list[float]]) -> list[tuple[ParamInfo, list[float]]]:
        """Per parameter, the ``gradient_row`` values, from the pieces read back."""
        counts = [[0.0] * _COUNTED_ROWS for _ in self.params]
        maxima = [0.0 for _ in self.params]
        for chunk in self.chunks:
            sums, piece_maxima = values[chunk.sums_slot], values[chunk.maxima_slot]
            for piece, (owner, length) in enumerate(zip(chunk.owners, chunk.lengths)):
                totals = counts[owner]
                for row in range(_COUNTED_ROWS):
                    totals[row] += sums[piece * _COUNTED_ROWS + row] - _ROW_FLOORS[row] * length
                maxima[owner] = max(maxima[owner], piece_maxima[piece])
        rows = []
        for info, numel, totals, maximum in zip(self.params, self.numels, counts, maxima):
            nonzero, scaled_nonzero, subnormal_or_more, nonfinite, normal_or_more = totals
            shares = [
                (numel - nonzero) / numel,
                (scaled_nonzero - subnormal_or_more) / numel,
                (subnormal_or_more - normal_or_more) / numel,
                nonfinite / numel,
            ]
            rows.append((info, [*shares, maximum]))
        return rows


@dataclass
class GradientCheck:
    """An iteration without the shares: the parameters that had a gradient and, unless their
    gradients are known to be finite (the scaler found no inf/NaN), whether each held inf/NaN,
    from one ``aminmax`` per gradient. ``groups`` are (slot, owners): one stacked tensor per
    device and dtype, holding [min, max] of each owner in turn."""

    params: list[ParamInfo] = field(default_factory=list)
    groups: list[tuple[int, list[int]]] = field(default_factory=list)

    def nonfinite(self, values: list[list[float]]) -> list[tuple[ParamInfo, bool]]:
        flags = [False] * len(self.params)
        for slot, owners in self.groups:
            extremes = values[slot]
            for position, owner in enumerate(owners):
                low, high = extremes[2 * position], extremes[2 * position + 1]
                # NaN != NaN; an inf is the minimum or the maximum.
                flags[owner] = low != low or high != high or math.isinf(low) or math.isinf(high)
        return list(zip(self.params, flags))


class GradientMonitor:
    """Per-parameter gradient statistics (see ``gradient_row`` for what they are).

    Each capture flattens the gradients into pieces packed into chunks. Per chunk, |g| goes into
    a float32 scratch buffer and everything else is integer arithmetic on its bits: for a
    non-negative float32, comparing with a power of two is comparing the exponent field
    (``bits >> 23``), and ``clamp(e, k - 1, k)`` is ``k - 1`` plus the indicator of ``e >= k``,
    so one clamp per row and one sum per piece and row count the elements; ``clamp(bits, 0, 1)``
    counts the non-zeros. (Comparisons that produce booleans, and sums of booleans, are several
    times slower on CPU.) |g| * scale is the same float32 product ``gradient_row`` compares, so
    the counts equal its for any scale; NaN and inf land where its comparisons put them:
    non-finite, and in none of the scaled classes.
    """

    def __init__(self, registry: ModuleRegistry, session: Any) -> None:
        self._registry = registry
        self._session = session
        self._failed = False
        self._scratch: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def release(self) -> None:
        self._scratch.clear()

    def capture(
        self,
        optimizer: Any,
        label: str,
        scale: Optional[torch.Tensor],
        grads_scaled: bool,
        full: bool = True,
        known_finite: bool = False,
    ) -> None:
        """Queue this optimizer's gradient statistics: the shares and max |g| (``full``), or the
        check of a non-sampled iteration: which parameters held inf/NaN, skipped (no device
        work) when the gradients are ``known_finite``."""
        if self._failed:
            return
        try:
            if full:
                self._capture(optimizer, label, scale, grads_scaled)
            else:
                self._check(optimizer, label, known_finite)
        except Exception as exc:  # never let the instrument break the script
            self._failed = True
            self._session.instrument_failed("gradient statistics", exc)

    def _gradients(self, optimizer: Any, label: str) -> Iterator[tuple[ParamInfo, torch.Tensor]]:
        """(info, detached gradient values) of every parameter with a non-empty gradient."""
        for group_index, group in enumerate(optimizer.param_groups):
            for index, param in enumerate(group["params"]):
                grad = getattr(param, "grad", None)
                if grad is None:
                    continue
                if grad.is_sparse:
                    grad = grad.coalesce()._values()
                if grad.numel() == 0:  # nothing to measure (also a sparse gradient with no entries)
                    continue
                info = self._registry.param(param, lambda: f"{label}.param_groups[{group_index}][{index}]")
                yield info, grad.detach() if grad.requires_grad else grad

    def _check(self, optimizer: Any, label: str, known_finite: bool) -> None:
        capture = GradientCheck()
        groups: dict[tuple[torch.device, torch.dtype], tuple[list[int], list[torch.Tensor]]] = {}
        with torch.no_grad(), quiet():
            for info, grad in self._gradients(optimizer, label):
                if not known_finite:
                    owners, extremes = groups.setdefault((grad.device, grad.dtype), ([], []))
                    owners.append(len(capture.params))
                    extremes.extend(torch.aminmax(grad))
                capture.params.append(info)
            if not capture.params:
                return
            batch = self._session.pending.batch
            for owners, extremes in groups.values():
                capture.groups.append((batch.add(torch.stack(extremes)), owners))
        self._session.pending.gradient_checks.append(capture)

    def _capture(self, optimizer: Any, label: str, scale: Optional[torch.Tensor], grads_scaled: bool) -> None:
        capture = GradientChunks()
        by_device: dict[torch.device, list[tuple[int, torch.Tensor]]] = {}
        for info, grad in self._gradients(optimizer, label):
            by_device.setdefault(grad.device, []).append((len(capture.params), grad.reshape(-1)))
            capture.params.append(info)
            capture.numels.append(grad.numel())
        if not capture.params:
            return
        batch = self._session.pending.batch
        with torch.no_grad(), quiet():
            for device, flats in by_device.items():
                device_scale = None if scale is None else scale.detach().to(device)
                for owners, pieces in _chunks(flats, GRADIENT_CHUNK):
                    sums, piece_maxima = self._measure_chunk(device, pieces, device_scale, grads_scaled)
                    lengths = [piece.numel() for piece in pieces]
                    capture.chunks.append(GradientChunk(batch.add(sums), batch.add(piece_maxima), owners, lengths))
        self._session.pending.gradients.append(capture)

    def _buffers(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        buffers = self._scratch.get(device)
        if buffers is None:
            buffers = (
                torch.empty((2, GRADIENT_CHUNK), dtype=torch.float32, device=device),
                torch.empty((_COUNTED_ROWS, GRADIENT_CHUNK), dtype=torch.int32, device=device),
            )
            self._scratch[device] = buffers
        return buffers

    def _measure_chunk(
        self, device: torch.device, pieces: list[torch.Tensor], scale: Optional[torch.Tensor], grads_scaled: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        size = sum(piece.numel() for piece in pieces)
        floats, ints = self._buffers(device)
        magnitude, rows = floats[0, :size], ints[:, :size]
        # |g| (IEEE abs clears the sign bit of NaN too, which the integer rows below rely on).
        if len(pieces) == 1 and pieces[0].dtype == torch.float32:
            torch.abs(pieces[0], out=magnitude)  # one pass instead of a copy and an abs
        else:
            torch.cat(pieces, out=magnitude).abs_()
        bits = floats[:, :size].view(torch.int32)
        if scale is None or grads_scaled:
            bits = bits[:1].expand(2, size)
        else:
            torch.mul(magnitude, scale, out=floats[1, :size])
        # bits[0] holds |g| and bits[1] |g| * scale (the same row when nothing is to be scaled).
        torch.clamp(bits, 0, 1, out=rows[_NONZERO : _SCALED_NONZERO + 1])
        exponents = torch.bitwise_right_shift(bits, _EXPONENT_SHIFT, out=rows[_NONFINITE : _AT_LEAST_NORMAL + 1])
        torch.clamp(exponents[1], 102, 103, out=rows[_AT_LEAST_SUBNORMAL])
        exponents[0].clamp_(254, 255)
        exponents[1].clamp_(112, 113)
        magnitude.nan_to_num_(nan=0.0, posinf=0.0)
        sums, maxima = [], []
        offset = 0
        for piece in pieces:
            end = offset + piece.numel()
            sums.append(rows[:, offset:end].sum(dim=1, dtype=torch.int32))
            maxima.append(magnitude[offset:end].amax())
            offset = end
        piece_maxima = torch.stack(maxima)
        if grads_scaled and scale is not None:
            # The division is monotone, so max(|g| / s) = max|g| / s.
            piece_maxima = piece_maxima / scale
        return torch.stack(sums), piece_maxima


def _chunks(
    flats: list[tuple[int, torch.Tensor]], limit: int
) -> Iterator[tuple[list[int], list[torch.Tensor]]]:
    """Pack flattened gradients, cut into pieces of at most ``limit`` elements, into chunks of at
    most ``limit`` elements: (owner of each piece, the pieces)."""
    owners: list[int] = []
    pieces: list[torch.Tensor] = []
    filled = 0
    for owner, flat in flats:
        start = 0
        while start < flat.numel():
            take = min(limit - filled, flat.numel() - start)
            owners.append(owner)
            pieces.append(flat[start : start + take])
            filled += take
            start += take
            if filled == limit:
                yield owners, pieces
                owners, pieces, filled = [], [], 0
    if pieces:
        yield owners, pieces
