"""AMP402–AMP403: mixed precision set up twice, or with an API that torch.amp replaced."""

from __future__ import annotations

from collections.abc import Iterable

from ..anchors import Anchors
from ..fixes import ModuleRewrite
from ..model import AmpFacts, autocast_region
from ..syntax import FUNCTION_TYPES
from ..vocabulary import AUTOCAST_NAMES, GRAD_SCALER_NAMES
from . import LintRule, Report, register

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from ..model import Frame

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


_PARALLEL_REPLACEMENTS = {
    "DistributedDataParallel": "`torch.nn.parallel.DistributedDataParallel`",
    "convert_syncbn_model": "`torch.nn.SyncBatchNorm.convert_sync_batchnorm`",
}


def _apex_on_purpose(path: str) -> bool:
    """A module whose name says it is about apex (``benchmark_nvidia_apex.py``, an
    ``apex_backend.py``), or a test module (a test of an apex backend exercises it on purpose):
    its apex is what it is for, not a migration left undone."""
    parts = path.replace("\\", "/").split("/")
    name = parts[-1].lower()
    stem = name[:-3] if name.endswith(".py") else name
    if "apex" in stem.split("_"):
        return True
    return any(part in ("test", "tests") for part in parts[:-1]) or stem.startswith("test_")


@register
class ApexAmp(LintRule):
    code = "AMP402"
    tokens = ("apex",)
    anchors = Anchors(names=("apex",))

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if _apex_on_purpose(facts.path):
            return
        calls = list(self._calls(facts))
        if not calls:
            yield from self._import(facts)
            return  # an import alone: nothing to migrate but the import
        from ..apex.plan import plan_migration  # only for a module that calls apex

        plan = plan_migration(facts)
        todos = {reported: text for _line, text, reported in plan.todos}
        for number, (report, explained) in enumerate(calls):
            if plan.blocker is not None:
                if not explained:
                    report.message += f" (not migrated automatically: {plan.blocker})"
            elif (line := getattr(report.statement, "lineno", None)) in todos:
                report.message += f" (the fix leaves a `# TODO(ampdoctor)` comment: {todos[line]})"
            if number == 0 and plan.blocker is None:
                report.fix = ModuleRewrite(
                    "Migrate the module from apex to torch.amp (autocast and GradScaler)",
                    rewrite=("ampdoctor.lint.apex.migration", "migrate", plan),
                )
            yield report

    def _calls(self, facts: AmpFacts) -> Iterable[tuple[Report, bool]]:
        """A report per apex call, and whether its message already says why it is not migrated."""
        for site in facts.calls:
            qname = site.qname or ""
            package, _, function = qname[len("apex.") :].partition(".") if qname.startswith("apex.") else ("", "", "")
            if "." in function or package not in ("amp", "fp16_utils", "parallel"):
                continue  # ``amp.foo.bar()``, or apex's optimizers and layers, which are not AMP
            if package == "amp":
                replacement = _APEX_REPLACEMENTS.get(function, _APEX_DEFAULT)
                message = f"`apex.amp.{function}` is NVIDIA's deprecated AMP; torch.amp replaces it: {replacement}"
            elif package == "parallel":
                if function not in _PARALLEL_REPLACEMENTS:
                    continue
                message = f"`apex.parallel.{function}` is deprecated; use {_PARALLEL_REPLACEMENTS[function]}"
            else:
                from ..apex.plan import FP16_UTILS

                reason = FP16_UTILS.get(function, "it has no direct torch equivalent")
                message = (
                    f"`apex.fp16_utils.{function}` is NVIDIA's deprecated mixed precision and is not migrated "
                    f"automatically: {reason}"
                )
            report = Report(
                self.code,
                site.node.func,
                message,
                help="Migrate to torch.amp: `torch.autocast` around the forward and `torch.amp.GradScaler` for the loss",
                statement=site.statement,
            )
            yield report, package == "fp16_utils"

    def _import(self, facts: AmpFacts) -> Iterable[Report]:
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


def _inside(frame: Frame | None, hooks: set[int]) -> bool:
    while frame is not None:
        if id(frame.node) in hooks:
            return True
        frame = frame.parent
    return False


def _hook_name(frame: Frame | None, hooks: set[int]) -> str:
    while frame is not None:
        if id(frame.node) in hooks:
            return frame.name
        frame = frame.parent
    return "compute_loss"
