"""AMP1xx: what runs inside autocast regions."""

from __future__ import annotations

from typing import Iterable, Optional

from ..facts import DTYPES, HALF_TENSOR_TYPES, AmpFacts, CallSite, Enabled, EventKind, string_value
from . import LintRule, Report, register


def _where(site: CallSite) -> str:
    region = site.region
    if region is not None and region.enabled is Enabled.MAYBE:
        return "inside an autocast region that may be enabled"
    return "inside an autocast region"


@register
class BackwardInAutocast(LintRule):
    code = "AMP101"
    tokens = ("autocast",)

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        for event in facts.events(EventKind.BACKWARD, EventKind.SCALED_BACKWARD):
            site = event.call
            if not site.in_autocast:
                continue
            what = "torch.autograd.backward()" if site.qname else "backward()"
            yield Report(
                self.code,
                site.node,
                f"`{what}` runs {_where(site)}; backward ops would reuse the forward's autocast dtypes",
                help="Close the `with autocast(...)` block after the loss is computed and call backward outside it",
                statement=site.statement,
            )


@register
class StepInAutocast(LintRule):
    code = "AMP102"
    tokens = ("autocast",)

    _LABEL = {
        EventKind.SCALER_STEP: "scaler.step()",
        EventKind.OPTIMIZER_STEP: "optimizer.step()",
        EventKind.UPDATE: "scaler.update()",
    }

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        for event in facts.events(*self._LABEL):
            site = event.call
            if not site.in_autocast:
                continue
            receiver = site.receiver or ""
            label = f"{receiver}.{site.method}()" if receiver else self._LABEL[event.kind]
            yield Report(
                self.code,
                site.node,
                f"`{label}` runs {_where(site)}; the parameter update should not be autocast",
                help="Move the optimizer step and scaler update out of the `with autocast(...)` block",
                statement=site.statement,
            )


def _downcast_dtype(site: CallSite, facts: AmpFacts) -> Optional[str]:
    """float16/bfloat16 when the call is ``.half()``, ``.bfloat16()``, ``.to(<half>)`` or ``.type(<half>)``."""
    if site.method == "half" and not site.node.args:
        return "float16"
    if site.method == "bfloat16" and not site.node.args:
        return "bfloat16"
    if site.method == "to":
        for arg in site.node.args:
            if arg.star or (arg.keyword is not None and arg.keyword.value != "dtype"):
                continue
            dtype = DTYPES.get(facts.qualify(arg.value) or "")
            if dtype in ("float16", "bfloat16"):
                return dtype
        return None
    if site.method == "type" and len(site.node.args) >= 1:
        arg = site.node.args[0]
        name = facts.qualify(arg.value) or ""
        dtype = HALF_TENSOR_TYPES.get(name) or DTYPES.get(name)
        if dtype is None:
            text = string_value(arg.value) or ""
            dtype = HALF_TENSOR_TYPES.get(text)
        if dtype in ("float16", "bfloat16"):
            return dtype
    return None


@register
class DowncastInAutocast(LintRule):
    code = "AMP103"
    tokens = ("autocast",)

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        for site in facts.calls:
            if site.method not in ("half", "bfloat16", "to", "type") or not site.in_autocast:
                continue
            dtype = _downcast_dtype(site, facts)
            if dtype is None:
                continue
            call_text = f"{site.method}()" if site.method in ("half", "bfloat16") else f"{site.method}(torch.{dtype})"
            yield Report(
                self.code,
                site.node,
                f"manual `.{call_text}` {_where(site)}: it forces {dtype} onto ops that autocast keeps in float32",
                help="Remove the cast and let autocast choose the precision per op",
                statement=site.statement,
            )

