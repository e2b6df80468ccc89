"""Where in the backward pass the first inf/NaN gradient appeared.

A skipped step says that some gradient overflowed; the module whose forward produced a non-finite
activation (AMP504, forward) explains it when there is one. Often there is none: the forward is
finite and the overflow happens in the backward, where the loss scale multiplies every gradient.
The place to act is then the module whose backward turned finite gradients into inf/NaN: the
gradient flowing into it (w.r.t. its outputs) was finite, the gradient it produced (w.r.t. its
inputs, or its own parameters) was not.

How it is observed, without full backward hooks (they break in-place modules): while a watched
iteration runs, the forward post-hook of every module call registers ``register_multi_grad_hook``
on the call's outputs, on its inputs that require grad, and once per iteration on the module's own
parameters. Each hook queues max |g| of the gradients it receives on the device (read with the
iteration's one sync) and a sequence number taken when it fired, so the events keep their backward
execution order. The hooks are removed when the iteration closes.

Which iterations are watched: the op-recording window, and the iteration after every skipped step
(at most ``MAX_ARMED_ITERATIONS`` of them): a run that overflows usually keeps overflowing while the
scale backs off, so the next iteration shows the origin; and the first iteration that no longer
overflows measures the gradient the origin produces at a lower scale, which tells how many powers
of two the scale had to come down (``halvings_needed``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch.autograd.graph import register_multi_grad_hook

from ..float16 import FLOAT16_MAX
from .numerics import ModuleInfo
from .ops import float_tensors, max_abs, quiet

# Iterations watched after skipped steps, over the whole run: enough for a collapse from 2**16
# (each skip halves the scale) and for a few late overflows, bounded for long runs.
MAX_ARMED_ITERATIONS = 24

OUTPUT, INPUT, PARAMETER, INSIDE = "output", "input", "parameter", "inside"

# Graph nodes visited per module call when looking for where it uses a tied parameter.
_MAX_WALK = 256


@dataclass
class GradEvent:
    """One hook firing: which module call, which side, when, and the slot of max |g|."""

    sequence: int
    call: int
    module: ModuleInfo
    side: str
    slot: int


@dataclass
class BackwardOrigin:
    """The first module whose backward made a finite gradient non-finite. ``side``: what became
    non-finite: its parameters' gradient, its inputs' gradient, or (``INSIDE``) the gradient
    reaching one of its submodules, born in the module's own forward code (a residual add that
    hands a float32 gradient to a float16 branch, an op outside its submodules); with ``OUTPUT``,
    the module's outputs already received a non-finite gradient from code outside every module
    (the loss, code between the model's output and the loss)."""

    step: int
    module: str
    module_class: str
    cls: type
    side: str
    scale: Optional[float]
    # max |g| of the gradient flowing into the module's outputs (finite, at ``scale``).
    output_grad_max: Optional[float]
    # inf for an overflow; NaN for an invalid operation (0/0, inf - inf, sqrt's derivative at 0).
    value: float = math.inf
    # INSIDE: the submodule whose output received the non-finite gradient.
    submodule: Optional[str] = None
    # max |g| of the first gradient of the backward pass (leaving the loss into the model's
    # output), at ``scale``: how large the loss makes the gradients before any module.
    loss_grad_max: Optional[float] = None


class BackwardWatch:
    """Installs the per-call gradient hooks on watched iterations and removes them after."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self.active = False
        self._handles: list[Any] = []
        self._sequence = 0
        self._calls = 0
        self._params_watched: set[int] = set()
        self._param_owners: dict[int, int] = {}  # id(parameter) -> id(first module watched with it)
        self.armed_iterations = 0

    def start(self) -> None:
        self.active = True

    def stop(self) -> None:
        """End the watched iteration: remove every hook it registered."""
        self.active = False
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._params_watched.clear()
        self._param_owners.clear()

    def next_iteration(self, in_window: bool, skipped: bool) -> None:
        """Decide whether the iteration about to start is watched."""
        self.stop()
        if in_window:
            self.start()
        elif skipped and self.armed_iterations < MAX_ARMED_ITERATIONS:
            self.armed_iterations += 1
            self.start()

    def watch(self, info: ModuleInfo, module: torch.nn.Module, args: Any, outputs: list[torch.Tensor]) -> None:
        """Called from the forward post-hook for every module call of a watched iteration."""
        watched_outputs = [t for t in outputs if t.requires_grad]
        if not watched_outputs:
            return
        call = self._calls
        self._calls += 1
        self._register(watched_outputs, call, info, OUTPUT)
        inputs = [t for t in float_tensors(args) if t.requires_grad]
        if inputs:
            self._register(inputs, call, info, INPUT)
        params = [p for p in module._parameters.values() if p is not None and p.requires_grad]
        # A parameter shared with a module watched earlier (tied weights) accumulates one summed
        # gradient, seen by its leaf hook only after every user's backward: observe this call's
        # own contribution where its backward computes it.
        shared = [p for p in params if self._param_owners.setdefault(id(p), id(module)) != id(module)]
        if shared:
            self._register_uses(watched_outputs, inputs, shared, call, info)
        if id(module) not in self._params_watched:
            self._params_watched.add(id(module))
            own = [p for p in params if self._param_owners[id(p)] == id(module)]
            if own:
                self._register(own, call, info, PARAMETER)

    def _register_uses(
        self,
        outputs: Sequence[torch.Tensor],
        inputs: Sequence[torch.Tensor],
        params: Sequence[torch.Tensor],
        call: int,
        info: ModuleInfo,
    ) -> None:
        """Hook the graph nodes of this call that hand a gradient to one of ``params``: walk back
        from the outputs' nodes, stopping at the inputs' nodes, to each node whose next function
        accumulates into such a parameter (directly, or through autocast's cast of it)."""
        wanted = {id(p) for p in params}
        stop = {n for n in (t.grad_fn for t in inputs) if n is not None}
        queue = [n for n in (t.grad_fn for t in outputs) if n is not None]
        seen: set[Any] = set()
        found: dict[Any, list[int]] = {}
        while queue and len(seen) < _MAX_WALK:
            node = queue.pop()
            if node in seen or node in stop:
                continue
            seen.add(node)
            for index, (child, _) in enumerate(node.next_functions):
                if child is None or child in stop:
                    continue
                if _accumulates_into(child, wanted):
                    found.setdefault(node, []).append(index)
                elif not hasattr(child, "variable"):
                    queue.append(child)
        for node, indices in found.items():
            self._handles.append(node.register_hook(self._node_hook(indices, call, info)))

    def _node_hook(
        self, indices: list[int], call: int, info: ModuleInfo
    ) -> Callable[[Sequence[Any], Sequence[Any]], None]:
        # The node's gradients: tensors, None where there is none.
        def on_node(grad_inputs: Sequence[Any], grad_outputs: Sequence[Any]) -> None:
            present = [grad_inputs[i] for i in indices if i < len(grad_inputs) and grad_inputs[i] is not None]
            self._record(present, call, info, PARAMETER)

        return on_node

    def _record(self, present: list[torch.Tensor], call: int, info: ModuleInfo, side: str) -> None:
        try:
            if not present:
                return
            with torch.no_grad(), quiet():
                extremes = max_abs(present)
            if not extremes:
                return
            self._sequence += 1
            pending = self._session.pending
            pending.backward.append(GradEvent(self._sequence, call, info, side, pending.batch.add_abs_max(extremes)))
        except Exception as exc:  # runs inside backward: must never raise
            self.stop()
            self._session.instrument_failed("backward overflow hooks", exc)

    def _register(self, tensors: Sequence[torch.Tensor], call: int, info: ModuleInfo, side: str) -> None:
        def on_gradients(grads: Sequence[Optional[torch.Tensor]]) -> None:
            self._record([g for g in grads if g is not None], call, info, side)

        # torch finds a leaf's grad accumulator through ``t.view_as(t)`` (an aten ``view``): the
        # tracer's op, not the model's, so the census must not count it.
        with quiet():
            self._handles.append(register_multi_grad_hook(tensors, on_gradients))


def find_origin(
    events: list[GradEvent], values: list[list[float]], step: int, scale: Optional[float]
) -> Optional[BackwardOrigin]:
    """The first module (in backward order) whose produced gradient was non-finite while the
    gradient it received was finite; None if every gradient was finite."""
    ordered = sorted(events, key=lambda e: e.sequence)
    origin = _find_origin(ordered, values, step, scale)
    if origin is not None:
        first = next((e for e in ordered if e.side == OUTPUT), None)
        origin.loss_grad_max = values[first.slot][0] if first is not None else None
    return origin


def _find_origin(
    ordered: list[GradEvent], values: list[list[float]], step: int, scale: Optional[float]
) -> Optional[BackwardOrigin]:
    events = ordered
    received: dict[int, float] = {}  # call -> max |g| flowing into its outputs
    finite_outputs: list[GradEvent] = []  # in backward order
    for event in ordered:
        value = values[event.slot][0]
        if event.side == OUTPUT:
            received[event.call] = value
            if not math.isfinite(value):
                parent = _enclosing(event, finite_outputs)
                if parent is None:
                    return _origin(event, step, scale, None, value)
                origin = _origin(parent, step, scale, values[parent.slot][0], value)
                origin.side, origin.submodule = INSIDE, event.module.path
                return origin
            finite_outputs.append(event)
            continue
        if math.isfinite(value):
            continue
        incoming = received.get(event.call)
        if event.side == PARAMETER and incoming is None:
            incoming = _latest_received(events, values, event)
        if incoming is not None and math.isfinite(incoming):
            return _origin(event, step, scale, incoming, value)
    return None


def _accumulates_into(node: Any, wanted: set[int]) -> bool:
    """Whether ``node`` accumulates into one of the parameters ``wanted``, directly or through
    a chain of single-input nodes (autocast's cast of the weight)."""
    for _ in range(4):
        variable = getattr(node, "variable", None)
        if variable is not None:
            return id(variable) in wanted
        nexts = [n for n, _ in node.next_functions if n is not None]
        if len(nexts) != 1:
            return False
        node = nexts[0]
    return False


def _enclosing(event: GradEvent, finite_outputs: list[GradEvent]) -> Optional[GradEvent]:
    """The innermost module call enclosing ``event``'s module whose outputs received a finite
    gradient earlier in the backward pass: the non-finite gradient was born in its own code.
    Enclosing: a dotted prefix of the path, or a root module (named by its class)."""
    path = event.module.path
    best: Optional[GradEvent] = None
    for other in finite_outputs:
        other_path = other.module.path
        encloses = path.startswith(other_path + ".") or (other.module.is_root and other.module is not event.module)
        if not encloses:
            continue
        if best is None or _depth(other) > _depth(best):
            best = other
    return best


def _depth(event: GradEvent) -> int:
    return -1 if event.module.is_root else event.module.path.count(".")


def _latest_received(events: list[GradEvent], values: list[list[float]], event: GradEvent) -> Optional[float]:
    """Parameter hooks are registered once per iteration: pair one with the latest output event
    of the same module before it."""
    best: Optional[GradEvent] = None
    for other in events:
        if other.side == OUTPUT and other.module is event.module and other.sequence < event.sequence:
            if best is None or other.sequence > best.sequence:
                best = other
    return values[best.slot][0] if best is not None else None


def _origin(
    event: GradEvent, step: int, scale: Optional[float], incoming: Optional[float], value: float
) -> BackwardOrigin:
    info = event.module
    return BackwardOrigin(step, info.path, info.class_name, info.cls, event.side, scale, incoming, value)


def produced_maxima(
    events: list[GradEvent], values: list[list[float]], scale: Optional[float]
) -> Iterator[tuple[str, float]]:
    """(module path, max |g| it produced, unscaled) for the input and parameter gradients of a
    finite iteration: the reference for how far the scale had to come down."""
    divisor = scale if scale and scale > 0 else 1.0
    for event in events:
        if event.side == OUTPUT:
            continue
        value = values[event.slot][0]
        if math.isfinite(value):
            yield event.module.path, value / divisor


def halvings_needed(unscaled_max: Optional[float], scale: Optional[float]) -> Optional[int]:
    """How many times the loss scale must be halved so that ``unscaled_max * scale`` fits in
    float16; None when the gradient was never seen finite."""
    if not unscaled_max or unscaled_max <= 0 or not math.isfinite(unscaled_max):
        return None
    scaled = unscaled_max * (scale if scale else 1.0)
    if scaled <= FLOAT16_MAX:
        return 0
    return math.ceil(math.log2(scaled / FLOAT16_MAX))
