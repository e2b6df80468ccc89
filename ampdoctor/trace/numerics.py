"""Gradient and activation statistics computed on the device, read once per iteration.

Every statistic is a small float32 tensor on the device of the tensor it describes. They are
collected in a ``PendingIteration`` and read with one transfer per device when the iteration
closes (``PendingIteration.read``): tracing never waits for the device in the middle of a
forward or backward pass.

- Activations: global forward pre/post hooks (``torch.nn.modules.module``) measure max |x| of
  every module's floating inputs and outputs. A module whose output is non-finite while its
  inputs were finite is where a non-finite value was born. Inputs are measured in the pre-hook,
  before an in-place module (``ReLU(inplace=True)``) overwrites them, and a module's input that
  is the previous module's unchanged output reuses that measurement.
- Gradients: per parameter, at the moment the gradients hold their true values (after
  ``scaler.unscale_`` or before a plain ``optimizer.step``), the shares of elements that are
  zero, that would fall below float16's smallest subnormal (2**-24) or smallest normal (2**-14)
  when multiplied by the loss scale, that are non-finite, and max |g|.
- Boundaries: during the op-recording window only, the float16 gradients that flow into module
  outputs during backward (``register_multi_grad_hook``, as ``ModuleTracker`` does; no full
  backward hooks, which break in-place modules): shares of zeros and subnormals.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch.autograd.graph import register_multi_grad_hook
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.utils.weak import WeakIdKeyDictionary

from .ops import _float_tensors, dtype_name, max_abs, quiet

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
        self.class_files: dict[type, Optional[str]] = {}

    def module(self, module: torch.nn.Module) -> ModuleInfo:
        info = self._modules.get(module)
        if info is None:
            self._register_root(module)
            info = self._modules[module]
        return info

    def param(self, param: torch.Tensor, fallback: str) -> ParamInfo:
        info = self._params.get(param)
        if info is None:
            info = ParamInfo(fallback, None, tuple(param.shape), dtype_name(param.dtype))
            self._params[param] = info
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
    """1-D float32 device tensors read back together, one transfer per device."""

    def __init__(self) -> None:
        self._parts: list[torch.Tensor] = []

    def add(self, tensor: torch.Tensor) -> int:
        self._parts.append(tensor.detach().reshape(-1).to(torch.float32))
        return len(self._parts) - 1

    def read(self) -> list[list[float]]:
        by_device: dict[torch.device, list[int]] = {}
        for index, part in enumerate(self._parts):
            by_device.setdefault(part.device, []).append(index)
        values: list[list[float]] = [[] for _ in self._parts]
        for indices in by_device.values():
            parts = [self._parts[i] for i in indices]
            flat = torch.cat(parts).tolist()  # the host sync
            offset = 0
            for index, part in zip(indices, parts):
                values[index] = flat[offset : offset + part.numel()]
                offset += part.numel()
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
    gradients: list[tuple[ParamInfo, int]] = field(default_factory=list)
    # (module, number of gradient elements, slot of boundary_row)
    boundaries: list[tuple[ModuleInfo, int, int]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.batch._parts


class ActivationMonitor:
    """Global forward hooks measuring max |x| of module inputs and outputs, on the device."""

    def __init__(self, registry: ModuleRegistry, session: Any) -> None:
        self._registry = registry
        self._session = session
        self._handles: list[Any] = []
        self._open_calls: list[Optional[int]] = []
        self._known = WeakIdKeyDictionary()  # tensor -> (version, slot) for this iteration
        self._grad_handles: list[Any] = []
        self.record_boundaries = False

    def install(self) -> None:
        self._handles = [
            register_module_forward_pre_hook(self._before_forward),
            register_module_forward_hook(self._after_forward),
        ]

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.stop_boundaries()

    def new_iteration(self) -> None:
        """Forget slots of the batch just read; a forward still open keeps its depth."""
        self._open_calls = [None] * len(self._open_calls)
        self._known = WeakIdKeyDictionary()

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
        pending = self._session.pending
        # Inference tensors have no version counter, so their measurements are not reused.
        reusable = len(tensors) == 1 and not tensors[0].is_inference()
        if reusable:
            known = self._known.get(tensors[0])
            if known is not None and known[0] == tensors[0]._version:
                return known[1]
        with torch.no_grad(), quiet():
            maximum = max_abs(tensors)
        if maximum is None:
            return None
        slot = pending.batch.add(maximum)
        if reusable:
            self._known[tensors[0]] = (tensors[0]._version, slot)
        return slot

    def _before_forward(self, module: torch.nn.Module, args: Any) -> None:
        try:
            self._registry.module(module)
            self._open_calls.append(self._measure(_float_tensors(args)))
        except Exception as exc:  # never let the instrument break the script
            self._fail(exc)

    def _after_forward(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        try:
            self._record_output(module, output)
        except Exception as exc:
            self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        self.remove()
        self._session.instrument_failed("activation hooks", exc)

    def _record_output(self, module: torch.nn.Module, output: Any) -> None:
        input_slot = self._open_calls.pop() if self._open_calls else None
        outputs = _float_tensors(output)
        output_slot = self._measure(outputs)
        if output_slot is None:
            return
        info = self._registry.module(module)
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


def gradient_row(grad: torch.Tensor, scale: Optional[torch.Tensor], grads_scaled: bool) -> torch.Tensor:
    """[zero, below subnormal, subnormal, non-finite shares, max |g| unscaled] of one gradient.

    "Below subnormal" and "subnormal" compare |g| times the loss scale with float16's
    thresholds: the value the gradient had (or would have had) in float16 during backward.
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


class GradientMonitor:
    def __init__(self, registry: ModuleRegistry, session: Any) -> None:
        self._registry = registry
        self._session = session
        self._failed = False

    def capture(self, optimizer: Any, label: str, scale: Optional[torch.Tensor], grads_scaled: bool) -> None:
        if self._failed:
            return
        try:
            self._capture(optimizer, label, scale, grads_scaled)
        except Exception as exc:  # never let the instrument break the script
            self._failed = True
            self._session.instrument_failed("gradient statistics", exc)

    def _capture(self, optimizer: Any, label: str, scale: Optional[torch.Tensor], grads_scaled: bool) -> None:
        pending = self._session.pending
        with torch.no_grad(), quiet():
            for group_index, group in enumerate(optimizer.param_groups):
                for index, param in enumerate(group["params"]):
                    grad = getattr(param, "grad", None)
                    if grad is None or grad.numel() == 0:
                        continue
                    if grad.is_sparse:
                        grad = grad.coalesce()._values()
                    info = self._registry.param(param, f"{label}.param_groups[{group_index}][{index}]")
                    pending.gradients.append((info, pending.batch.add(gradient_row(grad, scale, grads_scaled))))
