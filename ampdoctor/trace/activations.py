"""Activation statistics: max |x| of every module's inputs and outputs, on the device.

Global forward pre/post hooks (``torch.nn.modules.module``) measure max |x| of every module's
floating inputs and outputs, with one ``aminmax`` pass per tensor. A module whose output is
non-finite while its inputs were finite is where a non-finite value was born. Inputs are measured in the pre-hook,
before an in-place module (``ReLU(inplace=True)``) overwrites them, and a module's input that
is the previous module's unchanged output reuses that measurement. On iterations the session
runs bare (``--compare``'s timed ones) the hooks are taken off, and put back after.

Boundaries: during the op-recording window only, the float16 gradients that flow into module
outputs during backward (``register_multi_grad_hook``, as ``ModuleTracker`` does; no full
backward hooks, which break in-place modules): shares of zeros, subnormals and coarse subnormals
(nonzero below 2**-20).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch.autograd.graph import register_multi_grad_hook
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

from ..float16 import FLOAT16_COARSE_SUBNORMAL, FLOAT16_SMALLEST_NORMAL
from .compiled import outside_compiled
from .numerics import ModuleInfo, ModuleRegistry
from .ops import dtype_name, float_tensors, max_abs, quiet
from .sites import user_site

# Flush early when an iteration never closes (a script that never steps an optimizer), so the
# pending statistics stay bounded; one extra sync per this many module calls.
_MAX_PENDING_ACTIVATIONS = 20_000


@dataclass
class ActivationRow:
    module: ModuleInfo
    dtype: Optional[str]
    input_slot: Optional[int]
    output_slot: int


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
        # Hooks taken off for the iterations that run bare (see set_paused); a monitor that
        # failed stays off.
        self.paused = False
        self._failed = False
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

    def set_paused(self, paused: bool) -> None:
        """Take the hooks off for an iteration that runs bare (no Python per module call, no
        device work), or put them back; called between iterations."""
        if paused == self.paused or self._failed:
            return
        self.paused = paused
        if paused:
            self.remove()
            self._open_calls = []  # post-hooks of calls open now will not run
        else:
            self.install()

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
        slot: int = self._session.pending.batch.add_abs_max(extremes)
        if single is not None:
            self._known[id(single)] = (weakref.ref(single), single._version, slot)
        return slot

    def _before_forward(self, module: torch.nn.Module, args: Any) -> None:
        try:
            info = self._registry.module(module)
            call_sites = self._session.observations.call_sites
            if info.path not in call_sites:  # once per module: a frame walk, not per call
                call_sites[info.path] = user_site()
            self._open_calls.append((id(module), info, self._measure(float_tensors(args))))
        except Exception as exc:  # never let the instrument break the script
            self._fail(exc)

    def _after_forward(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        try:
            self._record_output(module, args, output)
        except Exception as exc:
            self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        self._failed = True
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
        outputs = float_tensors(output)
        output_slot = self._measure(outputs)
        if output_slot is None:
            return
        if self.backward_watch is not None and self.backward_watch.active:
            self.backward_watch.watch(info, module, args, outputs)
        pending = self._session.pending
        dtype = dtype_name(outputs[0].dtype)
        pending.activations.append(ActivationRow(info, dtype, input_slot, output_slot))
        if self._registry.tied and id(module) in self._registry.tied:
            self._registry.used_tied(module, dtype in ("float16", "bfloat16"))
        if self.record_boundaries:
            self._watch_gradients(info, outputs)
        if len(pending.activations) > _MAX_PENDING_ACTIVATIONS:
            self._session.flush_partial()

    def _watch_gradients(self, info: ModuleInfo, outputs: list[torch.Tensor]) -> None:
        watched = [t for t in outputs if t.requires_grad and t.dtype == torch.float16]
        if not watched:
            return

        def on_gradients(grads: Sequence[Any]) -> None:  # tensors, None where there is no gradient
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
    """[zero, subnormal, coarse subnormal shares] of the float16 gradients reaching a module's
    outputs. They are float16 values already: the coarse subnormals are the nonzero ones below
    2**-20, which keep at most 4 significant bits (what flushed is among the zeros)."""
    numel = sum(g.numel() for g in grads)
    magnitudes = [g.abs() for g in grads]  # once per gradient: every count below reads it
    zeros = _total([(m == 0).sum(dtype=torch.float32) for m in magnitudes])
    # A zero is below both cuts: counted below them, then taken off.
    subnormal = _total([(m < FLOAT16_SMALLEST_NORMAL).sum(dtype=torch.float32) for m in magnitudes]) - zeros
    coarse = _total([(m < FLOAT16_COARSE_SUBNORMAL).sum(dtype=torch.float32) for m in magnitudes]) - zeros
    return torch.stack([zeros / numel, subnormal / numel, coarse / numel])


def _total(counts: list[torch.Tensor]) -> torch.Tensor:
    """The sum of one or more counts, on their device (``sum()`` would start from a Python 0)."""
    total = counts[0]
    for count in counts[1:]:
        total = total + count
    return total
