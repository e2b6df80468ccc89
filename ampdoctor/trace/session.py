"""``TraceSession``: observe mixed-precision training without changing it.

Python API::

    import ampdoctor

    with ampdoctor.trace_session(steps=20) as session:
        for x, y in loader:                      # any training code, unchanged
            ...
    report = session.report()
    report.print()                               # the rich terminal report
    report.findings                              # list[ampdoctor.findings.Finding]
    report.to_dict()                             # the versioned JSON document (see report/trace_report.py)

With ``steps=N`` the session stops the training code after the Nth iteration by raising a
private ``BaseException`` (``StopTracing``, stopping.py) from the optimizer step (``except
Exception`` in the training code does not catch it); the ``with`` block swallows it, so
execution continues after the block. With ``steps=None`` the session observes until the block
ends.

Create the GradScaler inside the ``with`` block (scripts run by ``ampdoctor trace`` always do):
a scaler made before the session is torch's own class, its loss scale and skipped steps are not
observed, and the report says so.

What one iteration is: every ``scaler.step(...)`` up to ``scaler.update()`` (skipped or not), or
every plain ``optimizer.step()`` outside a scaler; several optimizers stepped in one iteration
count once (an iteration ends when an optimizer that already stepped in it steps again; once the
set of optimizers per iteration is known, as soon as all of them have stepped).

On entry the session installs, and on exit removes in reverse order even on error: the traced
GradScaler classes (and an observing ``GradScaler.__init__`` for subclasses and early-bound
names), an autocast-region tracker, wrappers of ``torch.compile`` (which end the op census: see
compiled.py) and of ``torch.autograd.backward`` (losses, backward count), the global optimizer
step hooks, global module forward hooks (activation ranges), the float8 watch (float8.py: torchao's
casts and float8 GEMMs, measured while the op census runs), and for the first
``record_ops_steps`` iterations the op census (``TorchDispatchMode`` with ``ModuleTracker``) and
the float16 boundary-gradient hooks. It keeps numbers, class objects and weak references only;
the training code's numerics are bit-identical with and without it.

An ``optimizer.step(closure)`` (Lightning's way) runs forward and backward inside the step: its
gradients are measured after the step instead of before.

Gradient statistics are sampled: the per-parameter shares behind AMP505 (zeros, values below
float16's subnormal and normal ranges at the loss scale) and max |g| are measured on the first
iteration, on every iteration of the op-recording window, and then on every
``gradient_interval``-th iteration (default 4; 1 measures every iteration). Every iteration
still gets the loss, the loss scale and the scaler's ``found_inf``; every one not run bare
(``bare_steps``: --compare's timed ones) the activation ranges, and which parameters' gradients
held inf/NaN: max |g| per gradient (one fused op per device and dtype on CUDA, one ``aminmax``
per gradient on a CPU), skipped when the scaler's ``found_inf`` says there was none and reading
it costs no device sync (it is on the CPU). The report states the interval.
"""

from __future__ import annotations

import contextlib
import os
import sys
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Callable, Optional

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from .activations import ActivationMonitor
from .backward import BackwardWatch
from .compiled import CompilePatch
from .float8 import Float8Watch
from .gradients import GradientMonitor
from .numerics import ModuleRegistry, PendingIteration
from .observations import IterationRecord, Observations, ScalerConfig
from .ops import AutocastTracker, OpCensus, dtype_name, quiet, reset_quiet
from .outcome import Outcome
from .protocol import ProtocolWatch
from .rulebase import Thresholds
from .scaler import ScalerPatch, found_no_inf, stepped_by_untraced_scaler
from .sites import user_site
from .stopping import StopTracing, outcome_of
from .threads import ThreadStops

if TYPE_CHECKING:
    from .numerics import ParamInfo
    from .report.trace_report import TraceReport
    from .rules.compare_rules import Compared
    from .whatif import WhatIfFloat16

DEFAULT_RECORD_OPS_STEPS = 2
DEFAULT_GRADIENT_INTERVAL = 4

_active: Optional[TraceSession] = None


ProgressCallback = Callable[[int, Optional[int], Optional[float], int], None]


class TraceSession:
    what_if: WhatIfFloat16  # ``--what-if float16``: set by the trace command before the run, else absent

    def __init__(
        self,
        steps: Optional[int] = None,
        record_ops_steps: int = DEFAULT_RECORD_OPS_STEPS,
        thresholds: Optional[Thresholds] = None,
        script: Optional[str] = None,
        argv: Optional[list[str]] = None,
        progress: Optional[ProgressCallback] = None,
        gradient_interval: int = DEFAULT_GRADIENT_INTERVAL,
        lint: bool = False,
    ) -> None:
        if steps is not None and steps < 1:
            raise ValueError("steps must be a positive number of iterations, or None")
        if record_ops_steps < 0:
            raise ValueError("record_ops_steps must be 0 or more")
        if gradient_interval < 1:
            raise ValueError("gradient_interval must be 1 or more")
        self.steps = steps
        self.record_ops_steps = record_ops_steps
        self.gradient_interval = gradient_interval
        # Off in the float32 run of --compare: its gradients are not reported, and sampling them
        # would only cost time.
        self.samples_past_window = True
        # Iterations that run bare, without the per-module and per-gradient instruments (the
        # activation hooks, the inf/NaN check, the backward watch, an origin census): set by
        # --compare for its timed iterations; decided at each iteration boundary.
        self.bare_steps: Optional[Callable[[int], bool]] = None
        self._bare = False
        self.thresholds = thresholds or Thresholds()
        # Findings point at this file; by default the running program's main script.
        self.script = script or getattr(sys.modules.get("__main__"), "__file__", None)
        self.argv = argv
        # Lint the script and the local modules it imported into the report (static.py).
        self.lint = lint
        # Called with (IterationRecord, Observations) after every iteration (tensorboard.py).
        self.iteration_listeners: list[Callable[[IterationRecord, Observations], None]] = []
        # Called with (PendingIteration, values read, IterationRecord or None) after each sync
        # (whatif.py reads its own device values there).
        self.pending_readers: list[Callable[[PendingIteration, list[Any], Optional[IterationRecord]], None]] = []
        # Called with (device, dtype, enabled, depth) as each autocast region is entered; depth:
        # the enabled regions open on that device, this one included (compare_child.py).
        self.autocast_listeners: list[Callable[[str, torch.dtype, bool, int], None]] = []
        # Called with (optimizer, label, scale, grads_scaled) where the gradient monitor measures
        # an optimizer's gradients; ``gradients_of`` yields them (whatif.py).
        self.gradient_listeners: list[Callable[[Any, str, Optional[torch.Tensor], bool], None]] = []
        # Set by --compare's mixed-precision run once the run is over (compare_child.py): the
        # comparison with the float32 run, which the report's findings are evaluated with.
        self.compared: Optional[Callable[[], Compared]] = None
        self.local_files: list[str] = []
        self._modules_before: frozenset[str] = frozenset()
        self.outcome = Outcome()
        self.observations = Observations(gradient_interval=gradient_interval)
        self.pending = PendingIteration()
        # Segments of the iteration under way that ended with a plain optimizer step, while it is
        # not known whether that step ended the iteration (see _seal_segment).
        self._sealed: list[PendingIteration] = []
        self._progress = progress
        self._registry = ModuleRegistry()
        self._exit_stack: Optional[contextlib.ExitStack] = None
        self.pid: Optional[int] = None  # of the traced process, set on entry
        self._threads: Optional[ThreadStops] = None
        self.stepped_in_other_thread = False  # than the one that entered the session
        self._census: Optional[OpCensus] = None
        self._activations = ActivationMonitor(self._registry, self)
        self._backward = BackwardWatch(self)
        self._activations.backward_watch = self._backward
        self._gradients = GradientMonitor(self._registry, self)
        self._autocast = AutocastTracker(on_enter=self._autocast_entered)
        self._protocol = ProtocolWatch(self)
        # (not the census of a later iteration run to name an overflow's op: not a recorded one)
        self._float8 = Float8Watch(
            lambda: None if self._probing_origin else self._census,
            self.observations,
            lambda module: self._registry.module(module).path,
        )
        # Iteration clock.
        self._stepped: dict[int, str] = {}
        self._iteration_optimizers: Optional[set[int]] = None
        self._in_scaler_step = False
        self._skipped_total = 0
        self._float16_autocast_since_backward = False
        self._scaled_outputs: list[weakref.ref[torch.Tensor]] = []
        self._optimizer_labels: dict[int, str] = {}
        self._scalers_seen: set[int] = set()
        self._origin_probed = False
        self._probing_origin = False

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> TraceSession:
        global _active
        if _active is not None:
            raise RuntimeError("a trace session is already active; sessions do not nest")
        reset_quiet()  # what an earlier session's stop may have left (ops.reset_quiet)
        stack = contextlib.ExitStack()
        try:
            self._install(stack)
        except BaseException:
            stack.close()
            raise
        self._exit_stack = stack
        self.pid = os.getpid()
        self._modules_before = frozenset(sys.modules)
        _active = self
        return self

    def _install(self, stack: contextlib.ExitStack) -> None:
        self._threads = ThreadStops(StopTracing)
        self._threads.install()
        stack.callback(self._threads.remove)
        scalers = ScalerPatch(self)
        scalers.install()
        stack.callback(scalers.remove)
        self._autocast.install()
        stack.callback(self._autocast.remove)
        compiles = CompilePatch(self._compile_called)
        compiles.install()
        stack.callback(compiles.remove)
        self._patch_backward(stack)
        self._protocol.install()
        stack.callback(self._protocol.remove)
        for handle in (
            register_optimizer_step_pre_hook(self._optimizer_pre_step),
            register_optimizer_step_post_hook(self._optimizer_post_step),
        ):
            stack.callback(handle.remove)
        stack.callback(self._gradients.release)
        self._activations.install()
        stack.callback(self._activations.remove)
        if self.record_ops_steps > 0:
            self._float8.install()
        stack.callback(self._float8.remove)
        stack.callback(self._backward.stop)
        stack.callback(self._stop_census)
        if self.record_ops_steps > 0:
            self._start_census()
            self._activations.record_boundaries = True
            self._backward.start()

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException], tb: Any) -> bool:
        global _active
        if self.in_forked_child:
            return False
        if self._threads is not None:
            self._threads.cancel()  # a stop sent from a training thread, not delivered yet
        try:
            self._finish_open_iteration()
        finally:
            _active = None
            stack, self._exit_stack = self._exit_stack, None
            if stack is not None:
                stack.close()
        if exc_type is not None and self.outcome.reason == "end":
            self.outcome = outcome_of(exc_type, exc)
        if self.lint:
            from .static import imported_local_files

            self.local_files = imported_local_files(self.script, self._modules_before)
        return exc_type is not None and issubclass(exc_type, StopTracing)

    @property
    def in_forked_child(self) -> bool:
        """Whether this is a copy of the session in a process forked from the traced one (a
        DataLoader worker): it observes nothing there and reports nothing."""
        return self.pid is not None and self.pid != os.getpid()

    def _forget_in_forked_child(self) -> None:
        global _active
        _active = None
        stack, self._exit_stack = self._exit_stack, None
        if stack is not None:
            with contextlib.suppress(Exception):
                stack.close()

    def report(self) -> TraceReport:
        """The findings and data of this session as a ``TraceReport`` (see report/trace_report.py)."""
        from .report.trace_report import build_report

        return build_report(self)

    @property
    def class_files(self) -> dict[type, Optional[str]]:
        return self._registry.class_files

    # -- installation helpers ----------------------------------------------------------------

    def _patch_backward(self, stack: contextlib.ExitStack) -> None:
        # Tensor.backward calls torch.autograd.backward through the module attribute, so one
        # wrapper sees both spellings.
        original = torch.autograd.backward

        def traced_backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            self._backward_started(tensors)
            return original(tensors, *args, **kwargs)

        torch.autograd.backward = traced_backward
        stack.callback(setattr, torch.autograd, "backward", original)

    def _start_census(self) -> None:
        self._census = OpCensus(self._autocast, on_error=lambda exc: self.instrument_failed("op census", exc))
        self._census.install()

    def _stop_census(self) -> None:
        self._float8.end_window()  # torchao imported from now on: nothing left to measure
        census, self._census = self._census, None
        self._activations.stop_boundaries()
        if census is None:
            return
        self._remove_census(census)
        for key, site in census.sites.items():
            self.observations.op_sites.setdefault(key, site)
        if self._probing_origin:
            self._probing_origin = False  # its counts are not part of the first-K census
            return
        self.observations.ops = census.counts
        self.observations.gemms = census.gemms
        self.observations.op_steps = self.observations.steps

    def _remove_census(self, census: OpCensus) -> None:
        if self._threads is None or not self._threads.off_session_thread or self._exit_stack is None:
            census.remove()
            return
        # A training thread ended the window: the dispatch mode sits on the session thread's
        # mode stack, where only that thread can pop it. It counts nothing more from now on
        # and is popped when the session ends.
        census.failed = True
        self._exit_stack.callback(census.remove)

    def _probe_origin_op(self, bare_next: bool = False) -> None:
        """A non-finite activation appeared after the census window: run the census for one
        more iteration so the op behind it can be named (it usually recurs); not on one that
        runs bare (a later one that does not)."""
        origin = self.observations.origin
        if origin is None or self._origin_probed or self._census is not None or bare_next:
            return
        self._origin_probed = True
        self.observations.name_origin_op()
        if origin.op is None:
            self._probing_origin = True
            self._start_census()

    def _queue_census_ranges(self, batch: Any) -> list[tuple[tuple[Any, ...], int, int]]:
        if self._census is None:
            return []
        with quiet():  # the input range of an op whose inputs were all empty
            zero = torch.zeros(())
        return [
            (key, batch.add_abs_max(r.inputs) if r.inputs else batch.add(zero), batch.add_abs_max(r.outputs))
            for key, r in self._census.ranges.items()
        ]

    # -- events ------------------------------------------------------------------------------

    def _label(self, optimizer: Any) -> str:
        label = self._optimizer_labels.get(id(optimizer))
        if label is None:
            label = f"{type(optimizer).__name__}#{len(self._optimizer_labels) + 1}"
            self._optimizer_labels[id(optimizer)] = label
            self.observations.optimizers.append(label)
        return label

    def _autocast_entered(self, device: str, dtype: torch.dtype, enabled: bool) -> None:
        if self.autocast_listeners:
            depth = self._autocast.enabled_depth(device)
            for listener in self.autocast_listeners:
                listener(device, dtype, enabled, depth)
        if not enabled:
            return
        self.observations.autocast_dtypes.add((device, dtype_name(dtype)))
        sites = self.observations.autocast_sites
        name = dtype_name(dtype) or ""
        if name not in sites and torch.is_grad_enabled():  # the training step's region, not evaluation's
            site = user_site()
            if site is not None:
                sites[name] = site
        if dtype == torch.float16:
            self._float16_autocast_since_backward = True
            if self.observations.float16_autocast_site is None:
                self.observations.float16_autocast_site = user_site()

    def _backward_started(self, tensors: Any) -> None:
        observations = self.observations
        observations.backward_calls += 1
        if observations.backward_site is None:
            observations.backward_site = user_site(skip=3)
        if self._float16_autocast_since_backward:
            observations.float16_backward_calls += 1
            self._float16_autocast_since_backward = False
        scaled = isinstance(tensors, torch.Tensor) and any(ref() is tensors for ref in self._scaled_outputs)
        if isinstance(tensors, torch.Tensor) and tensors.numel() == 1 and not scaled:
            self.pending.loss_slots.append(self.pending.batch.add(tensors, copy=True))
        device = tensors.device.type if isinstance(tensors, torch.Tensor) else None
        self._protocol.backward(scaled, device is not None and self._autocast.state(device) == "on")

    def _optimizer_pre_step(self, optimizer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self._in_scaler_step:
            return
        if not self.observations.untraced_scaler and stepped_by_untraced_scaler():
            self.observations.untraced_scaler = True
        else:
            self._protocol.plain_step(optimizer)
        if id(optimizer) in self._stepped:
            # The same optimizer again: the previous iteration is over.
            if self._iteration_optimizers is None:
                self._iteration_optimizers = set(self._stepped)
            self._close_iteration()
        if not _has_closure(args, kwargs):
            self._capture_plain_gradients(optimizer)

    def _optimizer_post_step(self, optimizer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self._in_scaler_step:
            return
        if _has_closure(args, kwargs):
            # The closure (Lightning passes one) ran forward and backward inside step(): the
            # gradients exist only now. The step changed the weights, not the gradients.
            self._capture_plain_gradients(optimizer)
        self.observations.plain_optimizer_steps += 1
        self._stepped[id(optimizer)] = self._label(optimizer)
        self._seal_segment()
        if self._iteration_optimizers is not None and self._iteration_optimizers <= set(self._stepped):
            self._close_iteration()

    def _seal_segment(self) -> None:
        """A plain optimizer stepped: what was measured so far belongs to the iteration under
        way, whatever comes next. Whether this step ended the iteration is known only when an
        optimizer steps again (the same one: a new iteration; another: the same iteration, as a
        GAN's second optimizer), so what comes next (the next forward, its loss and backward)
        goes into a new segment, which joins this iteration or opens the next."""
        self._sealed.append(self.pending)
        self.pending = self.pending.after()

    def _capture_plain_gradients(self, optimizer: Any) -> None:
        if self._bare:
            return
        self._capture(optimizer, None, grads_scaled=False, full=self._gradient_shares_due())

    def _capture(
        self, optimizer: Any, scale: Optional[torch.Tensor], grads_scaled: bool, full: bool, known_finite: bool = False
    ) -> None:
        label = self._label(optimizer)
        self._gradients.capture(
            optimizer, label, scale, grads_scaled=grads_scaled, full=full, known_finite=known_finite
        )
        for listener in self.gradient_listeners:
            listener(optimizer, label, scale, grads_scaled)

    def gradients_of(self, optimizer: Any, label: str) -> Iterator[tuple[ParamInfo, torch.Tensor]]:
        """(parameter, detached gradient) for every parameter of ``optimizer`` with a non-empty
        gradient, as the gradient monitor measures them."""
        return self._gradients.gradients(optimizer, label)

    # ScalerObserver (called by the traced GradScaler)

    def scaler_scaled(self, scaler: Any, outputs: Any, scaled: Any) -> None:
        self._remember_scaler(scaler)
        self._protocol.scaled(scaler)
        if isinstance(outputs, torch.Tensor) and isinstance(scaled, torch.Tensor):
            self._scaled_outputs.append(weakref.ref(scaled))
            if outputs.numel() == 1:
                self.pending.loss_slots.append(self.pending.batch.add(outputs, copy=True))

    def scaler_unscale_started(self, scaler: Any, optimizer: Any) -> None:
        self._protocol.scaler_step(scaler, optimizer, unscaling=True)

    def scaler_unscaled(self, scaler: Any, optimizer: Any) -> None:
        if self._bare:
            return
        full = self._gradient_shares_due()
        self._capture(
            optimizer,
            scaler._scale,
            grads_scaled=False,
            full=full,
            known_finite=not full and found_no_inf(scaler, optimizer),
        )

    def scaler_step_started(self, scaler: Any, optimizer: Any, grads_scaled: bool) -> None:
        self._in_scaler_step = True
        self._protocol.scaler_step(scaler, optimizer)
        if self.observations.step_site is None:
            self.observations.step_site = user_site(skip=2)
        if grads_scaled and not self._bare:
            self._capture(optimizer, scaler._scale, grads_scaled=True, full=self._gradient_shares_due())

    def scaler_step_finished(self, scaler: Any, optimizer: Any, found_inf: Any) -> None:
        self._in_scaler_step = False
        label = self._label(optimizer)
        self.observations.scaler_steps += 1
        self._stepped[id(optimizer)] = label
        if found_inf is not None:
            self.pending.found_inf_slots.append((label, self.pending.batch.add(found_inf)))
        if scaler._scale is not None and self.pending.used_scale_slot is None:
            self.pending.used_scale_slot = self.pending.batch.add(scaler._scale, copy=True)

    def scaler_updated(self, scaler: Any, scale_before: torch.Tensor, scale_after: torch.Tensor) -> None:
        self._protocol.updated(scaler)
        if not self._stepped:
            return
        batch = self.pending.batch
        self.pending.scale_slots = (batch.add(scale_before), batch.add(scale_after))
        self._close_iteration()

    def gradient_sample_scheduled(self, step: int) -> bool:
        """Whether iteration ``step`` is one the schedule gives the full gradient statistics (the
        shares of AMP505 and max |g|): the first iteration and every one of the op-recording
        window, then every ``gradient_interval``-th. The others get the inf/NaN check only."""
        return step <= max(self.record_ops_steps, 1) or step % self.gradient_interval == 0

    def _gradient_shares_due(self) -> bool:
        """Whether the iteration under way gets the full gradient statistics (past the
        op-recording window only while ``samples_past_window`` is on)."""
        step = self.observations.steps + 1
        if step > max(self.record_ops_steps, 1) and not self.samples_past_window:
            return False
        return self.gradient_sample_scheduled(step)

    def _remember_scaler(self, scaler: Any) -> None:
        if id(scaler) in self._scalers_seen:
            return
        self._scalers_seen.add(id(scaler))
        self.observations.scalers.append(
            ScalerConfig(
                scaler._device,
                float(scaler._init_scale),
                float(scaler._growth_factor),
                float(scaler._backoff_factor),
                int(scaler._growth_interval),
            )
        )

    def _compile_called(self) -> None:
        """``torch.compile`` is about to be called: the census must stop for good, because Dynamo
        runs frames eagerly under a dispatch mode (compiled code would silently run uncompiled)."""
        self.observations.compiled = True
        self._origin_probed = True  # no later census to name an origin op either
        if self._census is not None:
            self._stop_census()
            if self.observations.op_steps == 0:
                self.observations.ops.clear()  # set-up ops only: no iteration was recorded

    def instrument_failed(self, what: str, exc: Exception) -> None:
        """An instrument hit something it cannot measure: it removes itself, the script goes on,
        and the report says what is missing."""
        self.observations.instrument_errors.append(f"{what} stopped: {type(exc).__name__}: {exc}")

    def flush_partial(self) -> None:
        """Read the statistics of a script that runs forwards without ever stepping."""
        if not self.observations.stepped and not self._stepped:
            self._read_pending(None)

    # -- iterations --------------------------------------------------------------------------

    def _close_iteration(self) -> None:
        step = self.observations.steps + 1
        if self._threads is not None and self._threads.off_session_thread:
            self.stepped_in_other_thread = True
        record = IterationRecord(step=step)
        window_ends = self._census is not None and (self._probing_origin or step >= self.record_ops_steps)
        self._read_pending(record, with_census_ranges=window_ends)
        if record.skipped:
            self._skipped_total += 1
        bare_next = self.bare_steps is not None and self.bare_steps(step + 1)
        self._backward.next_iteration(in_window=step < self.record_ops_steps, skipped=record.skipped and not bare_next)
        for listener in list(self.iteration_listeners):
            try:
                listener(record, self.observations)
            except Exception as exc:  # a failing writer must not break the script
                self.iteration_listeners.remove(listener)
                self.instrument_failed(f"{type(listener).__name__}", exc)
        if window_ends:
            self._stop_census()
        self._probe_origin_op(bare_next)
        self._bare = bare_next
        self._activations.set_paused(bare_next)
        if self._progress is not None:
            scale = record.scale_after if record.scale_after is not None else record.scale
            self._progress(step, self.steps, scale, self._skipped_total)
        if self.steps is not None and step >= self.steps:
            if self._threads is not None and self._threads.off_session_thread:
                self._threads.stop_session_thread()
            raise StopTracing()

    def _read_pending(self, record: Optional[IterationRecord], with_census_ranges: bool = False) -> None:
        """The one host sync of an iteration: read its device values and fold them in."""
        if record is not None and self._sealed:
            # The iteration is its sealed segments; the open one (after its last step) is the
            # next iteration's beginning and stays pending, on the same batch.
            pending = PendingIteration.merged(self._sealed)
            carried = PendingIteration() if self.pending.empty else self.pending
        else:
            pending, carried = self.pending, PendingIteration()
        self._sealed = []
        ranges = self._queue_census_ranges(pending.batch) if with_census_ranges else []
        self.pending = carried
        self._stepped = {}
        self._scaled_outputs = []
        self._activations.new_iteration()
        values = pending.batch.read() if not pending.empty else []
        step = record.step if record is not None else self.observations.steps + 1
        self.observations.absorb(pending, values, record, step)
        for reader in self.pending_readers:
            reader(pending, values, record)
        for key, input_slot, output_slot in ranges:
            self.observations.op_ranges[key] = (values[input_slot][0], values[output_slot][0])

    def _finish_open_iteration(self) -> None:
        """On exit: an iteration that stepped counts; otherwise keep what it measured."""
        census_open = self._census is not None
        if self._stepped:
            record = IterationRecord(step=self.observations.steps + 1)
            self._read_pending(record, with_census_ranges=census_open)
            if not self.pending.empty:  # what ran after the last step: no iteration of its own
                self._read_pending(None)
        elif not self.pending.empty or census_open:
            self._read_pending(None, with_census_ranges=census_open)
        self._stop_census()


def _has_closure(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``optimizer.step`` was given a closure that computes the gradients."""
    return callable(kwargs.get("closure")) or bool(args and callable(args[0]))


def trace_session(
    steps: Optional[int] = None,
    record_ops_steps: int = DEFAULT_RECORD_OPS_STEPS,
    thresholds: Optional[Thresholds] = None,
    **options: Any,
) -> TraceSession:
    """A ``TraceSession`` for use in a ``with`` block (see the module docstring)."""
    return TraceSession(steps=steps, record_ops_steps=record_ops_steps, thresholds=thresholds, **options)


def active_session() -> Optional[TraceSession]:
    return _active


def _forget_session_in_forked_child() -> None:
    """A forked child (a DataLoader worker with the fork start method) inherits the session's
    hooks and patched classes: remove them there, so workers run untraced, as spawned ones do."""
    if _active is not None:
        _active._forget_in_forked_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_session_in_forked_child)
