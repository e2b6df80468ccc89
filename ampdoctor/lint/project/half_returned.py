"""AMP303 across functions: a helper returns a model it made float16 (``returns_half``), and a
caller builds an optimizer over that model's parameters (``trains_returned``): float16 weights
updated in place, with no float32 master copy. Reported at the conversion, the place to change
(keep the model float32 and autocast the forward), with the optimizer as a related location.
Every condition must hold: the call resolves to the helper, the element the caller trains is
the one the helper converted, and nothing converts it back in the caller."""

from __future__ import annotations

from collections.abc import Iterator

from .callsites import callers_of
from .link import Project
from .reports import Callers, CrossReport


def half_model_trained(project: Project, targets: list[str], callers: Callers) -> Iterator[CrossReport]:
    for module in targets:
        summary = project.summary(module)
        if summary is None:
            continue
        for name, function in summary.get("functions", {}).items():
            half = function.get("returns_half")
            if half is None:
                continue
            for caller, call, _target in callers_of(project, callers, "parameters", module, name):
                caller_function = (project.summary(caller) or {}).get("functions", {}).get(call.get("frame", ""), {})
                for trained in caller_function.get("trains_returned", []):
                    if trained["callee"] != call["callee"] or trained["index"] != half["index"]:
                        continue
                    if trained["at"][0] < call["at"][0]:
                        continue  # an optimizer built before this call: another binding's
                    short = name.rsplit(".", 1)[-1]
                    yield CrossReport(
                        "AMP303",
                        module,
                        half["at"],
                        f"`{short}` returns `{half['name']}` made float16, and `{call.get('frame')}` builds an optimizer "
                        f"over its parameters (as `{trained['model']}`): without float32 master weights, updates "
                        "smaller than float16's resolution are lost",
                        'Keep the model in float32 and use `torch.autocast("cuda", dtype=torch.float16)` with '
                        "`torch.amp.GradScaler`, or give the optimizer float32 master copies of the parameters",
                        [(caller, trained["at"], "the optimizer over the float16 parameters")],
                    )
                    break
