"""The instrumented GradScaler that a trace session puts in place of torch's.

While a session is active, ``torch.amp.GradScaler`` (and the deprecated ``torch.cuda.amp`` and
``torch.cpu.amp`` spellings) name subclasses defined here, and torch's ``__init__`` turns any other
instance (FSDP's ``ShardedGradScaler``, a framework's subclass, the class imported by name
before the session) into the observed variant of its class, so every scaler the script builds is
observed. The subclasses call the parent for everything and only report to the session:

- ``scale``: the unscaled loss handed in, so the loss per iteration is known;
- ``unscale_``: the moment the gradients hold their true values (the gradient statistics are
  taken there, before any clipping changes them);
- ``step``: the ``found_inf`` tensors that torch itself computed for that optimizer. Skips are
  read from them and never from optimizer step hooks, because optimizers that handle scaling
  themselves (``fused=True``) are always called by ``scaler.step`` and skip inside the kernel;
- ``update``: the scale before and after, from which growth and backoff events follow.

All values stay on the device; the session reads them in its one sync per iteration. The ops
torch's ``unscale_`` and ``update`` run (a float64 reciprocal of the scale, the inf checks, the
scale's update) are left out of the op census: they are the scaler's, not the script's.
"""

from __future__ import annotations

import sys
import threading
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Optional, Protocol, Union

import torch
from torch.amp.grad_scaler import OptState

from .ops import quiet

if TYPE_CHECKING:
    from types import FrameType
    from typing import Self

_TorchGradScaler = torch.amp.GradScaler


class ScalerObserver(Protocol):
    def scaler_scaled(self, scaler: _Observed, outputs: Any, scaled: Any) -> None: ...

    def scaler_unscale_started(self, scaler: _Observed, optimizer: Any) -> None: ...

    def scaler_unscaled(self, scaler: _Observed, optimizer: Any) -> None: ...

    def scaler_step_started(self, scaler: _Observed, optimizer: Any, grads_scaled: bool) -> None: ...

    def scaler_step_finished(self, scaler: _Observed, optimizer: Any, found_inf: Optional[torch.Tensor]) -> None: ...

    def scaler_updated(self, scaler: _Observed, scale_before: torch.Tensor, scale_after: torch.Tensor) -> None: ...


# The session that receives the events; None outside a session, so scalers created during a
# session and used after it behave exactly like torch's.
_observer: Optional[ScalerObserver] = None


def _current(scaler: _Observed) -> Optional[ScalerObserver]:
    return _observer if scaler.is_enabled() else None


_stepping = threading.local()


# Where each scaler made during the session was created (the user's line), for AMP205.
creation_sites: weakref.WeakKeyDictionary[Any, Optional[tuple[str, int]]] = weakref.WeakKeyDictionary()


# Scalers whose state was loaded (resuming): made anew, but carrying on the old scale.
resumed: weakref.WeakSet[Any] = weakref.WeakSet()


def _remember_creation(scaler: Any) -> None:
    if _observer is not None:
        from .sites import construction_site

        creation_sites[scaler] = construction_site()


def observed_scaler_stepping() -> bool:
    """Whether a scaler ampdoctor observes is inside its ``step`` on this thread (a disabled
    one too, which steps the optimizer plainly): torch's ``step`` code further up the stack is
    then not a scaler made before tracing began."""
    return getattr(_stepping, "depth", 0) > 0


# The mixin's base: a GradScaler to the type checker (every class it is mixed into is one), a plain
# object at run time.
if TYPE_CHECKING:
    _ObservedBase = _TorchGradScaler
else:
    _ObservedBase = object


class _Observed(_ObservedBase):
    """The observation points, mixed in before a GradScaler class; the behaviour is the
    parent's."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        # Here rather than in __init__, whose frames torch's constructor warnings count.
        scaler = super().__new__(cls)
        _remember_creation(scaler)
        return scaler

    def scale(self, outputs: Any) -> Any:  # a tensor or an iterable of them, as torch's overloads
        scaled = super().scale(outputs)
        observer = _current(self)
        if observer is not None:
            observer.scaler_scaled(self, outputs, scaled)
        return scaled

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        resumed.add(self)  # a scaler made again from the saved state continues the old one

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        observer = _current(self)
        if observer is not None:
            observer.scaler_unscale_started(self, optimizer)
        with quiet():  # torch's own arithmetic (``_scale.double().reciprocal()``), not the script's
            super().unscale_(optimizer)
        if observer is not None:
            observer.scaler_unscaled(self, optimizer)

    def step(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Optional[float]:
        _stepping.depth = getattr(_stepping, "depth", 0) + 1
        try:
            return self._observed_step(optimizer, *args, **kwargs)
        finally:
            _stepping.depth -= 1

    def _observed_step(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Optional[float]:
        observer = _current(self)
        if observer is None:
            return super().step(optimizer, *args, **kwargs)
        # An optimizer that handles scaling itself receives still-scaled gradients: statistics
        # must be taken before its step, divided by the scale.
        handles_scaling = getattr(optimizer, "_step_supports_amp_scaling", False)
        state = self._per_optimizer_states[id(optimizer)]
        grads_scaled = handles_scaling and state["stage"] is OptState.READY
        observer.scaler_step_started(self, optimizer, grads_scaled)
        found_inf = None
        try:
            result = super().step(optimizer, *args, **kwargs)
            with quiet():
                found_inf = self._combined_found_inf(optimizer)
        finally:
            observer.scaler_step_finished(self, optimizer, found_inf)
        return result

    def update(self, new_scale: Optional[Union[float, torch.Tensor]] = None) -> None:
        observer = _current(self)
        if observer is None or self._scale is None:
            return super().update(new_scale)
        with quiet():  # torch's update and the copies of the scale around it, not the script's
            scale_before = self._scale.detach().clone()
            super().update(new_scale)
            scale_after = self._scale.detach().clone()
        observer.scaler_updated(self, scale_before, scale_after)

    def _combined_found_inf(self, optimizer: torch.optim.Optimizer) -> Optional[torch.Tensor]:
        """The sum of the per-device found_inf tensors torch recorded for this optimizer."""
        per_device = self._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
        if not per_device:
            return None
        target = self._scale.device if self._scale is not None else None
        tensors: list[torch.Tensor] = [t.to(target, non_blocking=True) for t in per_device.values()]
        total = tensors[0].clone()
        for tensor in tensors[1:]:
            total += tensor
        return total


class TracedGradScaler(_Observed, _TorchGradScaler):
    """``torch.amp.GradScaler`` with observation points; the behaviour is the parent's."""

    # torch's own __init__, not the observing one the session puts on torch's class: no extra
    # frame, so torch's constructor warnings point at the script's line.
    __init__ = _TorchGradScaler.__init__


_variants: dict[type, type] = {}


def traced_variant(cls: type) -> type:
    """The observed subclass of a GradScaler class that is not one of ours (a subclass such as
    FSDP's ``ShardedGradScaler``, or torch's class bound by name before the session began),
    same name, made once per class."""
    variant = _variants.get(cls)
    if variant is None:
        namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
        variant = _variants[cls] = type(cls.__name__, (_Observed, cls), namespace)
    return variant


def _deprecated_scaler(device: str) -> type:
    """A traced stand-in for ``torch.<device>.amp.GradScaler``, warning as torch does."""

    class DeprecatedTracedGradScaler(TracedGradScaler):
        def __init__(
            self,
            init_scale: float = 2.0**16,
            growth_factor: float = 2.0,
            backoff_factor: float = 0.5,
            growth_interval: int = 2000,
            enabled: bool = True,
        ) -> None:
            warnings.warn(
                f"`torch.{device}.amp.GradScaler(args...)` is deprecated. "
                f"Please use `torch.amp.GradScaler('{device}', args...)` instead.",
                FutureWarning,
                stacklevel=2,
            )
            super().__init__(
                device,
                init_scale=init_scale,
                growth_factor=growth_factor,
                backoff_factor=backoff_factor,
                growth_interval=growth_interval,
                enabled=enabled,
            )

    DeprecatedTracedGradScaler.__name__ = "GradScaler"
    DeprecatedTracedGradScaler.__qualname__ = f"{device.capitalize()}TracedGradScaler"
    return DeprecatedTracedGradScaler


TracedCudaGradScaler = _deprecated_scaler("cuda")
TracedCpuGradScaler = _deprecated_scaler("cpu")


def _patch_targets() -> list[tuple[Any, str, type]]:
    """(namespace, attribute, replacement) for every public name of a GradScaler class."""
    import torch.amp.grad_scaler as amp_module
    import torch.cpu.amp as cpu_amp
    import torch.cpu.amp.grad_scaler as cpu_module
    import torch.cuda.amp as cuda_amp
    import torch.cuda.amp.grad_scaler as cuda_module

    return [
        (torch.amp, "GradScaler", TracedGradScaler),
        (amp_module, "GradScaler", TracedGradScaler),
        (cuda_amp, "GradScaler", TracedCudaGradScaler),
        (cuda_module, "GradScaler", TracedCudaGradScaler),
        (cpu_amp, "GradScaler", TracedCpuGradScaler),
        (cpu_module, "GradScaler", TracedCpuGradScaler),
    ]


class ScalerPatch:
    """Installs the traced scalers and the observer; ``remove`` puts torch's classes back."""

    def __init__(self, observer: ScalerObserver) -> None:
        self._observer = observer
        self._saved: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        global _observer
        for namespace, name, replacement in _patch_targets():
            self._saved.append((namespace, name, getattr(namespace, name)))
            setattr(namespace, name, replacement)
        # Classes that do not go through the names above still run torch's __init__: FSDP's
        # ShardedGradScaler (which subclasses torch's class when its module is imported) and
        # ``from torch.amp import GradScaler`` done before the session. Their instances become
        # the observed variant of their own class as they are made.
        original_init = _TorchGradScaler.__init__

        def observed_init(scaler: _TorchGradScaler, *args: Any, **kwargs: Any) -> None:
            original_init(scaler, *args, **kwargs)
            if not isinstance(scaler, _Observed):
                scaler.__class__ = traced_variant(type(scaler))
                _remember_creation(scaler)

        self._saved.append((_TorchGradScaler, "__init__", original_init))
        # torch's class itself is patched while the session runs (and put back by ``remove``).
        _TorchGradScaler.__init__ = observed_init  # type: ignore[method-assign, assignment]
        _observer = self._observer

    def remove(self) -> None:
        global _observer
        _observer = None
        for namespace, name, original in reversed(self._saved):
            setattr(namespace, name, original)
        self._saved.clear()


def found_no_inf(scaler: _TorchGradScaler, optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``unscale_`` just found every gradient of ``optimizer`` finite, known without a
    device sync: torch's own ``found_inf`` tensors, read only when they live on the CPU."""
    state = scaler._per_optimizer_states.get(id(optimizer))
    found = state.get("found_inf_per_device") if state else None
    if not found or any(tensor.device.type != "cpu" for tensor in found.values()):
        return False
    return all(tensor.item() == 0 for tensor in found.values())


def stepped_by_untraced_scaler() -> bool:
    """Whether torch's own GradScaler (one created before the session) is stepping this
    optimizer: its ``step`` code is a few frames up. Frames are compared by code object; only
    the matching frame's ``self`` is read (a disabled scaler is not one). Checked once per step,
    never per op. A scaler ampdoctor observes is not one either."""
    if observed_scaler_stepping():
        return False
    scaler_code = {
        _TorchGradScaler.step.__code__,
        _TorchGradScaler._maybe_opt_step.__code__,
    }
    frame: Optional[FrameType] = sys._getframe(2)
    for _ in range(6):
        if frame is None:
            return False
        if frame.f_code in scaler_code:
            # A disabled scaler steps the optimizer plainly: nothing of it goes unobserved. Its
            # ``self`` is read once, and the frame ends with the step.
            scaler = frame.f_locals.get("self")
            return getattr(scaler, "_enabled", True) is not False
        frame = frame.f_back
    return False
