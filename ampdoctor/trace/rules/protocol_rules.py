"""The GradScaler protocol mistakes seen at run time (``protocol.py``), reported with lint's
codes (AMP101, AMP201-AMP205, AMP303) at the user's line, with the user's own variable names
where the line shows them. A numeric finding that such a mistake invalidates is withheld by
``evaluate`` (``rules/__init__.py`` ``WITHHOLDS``); the finding says so."""

from __future__ import annotations

import linecache
import re
from collections.abc import Iterator
from typing import Optional

from ...findings import Finding, Location
from ..observations import Observations
from ..protocol import ProtocolEvent
from ..rulebase import Locator, Thresholds, make_finding, rule


def _argument(site: Optional[tuple[str, int]], method: str) -> Optional[str]:
    """The first argument of ``.method(NAME`` on the user's line, if it is a plain name."""
    if site is None:
        return None
    match = re.search(rf"\.\s*{method}\s*\(\s*([A-Za-z_][\w.]*)\s*[,)]", linecache.getline(site[0], site[1]))
    return match.group(1) if match else None


def _framework_clip_hint() -> str:
    """Where the framework the script used clips after unscaling (it unscales there itself)."""
    import sys

    if "lightning" in sys.modules or "pytorch_lightning" in sys.modules:
        return (
            " With Lightning, clip in `on_before_optimizer_step` (after Lightning unscales) or set "
            "`Trainer(gradient_clip_val=...)`, not in `on_after_backward`."
        )
    if "accelerate" in sys.modules:
        return (
            " With Accelerate, `accelerator.clip_grad_norm_(...)` unscales before it clips, but only "
            'when the Accelerator was made with `mixed_precision="fp16"`.'
        )
    return ""


def _where(event: ProtocolEvent, locator: Locator) -> Location:
    return locator.at(event.site)


def _times(event: ProtocolEvent) -> str:
    return "once" if event.count == 1 else f"{event.count} times"


def _names(observations: Observations, event: ProtocolEvent) -> tuple[str, str]:
    scaler = event.scaler or "scaler"
    optimizer = event.optimizer or _argument(observations.step_site, "step") or "optimizer"
    return scaler, optimizer


def _events(observations: Observations, code: str) -> list[ProtocolEvent]:
    return [event for event in observations.protocol_events if event.code == code]


@rule("AMP201")
def clip_of_scaled_gradients(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    for event in _events(observations, "AMP201"):
        scaler, optimizer = _names(observations, event)
        message = (
            f"`{event.what}` clipped gradients that were still multiplied by the loss scale "
            f"({_times(event)}, first at iteration {event.step}): `{scaler}.unscale_({optimizer})` "
            "had not run since the scaled backward, so the threshold met gradients thousands of "
            "times too large and shrank every step by a factor that moves with the scale."
        )
        help_text = (
            f"Unscale right before clipping: `{scaler}.scale(loss).backward()`, "
            f"`{scaler}.unscale_({optimizer})`, then `{event.what}(...)`, `{scaler}.step({optimizer})`, "
            f"`{scaler}.update()`." + _framework_clip_hint()
        )
        yield make_finding("AMP201", message, _where(event, locator), help_text, step=event.step, at_run_time=True)


@rule("AMP101")
def backward_in_autocast(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    for event in _events(observations, "AMP101"):
        message = (
            f"backward() ran inside an enabled autocast region ({_times(event)}, first at iteration "
            f"{event.step}): autocast is meant for the forward pass and the loss; the backward "
            "ops already run in the dtypes autocast chose for their forward ops."
        )
        help_text = "Leave the `with torch.autocast(...)` block before calling `backward()` (dedent the backward call)."
        yield make_finding("AMP101", message, _where(event, locator), help_text, step=event.step, at_run_time=True)


@rule("AMP202")
def step_without_update(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    for event in _events(observations, "AMP202"):
        scaler, optimizer = _names(observations, event)
        # Where the user adds the update: beside the step (the mistake may surface in unscale_).
        site = observations.step_site or event.site
        if event.what == "unscale_":
            message = (
                f"`{scaler}.unscale_({optimizer})` was called after `{scaler}.step({optimizer})` without "
                f"`{scaler}.update()` in between (iteration {event.step}): the loss scale never adapts, and "
                "torch refuses to unscale again."
            )
        else:
            message = (
                f"`{scaler}.step({optimizer})` was called again without `{scaler}.update()` since its "
                f"last step (iteration {event.step}): the loss scale never adapts, and torch refuses a "
                "second step."
            )
        help_text = f"Call `{scaler}.update()` once per iteration, after the last `{scaler}.step(...)`."
        where = locator.at(site)
        yield make_finding("AMP202", message, where, help_text, step=event.step, at_run_time=True)


@rule("AMP204")
def unscaled_backward(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    for event in _events(observations, "AMP204"):
        scaler, _optimizer = _names(observations, event)
        message = (
            f"`{scaler}` stepped gradients from a plain `backward()` that it never scaled (first at "
            f"iteration {event.step}): the loss was not passed through `{scaler}.scale(...)`, so the "
            "scaler's unscale and inf checks do not match the gradients (torch fails when the scaler has "
            "not scaled anything yet)."
        )
        help_text = (
            f"Back-propagate the scaled loss: `{scaler}.scale(loss).backward()` (with Accelerate, "
            "`accelerator.backward(loss)`)."
        )
        yield make_finding("AMP204", message, _where(event, locator), help_text, step=event.step, at_run_time=True)


@rule("AMP303")
def half_model_training(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    for event in _events(observations, "AMP303"):
        message = (
            f"the {event.what} optimizer steps float16 parameters (the model was made float16, e.g. with "
            "`.half()`): there are no float32 master weights, so updates smaller than the weights' "
            "float16 spacing round away, and Adam-style optimizers divide by an eps that is 0 in float16."
        )
        help_text = (
            "Keep the model and the optimizer in float32 and get float16 speed from "
            "`torch.autocast(device, dtype=torch.float16)` with a `torch.amp.GradScaler`; drop `.half()`."
        )
        yield make_finding("AMP303", message, _where(event, locator), help_text, step=event.step, at_run_time=True)


@rule("AMP205")
def scaler_made_anew(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    for event in _events(observations, "AMP205"):
        scaler, optimizer = _names(observations, event)
        made = "was made again" if event.count == 1 else f"was made again {event.count} times"
        message = (
            f"a new GradScaler took over `{optimizer}` at iteration {event.step}: `{scaler}` {made} "
            "while training went on, so each one starts again from its initial scale, skipping steps "
            "while it calibrates, and the scale learned so far is lost."
        )
        help_text = f"Create `{scaler}` once, before the training loop, and keep it for the whole run."
        yield make_finding("AMP205", message, _where(event, locator), help_text, step=event.step, at_run_time=True)


@rule("AMP203")
def step_around_the_scaler(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    for event in _events(observations, "AMP203"):
        scaler = event.scaler or "scaler"
        optimizer = event.optimizer or "optimizer"
        message = (
            f"`{optimizer}.step()` ran on gradients of a loss that `{scaler}` scaled, without "
            f"`{scaler}.step({optimizer})` ({_times(event)}, first at iteration {event.step}): the "
            "update used gradients multiplied by the loss scale, and steps with inf/NaN gradients "
            "are not skipped."
        )
        help_text = f"Step through the scaler: `{scaler}.step({optimizer})` then `{scaler}.update()`."
        yield make_finding("AMP203", message, _where(event, locator), help_text, step=event.step, at_run_time=True)
