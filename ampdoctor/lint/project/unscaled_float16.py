"""AMP210 across functions: float16 autocast whose scaler parameter is never given.

A training function written for both cases, ``def train_one_epoch(..., use_amp=True,
scaler=None)``, opens a float16 autocast region and scales the loss only when it is handed a
scaler (itself, or through a helper: ``engine.step(loss, scaler=scaler)``). The file-local rule
sees a GradScaler named in the module and stays silent. When no call in the project passes the
scaler, every run takes the unscaled path: float16 gradients with no loss scaling.

Certain only when every call is seen: each call that may land on the function must resolve to
it, pass no ``*``/``**`` spread, and leave the scaler out; and at least one call must exist (a
library function nobody here calls is the users' to call right). A call that resolves nowhere
but is spelled like the function, or one that passes anything at the scaler's place: silence.
"""

from __future__ import annotations

from collections.abc import Iterator

from .callsites import calls_of
from .link import Project
from .reports import Callers, CrossReport, target_functions

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from .shapes import ScalerDefault


def scaler_never_passed(project: Project, targets: list[str], callers: Callers) -> Iterator[CrossReport]:
    for module, name, function in target_functions(project, targets):
        default = function.get("scaler_default")
        if default is not None:
            report = _report(project, callers, module, name, default)
            if report is not None:
                yield report


def _report(project: Project, callers: Callers, module: str, name: str, default: ScalerDefault) -> CrossReport | None:
    short = name.rsplit(".", 1)[-1]
    seen: list[tuple[str, list[int]]] = []
    for caller, call, target in calls_of(project, callers, "any", module, name):
        if target is None:
            return None  # spelled like the function, landing who knows where
        if call.get("star") or target.arg_for(call, default["index"]) is not None:
            return None  # a scaler (or something in its place) may be passed
        seen.append((caller, call["at"]))
    if not seen:
        return None
    param = default["param"]
    return CrossReport(
        "AMP210",
        module,
        default["region"],
        f"float16 autocast, but no call of `{short}` passes `{param}`: it is None on every run, so the loss "
        "is never scaled and small float16 gradients underflow to zero",
        f"Build a `torch.amp.GradScaler` where `{short}` is called and pass it as `{param}=`, or use bfloat16",
        [(caller, at, f"`{short}` is called here without `{param}`") for caller, at in seen[:3]],
    )
