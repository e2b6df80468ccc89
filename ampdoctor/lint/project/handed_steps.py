"""AMP202 across functions: a scaler stepped, handed to helpers, and updated by none of them.

A function that scales a backward and steps the scaler, with no ``update()`` of that name in its
module, is left alone by the module's own AMP202 when it hands the scaler to another call: the
helper may update it (``finish_step(optimizer, scaler)``). Here the project decides. The
finding stands when every call the scaler is handed to lands on a project function that
neither calls ``P.update()`` on the parameter it receives nor hands that parameter on (a
diagnostic helper that only runs ``scaler.step(optimizer)``). Where the scaler is the function's
own parameter, its callers may update it after the call: every caller the project shows must
neither update the name it passes nor hand it to another call. A call that lands nowhere the
project shows, a scaler spread in ``*args``/``**kwargs``, a function nothing calls: silence.
"""

from __future__ import annotations

from collections.abc import Iterator

from .callsites import calls_of
from .link import Project, Target
from .reports import Callers, CrossReport, target_functions

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from typing import Any

    from .shapes import CallRecord, FunctionSummary


def steps_without_update(project: Project, targets: list[str], callers: Callers) -> Iterator[CrossReport]:
    for module, name, function in target_functions(project, targets):
        for entry in function.get("steps_handed", []):
            report = _report(project, callers, module, name, function, entry)
            if report is not None:
                yield report


def _report(
    project: Project, callers: Callers, module: str, name: str, function: FunctionSummary, entry: dict[str, Any]
) -> CrossReport | None:
    scaler = entry["scaler"]
    calls = [c for c in project.calls(module) if c.get("frame") == name]
    helpers: list[tuple[CallRecord, Target]] = []
    for at in entry["handed"]:
        call = next((c for c in calls if c["at"] == at), None)
        if call is None or call.get("star"):
            return None  # a call the summary does not keep (a library's), or a spread: unknown
        target = project.resolve_call(module, call)
        if target is None or _may_update(project, target, call, scaler):
            return None
        helpers.append((call, target))
    if scaler in function.get("params", []) and not _callers_leave_it(project, callers, module, name, function, scaler):
        return None
    related = [
        (module, call["at"], f"`{_short(target.name)}` is handed `{scaler}` here and never calls its `update()`")
        for call, target in helpers
    ]
    return CrossReport(
        "AMP202",
        module,
        entry["at"],
        f"`{scaler}.step()` is never followed by `{scaler}.update()`, here or in the helpers it is handed to: the "
        "loss scale never adapts, and the next `step()` raises 'step() has already been called since the last "
        "update()'",
        f"Call `{scaler}.update()` once per iteration, after the last `{scaler}.step(...)`",
        related,
    )


def _may_update(project: Project, target: Target, call: CallRecord, scaler: str) -> bool:
    """Whether the function the call lands on may update the scaler handed to it as ``scaler``:
    it calls ``P.update()`` on its parameter, or hands the parameter on, or receives it where
    the summary cannot tell which parameter (``*args``, ``**kwargs``)."""
    params = target.function.get("params", [])
    param = None
    for arg in call.get("args", []):
        if arg.get("name") != scaler:
            continue
        if "kw" in arg:
            param = arg["kw"] if arg["kw"] in params else None
        else:
            index = arg["pos"] + target.skip
            param = params[index] if index < len(params) else None
        break
    if param is None:
        return True
    if param in target.function.get("updated", []):
        return True
    return _hands_on(project, target.module, target.name, param)


def _hands_on(project: Project, module: str, frame: str, name: str) -> bool:
    return any(
        call.get("frame") == frame and any(arg.get("name") == name for arg in call.get("args", []))
        for call in project.calls(module)
    )


def _callers_leave_it(
    project: Project, callers: Callers, module: str, name: str, function: FunctionSummary, scaler: str
) -> bool:
    """Whether every call of the step function the project shows that hands it a scaler (at
    least one) hands one that the caller's function neither updates nor hands to another call."""
    index = function.get("params", []).index(scaler)
    seen = False
    for caller, call, target in calls_of(project, callers, "any", module, name):
        if target is None or call.get("star"):
            return False  # a call spelled with the name that lands nowhere: it may be this one
        arg = target.arg_for(call, index)
        if arg is None or arg.get("none"):
            continue  # the parameter's default, or ``None``: no scaler of a caller's (a validation pass)
        passed = arg.get("name")
        if passed is None:
            return False
        frame = call.get("frame")
        caller_function = (project.summary(caller) or {}).get("functions", {}).get(frame or "")
        if caller_function is None or passed in caller_function.get("updated", []):
            return False
        others = [
            c
            for c in project.calls(caller)
            if c.get("frame") == frame
            and c["at"] != call["at"]
            and any(a.get("name") == passed for a in c.get("args", []))
        ]
        if others:
            return False
        seen = True
    return seen


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]
