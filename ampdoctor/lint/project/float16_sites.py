"""The parts of a module's summary that float16 autocast set up elsewhere asks about.


A module that never mentions float16 may still run under it: Lightning's ``Trainer(precision=
"16-mixed")`` runs the LightningModule's steps in float16 autocast, and a training script's
``with torch.autocast("cuda", dtype=torch.float16, enabled=args.fp16): out = model(x)`` runs the
model's ``forward`` and every submodule it calls in it. Three parts of the summary let the
project pass follow that (``float16_reach.py``):

``uses``       per function: the calls that may land in project code, as spelled (``self.attn``,
               ``self``, ``helpers.mask``, a local object of a project class), so that the
               functions an autocast region reaches can be followed from module to module
``half_risks`` per function: what float16 autocast would break there, outside any autocast
               region of the function's own: a fill with a constant beyond float16's range
               (AMP301) and ``binary_cross_entropy`` / ``nn.BCELoss`` (AMP105)
``framework``  per module: a Lightning ``Trainer`` or ``Fabric`` made with a mixed precision
               written as a literal (its dtype, and its ``accelerator=`` when literal), bound once, and the calls that hand it a model
               (``trainer.fit(model)``, ``fabric.setup(model, ...)``) with the model as spelled
"""

from __future__ import annotations

import ast

from ..model import AmpFacts, Assignment, CallSite, Frame
from ..rules.float16_range import _FILL_FUNCTIONS as _AMP301_FUNCTIONS
from ..rules.float16_range import _FILL_METHODS as _AMP301_METHODS
from ..rules.float16_range import _explicit_non_half, float32_receiver, overflowing_fills
from ..rules.region_contents import _BCE_FUNCTIONS, _BCE_MODULES, _bound_to_bce
from ..syntax import number_value, span, string_value

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable

    from .shapes import FrameworkRun, FunctionSummary, HalfRisk

# AMP301's fills whose value is written into the tensor's own dtype: on a float16 tensor torch
# raises for a value past 65504 (``masked_fill``, ``fill_``, ``new_full``, ``full_like``), or the
# value becomes ±inf (``torch.where``). Clamps are left out (a bound past the range does not
# change the data), and ``torch.full`` too (float32 unless its dtype says otherwise).
_FILL_METHODS = {name: slots for name, slots in _AMP301_METHODS.items() if not name.startswith(("clamp", "clip"))}
_FILL_FUNCTIONS = {
    name: slots for name, slots in _AMP301_FUNCTIONS.items() if name not in ("torch.full", "torch.clamp", "torch.clip")
}
# Lightning's mixed precision, as ``precision=`` spells it (1.x and 2.x) → the autocast dtype.
_MIXED = {"16-mixed": "float16", "16": "float16", "bf16-mixed": "bfloat16", "bf16": "bfloat16"}
_LIGHTNING = ("lightning.", "pytorch_lightning.", "lightning_fabric.")
# What a Trainer or a Fabric does with the model handed to it, by method.
_HANDS_MODEL = {"Trainer": ("fit", "validate", "test", "predict"), "Fabric": ("setup", "setup_module")}


def add_float16_parts(
    facts: AmpFacts,
    frames: list[tuple[str, Frame]],
    functions: dict[str, FunctionSummary],
    imports: dict[str, str],
    local_names: set[str],
    instances: dict[str, str],
) -> None:
    """Add ``uses`` and ``half_risks`` to the summaries of the functions ``frames`` names."""
    losses = bce_losses(facts)
    for name, frame in frames:
        uses = function_uses(frame, name, imports, local_names, instances)
        if uses:
            functions[name]["uses"] = uses
        risks = half_risks(facts, frame, losses)
        if risks:
            functions[name]["half_risks"] = risks


# ---------------------------------------------------------------------------------------
# Calls that may land in project code
# ---------------------------------------------------------------------------------------


def function_uses(
    frame: Frame, frame_name: str, imports: dict[str, str], local_names: set[str], instances: dict[str, str]
) -> list[str]:
    """The spellings of the calls ``frame`` makes that the linker may resolve, in order, once
    each: ``self(...)``, ``self.m``, ``self.x.m``, a function or ``Class.method`` of the module,
    an import of the project, or an object of a class bound once (``model(x)``)."""
    found: dict[str, None] = {}
    for site in frame.calls:
        if site.qname is not None and (site.qname == "torch" or site.qname.startswith("torch.")):
            continue
        spelled = site.spelled
        if spelled is None:
            continue
        parts = spelled.split(".")
        head = parts[0]
        if head in ("self", "cls"):
            keep = len(parts) <= 3
        elif head in imports:
            target = imports[head]
            keep = len(parts) <= 3 and not target.startswith(("torch", "numpy", "math", "os", "sys"))
        elif head in local_names:
            keep = len(parts) <= 2
        else:
            keep = len(parts) <= 2 and (f"{frame_name}:{head}" in instances or f"<module>:{head}" in instances)
        if keep:
            found[spelled] = None
    return list(found)


# ---------------------------------------------------------------------------------------
# What float16 autocast would break
# ---------------------------------------------------------------------------------------


def half_risks(facts: AmpFacts, frame: Frame, losses: list[Assignment]) -> list[HalfRisk]:
    """The fills with a constant past float16's range and the BCE calls of ``frame`` made
    outside any autocast region of its own (inside one, the file's own rules judge them)."""
    risks: list[HalfRisk] = []
    for site in frame.calls:
        if site.region is not None:
            continue
        if site.qname in _BCE_FUNCTIONS:
            risks.append({"code": "AMP105", "at": span(site.node), "what": "binary_cross_entropy"})
            continue
        name = site.spelled
        if losses and name is not None and site.qname is None and any(a.target == name for a in losses):
            if _bound_to_bce(facts, name, frame, losses):
                risks.append({"code": "AMP105", "at": span(site.node), "what": "nn.BCELoss"})
                continue
        risk = _fill_risk(facts, site)
        if risk is not None:
            risks.append(risk)
    return risks


def bce_losses(facts: AmpFacts) -> list[Assignment]:
    """The assignments that bind an ``nn.BCELoss()`` (as AMP105 finds them)."""
    return [
        a for a in facts.assignments if isinstance(a.value, ast.Call) and facts.qualify(a.value.func) in _BCE_MODULES
    ]


def _fill_risk(facts: AmpFacts, site: CallSite) -> HalfRisk | None:
    if site.qname is not None:
        slots = _FILL_FUNCTIONS.get(site.qname)
        if slots is None or (site.qname == "torch.full_like" and _explicit_non_half(site, facts)):
            return None
    else:
        slots = _FILL_METHODS.get(site.method or "")
        if slots is None:
            return None
        # The receiver made right there by a factory naming another dtype is one of these too.
        if (site.method == "new_full" and _explicit_non_half(site, facts)) or float32_receiver(facts, site):
            return None
    found = next(overflowing_fills(site, slots), None)
    if found is None:
        return None
    fill, value = found
    return {
        "code": "AMP301",
        "at": span(fill),
        "text": facts.text(fill),
        "label": site.qname or f".{site.method}()",
        "bound": "min" if value < 0 else "max",
        "receiver": site.receiver if site.qname is None else None,
    }


# ---------------------------------------------------------------------------------------
# Lightning's Trainer and Fabric with float16 mixed precision
# ---------------------------------------------------------------------------------------


def framework_runs(facts: AmpFacts, qualname: Callable[[Frame], str | None]) -> list[FrameworkRun]:
    """``trainer = Trainer(precision="16-mixed")`` (or ``"bf16-mixed"``, or ``Fabric``), bound once, and each call in
    the same function that hands it a model named by a plain name (``trainer.fit(model)``);
    also ``Trainer(precision=16).fit(model)`` in one expression."""
    runs: list[FrameworkRun] = []
    for site in facts.calls:
        api = _lightning_api(site.qname)
        if api is None:
            continue
        precision = site.arg(None, "precision")
        if precision is None:
            continue
        dtype = _MIXED.get(_precision_text(precision.value) or "")
        if dtype is None and type(precision.value) is ast.Name:
            # ``precision = 16 if config.use_mixed_precision else 32``: float16 on one path.
            settings = facts.assigned(site.frame, precision.value.id)
            arms = [n for a in settings for n in ast.walk(a.value) if type(n) is ast.Constant]
            dtype = next(
                (_MIXED[t] for n in arms if (t := _precision_text(n)) in _MIXED and _MIXED[t] == "float16"), None
            )
        if dtype is None:
            continue
        accelerator = site.arg(None, "accelerator")
        frame_name = qualname(site.frame)
        if frame_name is None:
            continue
        made: FrameworkRun = {
            "api": api,
            "at": span(precision.value),
            "precision": facts.text(precision.value),
            "dtype": dtype,
            "accelerator": string_value(accelerator.value) if accelerator is not None else None,
            "frame": frame_name,
        }
        statement = site.statement
        bound = None
        if (
            isinstance(statement, ast.Assign)
            and statement.value is site.node
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
        ):
            bound = statement.targets[0].id
            if len(facts.assigned(site.frame, bound)) != 1:
                continue
        for use in site.frame.calls:
            if use.method not in _HANDS_MODEL[api]:
                continue
            func = use.node.func
            if not (use.receiver == bound and bound is not None) and not (
                isinstance(func, ast.Attribute) and func.value is site.node
            ):
                continue
            model = use.arg(0, "model" if api == "Trainer" else "module")
            if model is None or model.star or not isinstance(model.value, ast.Name):
                continue
            runs.append({**made, "call": span(use.node), "model": model.value.id})
    return runs


def _lightning_api(qname: str | None) -> str | None:
    if qname is None or not qname.startswith(_LIGHTNING):
        return None
    last = qname.rsplit(".", 1)[-1]
    return last if last in _HANDS_MODEL else None


def _precision_text(expr: ast.expr) -> str | None:
    text = string_value(expr)
    if text is not None:
        return text
    value = number_value(expr)
    return str(int(value)) if isinstance(expr, ast.Constant) and type(expr.value) is int and value is not None else None
