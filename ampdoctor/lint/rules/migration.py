"""AMP402–AMP403: mixed precision set up twice, or with an API that torch.amp replaced."""

from __future__ import annotations

from collections.abc import Iterable

from ..facts import AUTOCAST_NAMES, FUNCTION_TYPES, GRAD_SCALER_NAMES, AmpFacts, autocast_region
from ..gate import Anchors
from . import LintRule, Report, register

# apex.amp function → what replaces it in torch.amp
_APEX_REPLACEMENTS = {
    "initialize": "keep the model and optimizer in float32, run the forward under "
    '`torch.autocast("cuda", dtype=torch.float16)` and create a `torch.amp.GradScaler("cuda")`',
    "scale_loss": "use `scaler.scale(loss).backward()` with a `torch.amp.GradScaler`",
    "master_params": "use the model's own parameters after `scaler.unscale_(optimizer)`",
    "state_dict": "save `scaler.state_dict()` of the `torch.amp.GradScaler`",
    "load_state_dict": "restore with `scaler.load_state_dict(...)` of the `torch.amp.GradScaler`",
}
_APEX_DEFAULT = 'use `torch.autocast("cuda", ...)` and `torch.amp.GradScaler("cuda")`'


@register
class ApexAmp(LintRule):
    code = "AMP402"
    tokens = ("apex",)
    anchors = Anchors(names=("apex",))

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        reported_calls = False
        for site in facts.calls:
            qname = site.qname or ""
            if not qname.startswith("apex.amp."):
                continue
            function = qname[len("apex.amp."):]
            if "." in function:
                continue  # ``amp.foo.bar()``: not one of apex.amp's functions
            reported_calls = True
            replacement = _APEX_REPLACEMENTS.get(function, _APEX_DEFAULT)
            yield Report(
                self.code,
                site.node.func,
                f"`apex.amp.{function}` is NVIDIA's deprecated AMP; torch.amp replaces it: {replacement}",
                help="Migrate to torch.amp: `torch.autocast` around the forward and `torch.amp.GradScaler` for the loss",
                statement=site.statement,
            )
        if reported_calls:
            return  # every call is reported; the import goes away with them
        for ref in facts.import_refs:
            if ref.qname == "apex.amp" or ref.qname.startswith("apex.amp."):
                yield Report(
                    self.code,
                    ref.alias if hasattr(ref.alias, "lineno") else ref.node,  # aliases have positions from 3.10
                    "`apex.amp` is NVIDIA's deprecated AMP: use torch.amp "
                    '(`torch.autocast("cuda", ...)` and `torch.amp.GradScaler("cuda")`)',
                    help="Migrate to torch.amp and drop the apex dependency for mixed precision",
                )
                return


_TRAINER_BASES = {
    "transformers.Trainer",
    "transformers.trainer.Trainer",
    "transformers.Seq2SeqTrainer",
    "transformers.trainer_seq2seq.Seq2SeqTrainer",
}
_TRAINER_HOOKS = {"compute_loss", "training_step"}


@register
class TrainerDoubleAmp(LintRule):
    code = "AMP403"
    tokens = ("Trainer",)
    anchors = Anchors(names=("transformers",))

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        hooks = set()
        for cls, bases in facts.classes:
            if not any(b in _TRAINER_BASES for b in bases):
                continue
            for statement in cls.body:
                if isinstance(statement, FUNCTION_TYPES) and statement.name in _TRAINER_HOOKS:
                    hooks.add(id(statement))
        if not hooks:
            return
        for site in facts.calls:
            if not _inside(site.frame, hooks):
                continue
            if site.qname in AUTOCAST_NAMES:
                made = autocast_region(site.node, facts.imports)
                if made is not None and not made.enabled.counts_as_on:
                    continue  # switching autocast off for a part of the loss is fine
                what = "torch.autocast"
            elif site.qname in GRAD_SCALER_NAMES:
                what = "GradScaler"
            else:
                continue
            hook = _hook_name(site.frame, hooks)
            yield Report(
                self.code,
                site.node,
                f"`{what}` inside `Trainer.{hook}`: the Trainer already applies mixed precision when "
                "`fp16=True`/`bf16=True`, so AMP is applied twice (or fights the Trainer's own scaler)",
                help="Remove it and set `fp16=True` or `bf16=True` in `TrainingArguments`",
                statement=site.statement,
            )


def _inside(frame, hooks: set[int]) -> bool:
    while frame is not None:
        if id(frame.node) in hooks:
            return True
        frame = frame.parent
    return False


def _hook_name(frame, hooks: set[int]) -> str:
    while frame is not None:
        if id(frame.node) in hooks:
            return frame.name
        frame = frame.parent
    return "compute_loss"
