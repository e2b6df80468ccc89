"""The GradScaler protocol as it happens: mistakes that ``ampdoctor lint`` names when it can
see them in the source, seen here at run time wherever they are (a helper module, framework
code), with lint's codes:

- AMP201: gradients clipped while still scaled (``clip_grad_norm_``/``clip_grad_value_`` after
  a scaled backward, before ``scaler.unscale_(optimizer)``): the clip threshold meets gradients
  multiplied by the loss scale, so it shrinks them all, by a different factor as the scale moves;
- AMP101: ``backward()`` called inside an enabled autocast region;
- AMP202: ``scaler.step(optimizer)`` again without ``scaler.update()`` in between;
- AMP203: ``optimizer.step()`` called directly on gradients from a scaled loss, around the
  scaler: the step applies gradients multiplied by the loss scale, and inf/NaN ones too;
- AMP204: ``scaler.step``/``unscale_`` on gradients of a plain ``loss.backward()``: nothing was
  scaled, so the scaler's bookkeeping (and its inf checks) do not match the gradients;
- AMP303: an optimizer steps float16 parameters (a model made ``.half()``): no float32 master
  weights, so small updates round away and Adam's ``eps`` is 0 in float16;
- AMP205: a new GradScaler steps an optimizer that another one stepped before (a scaler made
  per epoch or per iteration starts again from its initial scale, with its calibration skips).

What is "still scaled" is decided from the scaler's own per-optimizer state (torch records
``unscale_`` there) and from whether every backward pass since the scaler's last ``update()``
went through ``scaler.scale``: a loop that also back-propagates an unscaled loss (a second
model without a scaler) is left alone, since its gradients may be the ones clipped or stepped.

The clipping functions are wrapped by name in ``torch.nn.utils`` and
``torch.nn.utils.clip_grad`` while the session is active; framework wrappers
(``accelerator.clip_grad_norm_``, Lightning's precision plugins) call them, after their own
``unscale_``.
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch.amp.grad_scaler import OptState

from .sites import user_site

CLIP_FUNCTIONS = ("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm")


@dataclass
class ProtocolEvent:
    """One protocol mistake at one place of the user's code: the first iteration it happened
    in, how often, and the statement's text."""

    code: str
    site: Optional[tuple[str, int]]
    step: int
    what: str  # the call, e.g. "clip_grad_norm_"
    count: int = 1
    scaler: Optional[str] = None  # the scaler's variable name in the user's code, when known
    optimizer: Optional[str] = None


class ProtocolWatch:
    """Installed by the session; records ``ProtocolEvent``s in ``observations.protocol_events``."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self._saved: list[tuple[Any, str, Any]] = []
        # Scalers that scaled a loss since their last update(), and optimizers seen stepping.
        self._scaling: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self._optimizers: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self._plain_backward_since_update = False
        self.scaler_names: dict[int, str] = {}
        # id(optimizer) -> the scaler that stepped it last (weakly): a new one is AMP205.
        self._steppers: dict[int, Any] = {}
        self._took_over: set[int] = set()  # scalers already seen taking over an optimizer
        self._plain_backward_site: Optional[tuple[str, int]] = None
        self._optimizer_sites: weakref.WeakKeyDictionary[Any, Optional[tuple[str, int]]] = weakref.WeakKeyDictionary()
        self._half_checked: set[int] = set()

    # -- installation --------------------------------------------------------------------------

    def install(self) -> None:
        import torch.nn.utils as utils
        import torch.nn.utils.clip_grad as clip_grad

        # Where each optimizer was made (the user's line), for AMP303.
        original_init = torch.optim.Optimizer.__init__
        sites = self._optimizer_sites

        def observed_init(optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
            original_init(optimizer, *args, **kwargs)
            try:
                sites[optimizer] = user_site()
            except TypeError:  # not weak-referenceable: no site
                pass

        self._saved.append((torch.optim.Optimizer, "__init__", original_init))
        torch.optim.Optimizer.__init__ = observed_init  # type: ignore[method-assign, assignment]  # until remove()

        for namespace in (utils, clip_grad):
            for name in CLIP_FUNCTIONS:
                original = getattr(namespace, name, None)
                if original is None:
                    continue
                self._saved.append((namespace, name, original))
                setattr(namespace, name, self._traced_clip(original, name))

    def remove(self) -> None:
        for namespace, name, original in reversed(self._saved):
            setattr(namespace, name, original)
        self._saved.clear()

    def _traced_clip(self, original: Any, name: str) -> Any:
        watch = self

        def traced(parameters: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(parameters, types.GeneratorType):
                params = list(parameters)
                parameters = _replay(params)
            elif isinstance(parameters, torch.Tensor):
                params = [parameters]
            else:
                parameters = list(parameters)
                params = parameters
            try:
                watch.clipping(params, name)
            except Exception as exc:  # never break the script
                watch._session.instrument_failed("clip watch", exc)
            return original(parameters, *args, **kwargs)

        traced.__wrapped__ = original  # type: ignore[attr-defined]  # as functools.wraps sets it
        traced.__name__ = getattr(original, "__name__", name)
        traced.__doc__ = getattr(original, "__doc__", None)
        return traced

    # -- events from the session ---------------------------------------------------------------

    def scaled(self, scaler: Any) -> None:
        self._scaling[id(scaler)] = scaler
        if id(scaler) not in self.scaler_names:
            name = _receiver(user_site(), "scale")
            if name:
                self.scaler_names[id(scaler)] = name

    def updated(self, scaler: Any) -> None:
        self._scaling.pop(id(scaler), None)
        if not self._scaling:
            self._plain_backward_since_update = False

    def backward(self, scaled: bool, autocast_on: bool) -> None:
        if not scaled:
            self._plain_backward_since_update = True
            self._plain_backward_site = user_site()
        if autocast_on:
            self._record("AMP101", "backward", user_site())

    def optimizer_seen(self, optimizer: Any) -> None:
        self._optimizers[id(optimizer)] = optimizer
        if id(optimizer) in self._half_checked:
            return
        self._half_checked.add(id(optimizer))
        half = any(
            isinstance(p, torch.Tensor) and p.dtype == torch.float16 and p.requires_grad
            for group in optimizer.param_groups
            for p in group["params"]
        )
        if half:
            self._record("AMP303", type(optimizer).__name__, self._optimizer_sites.get(optimizer))

    def plain_step(self, optimizer: Any) -> None:
        """``optimizer.step()`` called outside ``scaler.step``."""
        self.optimizer_seen(optimizer)
        scaler = self._scaling_for(optimizer, stepping=True)
        if scaler is not None:
            site = user_site()
            self._record("AMP203", "step", site, scaler=scaler, optimizer=_receiver(site, "step"))

    def scaler_step(self, scaler: Any, optimizer: Any, unscaling: bool = False) -> None:
        """``scaler.step(optimizer)`` (or ``unscale_``) is about to run: stepped already since
        the last ``update()`` is a missing update (torch raises next); another scaler stepped
        this optimizer before is a scaler made anew (per epoch, per iteration)."""
        self.optimizer_seen(optimizer)
        state = scaler._per_optimizer_states.get(id(optimizer))
        if state is not None and state.get("stage") is OptState.STEPPED:
            self._record("AMP202", "unscale_" if unscaling else "step", user_site(), scaler=scaler)
        if id(scaler) not in self._scaling and self._plain_backward_since_update:
            # Nothing this scaler scaled since its last update, a plain backward instead.
            self._record("AMP204", "backward", self._plain_backward_site, scaler=scaler)
        if unscaling:
            return
        previous = self._steppers.get(id(optimizer))
        if previous is not None and previous() is not scaler and id(scaler) not in self._took_over:
            from .scaler import creation_sites, resumed

            self._took_over.add(id(scaler))
            if scaler not in resumed:
                self._record("AMP205", "GradScaler", creation_sites.get(scaler), scaler=scaler)
        self._steppers[id(optimizer)] = weakref.ref(scaler)

    def clipping(self, params: list[Any], name: str) -> None:
        grads = [p for p in params if isinstance(p, torch.Tensor) and p.grad is not None]
        if not grads:
            return
        scaler = self._scaling_for(None, params=grads)
        if scaler is not None:
            self._record("AMP201", name, user_site(), scaler=scaler)

    # -- helpers ----------------------------------------------------------------------------------

    def _scaling_for(self, optimizer: Any, params: Optional[list[torch.Tensor]] = None, stepping: bool = False) -> Any:
        """The scaler whose scaled gradients ``optimizer`` (or ``params``) holds right now, or
        None when that is not certain."""
        if self._plain_backward_since_update:
            return None
        for scaler in list(self._scaling.values()):
            states = scaler._per_optimizer_states
            if optimizer is not None:
                state = states.get(id(optimizer))
                if state is None or state.get("stage") is OptState.READY:
                    return scaler
                continue
            unscaled = [key for key, state in states.items() if state.get("stage") is not OptState.READY]
            if not unscaled:
                return scaler
            wanted = {id(p) for p in params or ()}
            for key in unscaled:
                known = self._optimizers.get(key)
                if known is None:
                    break  # an optimizer not seen yet was unscaled: it may hold these parameters
                if any(id(p) in wanted for group in known.param_groups for p in group["params"]):
                    break
            else:
                return scaler
        return None

    def _record(
        self, code: str, what: str, site: Optional[tuple[str, int]], scaler: Any = None, optimizer: Optional[str] = None
    ) -> None:
        events = self._session.observations.protocol_events
        for event in events:
            if event.code == code and event.site == site:
                event.count += 1
                return
        step = self._session.observations.steps + 1
        name = self.scaler_names.get(id(scaler)) if scaler is not None else None
        events.append(ProtocolEvent(code, site, step, what, scaler=name, optimizer=optimizer))


def _replay(items: list[Any]) -> Iterator[Any]:
    """A generator over ``items``: what a clipping function given a generator expects."""
    yield from items


def _receiver(site: Optional[tuple[str, int]], method: str) -> Optional[str]:
    """The name a call of ``.method(`` is made on in the user's line (``scaler`` in
    ``scaler.scale(loss).backward()``), if the line says it plainly."""
    if site is None:
        return None
    import linecache
    import re

    line = linecache.getline(site[0], site[1])
    match = re.search(rf"([A-Za-z_][\w.]*)\s*\.\s*{method}\s*\(", line)
    return match.group(1) if match else None
