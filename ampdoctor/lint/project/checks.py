"""The cross-module rules: queries over linked summaries.

Each check looks at the modules being reported (``targets``) and, where it needs the other
half, at the callers anywhere in the project (``Callers``: the modules whose text names the
function and holds what the rule needs, summarized only when asked for). Every condition must hold with
certainty; a call the linker cannot resolve, a helper that also mentions a scaler, an argument
spread with ``*``/``**``: silence.

A finding is anchored where the fix goes (the call that writes an incomplete checkpoint, the
clip that needs an ``unscale_`` before it, the call made inside autocast, the scaler built on
every call) and carries related locations for the other half.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from ...codes import check_registration
from .callsites import callers_of
from .checkpoints import checkpoint_reports
from .float16_reach import bfloat16_reached, float16_elsewhere, import_edges
from .flow import Values
from .forked import Forked, can_fork
from .half_returned import half_model_trained
from .handed_steps import steps_without_update
from .link import Project, Target
from .region_calls import region_call_reports
from .reports import Callers, CrossReport, bfloat16_only, names_float16, target_functions
from .seeds import seeded_reports
from .shared import SharedSummaries, memory_folder
from .store import BACKWARD_TEXT, SummaryStore
from .unscaled_float16 import scaler_never_passed
from .update_twice import update_twice

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from typing import Any

    from .shapes import CallRecord, FunctionSummary, RegionRecord


class CheckRun:
    """What one run of the project checks hands each of them."""

    __slots__ = ("callers", "codes", "lazy", "project", "targets", "values")

    def __init__(
        self, project: Project, targets: list[str], callers: Callers, codes: frozenset[str], lazy: list[str]
    ) -> None:
        self.project = project
        self.targets = targets
        self.callers = callers
        self.codes = codes
        self.lazy = lazy
        self.values = Values(project)
        self.values.scans = len(targets) >= SCANNED_TARGETS


# Fewer targets than this (the files named on the command line that the lint pass summarized):
# the checks do not scan the project's files to spare their walks (``Values.scans``).
SCANNED_TARGETS = 24


def _name(target: Target) -> str:
    return target.name.rsplit(".", 1)[-1]


# ---------------------------------------------------------------------------------------
# AMP201: a helper clips before unscale_, the scaled backward is in its callers
# ---------------------------------------------------------------------------------------


def _clips_in_helpers(project: Project, targets: list[str], callers: Callers) -> Iterator[CrossReport]:
    for module, name, function in target_functions(project, targets):
        for clip in function.get("clips", []):
            report = _clip_report(project, callers, module, name, function, clip)
            if report is not None:
                yield report


def _clip_report(
    project: Project, callers: Callers, module: str, name: str, function: FunctionSummary, clip: dict[str, Any]
) -> CrossReport | None:
    params = function.get("params", [])
    index = params.index(clip["param"])
    # (caller, call, where the scaled backward is: (module, position, note))
    scaled: list[tuple[str, CallRecord, tuple[str, list[int], str]]] = []
    for caller, call, target in callers_of(project, callers, "scaler", module, name):
        if call.get("star"):
            return None
        arg = target.arg_for(call, index)
        if arg is None:
            return None  # called without the scaler where we can see it: not certain
        if arg.get("unscaled_before"):
            return None  # the caller unscales before the call: the clip sees true gradients
        state = arg.get("state", {})
        if arg.get("is_scaler") and state.get("kind") == "scaled":
            scaled.append((caller, call, (caller, state["backward"], "the scaled backward")))
            continue
        if arg.get("is_scaler") and state.get("kind") == "unscaled":
            return None
        # The scaled backward may be a helper's, called before with the same scaler
        # (``self.backward_step(model, scaler, loss)``, then ``self.update_step(..., scaler)``).
        helper = _scaled_by_helper(project, caller, call, arg.get("name"))
        if helper is not None:
            scaled.append((caller, call, helper))
        elif arg.get("is_scaler"):
            return None  # the caller's own scaler with no scaled backward before the call: silence
        # (a caller that passes something else, a wrapper, None: not judged)
    if not scaled:
        return None
    caller, call, backward = scaled[0]
    scaler = clip["param"]
    optimizer = clip.get("optimizer") or "optimizer"
    return CrossReport(
        "AMP201",
        module,
        clip["clip"],
        f"gradients are clipped while still multiplied by the loss scale: `{_short(name)}` receives the scaler as "
        f"`{scaler}` after a scaled backward and never calls `{scaler}.unscale_({optimizer})` before clipping",
        f"Insert `{scaler}.unscale_({optimizer})` before the clip",
        [
            (caller, call["at"], f"`{_short(name)}` is called here after the scaled backward, with no `unscale_`"),
            backward,
        ],
    )


def _scaled_by_helper(
    project: Project, caller: str, call: CallRecord, name: str | None
) -> tuple[str, list[int], str] | None:
    """Where the scaled backward is when, before ``call`` in its frame, the caller hands the
    scaler it passes (spelled ``name``) to a project function that runs ``P.scale(loss).backward()``
    on it and never unscales it (``function_parts._scales_for_caller``)."""
    if name is None:
        return None
    frame, at = call.get("frame"), call["at"]
    for inner in project.calls(caller):
        if inner.get("frame") != frame or inner["at"] >= at:
            continue
        if not any(a.get("name") == name for a in inner.get("args", [])):
            continue
        target = project.resolve_call(caller, inner)
        scales = target.function.get("scales") if target is not None else None
        if target is None or scales is None:
            continue
        handed = target.arg_for(inner, target.function.get("params", []).index(scales[0]))
        if handed is not None and handed.get("name") == name:
            helper = _short(target.name)
            return target.module, scales[1], f"the scaled backward, in `{helper}` called on line {inner['at'][0]}"
    return None


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


# ---------------------------------------------------------------------------------------
# AMP101: a helper runs backward, its caller calls it inside autocast
# ---------------------------------------------------------------------------------------


def _backward_of(project: Project, target: Target, depth: int = 0) -> tuple[str, list[int]] | None:
    at = target.function.get("backward")
    if at is not None:
        return target.module, at
    if depth >= 1:
        return None
    for inner in project.calls(target.module):
        if inner.get("frame") != target.name or "region" in inner:
            continue
        # The next level looks only at the backward its function runs itself.
        next_target = project.resolve_call(target.module, inner, without=BACKWARD_TEXT)
        if next_target is not None:
            found = _backward_of(project, next_target, depth + 1)
            if found is not None:
                return found
    return None


def _backward_under_autocast(project: Project, targets: list[str]) -> Iterator[CrossReport]:
    for module in targets:
        for call in project.region_calls(module):
            target = project.resolve_call(module, call)
            if target is None:
                continue
            found = _backward_of(project, target)
            if found is None:
                continue
            name = call["callee"]
            yield CrossReport(
                "AMP101",
                module,
                call["at"],
                f"`{name}(...)` runs a backward pass and is called inside an autocast region; backward ops would "
                "reuse the forward's autocast dtypes",
                f"Call `{name}` after the `with autocast(...)` block, or move its backward out of the region",
                [
                    (found[0], found[1], f"the backward that `{name}` runs"),
                    (module, call["region"]["at"], "the autocast region around the call"),
                ],
            )


# ---------------------------------------------------------------------------------------
# AMP205: a function that builds its own GradScaler, called from a loop elsewhere
# ---------------------------------------------------------------------------------------


def _scaler_per_call(project: Project, targets: list[str], callers: Callers) -> Iterator[CrossReport]:
    for module in targets:
        summary = project.summary(module)
        if summary is None:
            continue
        for name, function in summary.get("functions", {}).items():
            new = function.get("new_scaler")
            if new is None or function.get("builds_optimizer"):
                continue
            # A function that takes one step on its fresh scaler is wrong in any loop: its callers
            # need not speak of epochs.
            kind = "any" if new.get("single_step") else "epoch"
            for caller, call, _target in callers_of(project, callers, kind, module, name):
                if "loop" not in call or (caller == module and call.get("frame") == "<module>"):
                    continue  # a loop of the same module body: the file-local rule judges it
                if not call.get("epoch_loop") and "epoch" not in _short(name).lower() and not new.get("single_step"):
                    continue  # a loop over folds or trials may well want a fresh scaler each time
                    # (but not one that takes a single step with each fresh scaler)
                short = _short(name)
                yield CrossReport(
                    "AMP205",
                    module,
                    new["at"],
                    f"a new GradScaler is assigned to `{new['name']}` on every call of `{short}`, which a loop calls "
                    "repeatedly: the loss scale restarts at its initial value on every call and never settles",
                    f"Create the GradScaler once, before the loop, and pass it to `{short}`",
                    [(caller, call["at"], f"`{short}` is called here, in a loop")],
                )
                break
            else:
                found = _per_iteration_call(project, callers, module, name)
                if found is not None:
                    caller, call = found
                    short = _short(name)
                    yield CrossReport(
                        "AMP205",
                        module,
                        new["at"],
                        f"a new GradScaler is assigned to `{new['name']}` on every call of `{short}`, which the "
                        "training loop calls on every iteration: the loss scale restarts at its initial value each "
                        "time and never settles",
                        f"Create the GradScaler once (in `__init__`, or before the loop) and reuse it in `{short}`",
                        [(caller, call["at"], f"`{short}` is called here, on every iteration of the training loop")],
                    )


# Methods that torch, Lightning and other libraries define on their own objects: a call of one
# on an object of unknown class may well land there.
_LIBRARY_METHODS = frozenset(
    {
        "__call__", "__init__", "apply", "backward", "close", "cpu", "cuda", "eval", "evaluate", "fit", "forward",
        "load", "load_state_dict", "log", "optimizer_step", "predict", "reset", "run", "save", "setup",
        "state_dict", "step", "test", "test_step", "to", "train", "training_step", "update", "validate",
        "validation_step", "zero_grad",
    }
)  # fmt: skip


def _per_iteration_call(project: Project, callers: Callers, module: str, name: str) -> tuple[str, CallRecord] | None:
    """A call ``obj.m()`` on an object whose class the project does not show (a factory's
    result), made in an epoch loop or in a loop over batches inside one, when ``m`` is the name
    of the method ``name`` and every definition of a function or method called ``m`` (but
    abstract stubs) in the caller's folder and below, ``module`` among them, builds its own
    GradScaler on each call: whichever class the factory picks, the scaler is rebuilt."""
    short = _short(name)
    if "." not in name or short in _LIBRARY_METHODS or short.startswith("_"):
        return None
    defining = None
    for caller in callers.of("epoch", name):
        folder = caller.rsplit("/", 1)[0] + "/" if "/" in caller else ""
        if not module.startswith(folder):
            continue
        call = _unresolved_loop_call(project, caller, short)
        if call is None:
            continue
        if defining is None:
            defining = callers.defining(short)
        if all(_builds_scaler_each_call(project, rel, short) for rel in defining if rel.startswith(folder)):
            return caller, call
    return None


def _unresolved_loop_call(project: Project, caller: str, short: str) -> CallRecord | None:
    summary = project.summary(caller) or {}
    imports = summary.get("imports", {})
    instances = summary.get("instances", {})
    for call in project.calls(caller):
        parts = call["callee"].split(".")
        if len(parts) != 2 or parts[1] != short or parts[0] in ("self", "cls") or parts[0] in imports:
            continue
        if not (call.get("epoch_loop") or call.get("in_epoch")):
            continue
        frame = call.get("frame", "<module>")
        if f"{frame}:{parts[0]}" in instances or f"<module>:{parts[0]}" in instances:
            continue  # an object of a class the call names: resolved (or a library's) elsewhere
        if project.resolve_call(caller, call) is None:
            return call
    return None


def _builds_scaler_each_call(project: Project, rel: str, short: str) -> bool:
    summary = project.summary(rel)
    if summary is None:
        return False  # a definition we cannot read: it may not build a scaler
    for other, function in summary.get("functions", {}).items():
        if _short(other) != short or function.get("stub"):
            continue
        if "new_scaler" not in function or function.get("builds_optimizer"):
            return False
    return True


# ---------------------------------------------------------------------------------------
# AMP209: a factory builds a GradScaler for a script whose autocast is all bfloat16
# ---------------------------------------------------------------------------------------


def _bfloat16_scaler_factory(project: Project, targets: list[str], callers: Callers) -> Iterator[CrossReport]:
    for module in targets:
        summary = project.summary(module)
        if summary is None or summary.get("float16_code") is not False:
            continue
        for name, function in summary.get("functions", {}).items():
            at = function.get("returns_scaler")
            if at is None:
                continue
            uses: list[tuple[str, CallRecord, RegionRecord]] = []
            for caller, call, _target in callers_of(project, callers, "autocast", module, name):
                caller_summary = project.summary(caller) or {}
                regions = caller_summary.get("regions", [])
                if not call.get("assigned") or not bfloat16_only(caller_summary):
                    uses = []
                    break  # a caller that may run float16 (or that we cannot judge): silence
                uses.append((caller, call, regions[0]))
            if not uses:
                continue
            caller, call, region = uses[0]
            short = _short(name)
            yield CrossReport(
                "AMP209",
                module,
                at,
                f"`{short}` builds a GradScaler for code whose autocast regions all use bfloat16: bfloat16 has "
                "float32's exponent range, its gradients do not underflow, and the scaler only adds work",
                "Drop the scaler and call `loss.backward()` and `optimizer.step()` directly",
                [
                    (caller, call["at"], f"the scaler from `{short}` is taken here"),
                    (caller, region["at"], "the bfloat16 autocast region it is used with"),
                ],
            )


def _scaler_beside_bfloat16(project: Project, targets: list[str], callers: Callers) -> Iterator[CrossReport]:
    """A script that builds a GradScaler which is always on and opens no autocast of its own,
    while every autocast region the modules it imports open uses bfloat16 (the model's
    ``forward`` under ``torch.autocast("cuda", dtype=torch.bfloat16)``), and float16 is named
    in none of them: the scaler only adds work. A reached module that names autocast without
    a region (a factory of a context the script enters) must name float16 nowhere either. The
    modules that import this one (a launcher, or the ``main.py`` of a trainer class) may run it
    under a float16 autocast of their own: none of them may name float16 or open a region that
    is not bfloat16."""
    for module in targets:
        summary = project.summary(module)
        if summary is None or not summary.get("scalers_built") or summary.get("float16_code") is not False:
            continue
        region = bfloat16_reached(project, callers, module, strict=True)
        if region is None or _importers_may_run_float16(project, callers, module):
            continue  # (the importers asked last: their index costs more than the imports' walk)
        for at in summary["scalers_built"]:
            yield CrossReport(
                "AMP209",
                module,
                at,
                "GradScaler for code whose autocast regions, all in the modules this one imports, use bfloat16: "
                "bfloat16 has float32's exponent range, its gradients do not underflow, and the scaler only adds work",
                "Drop the scaler and call `loss.backward()` and `optimizer.step()` directly",
                [
                    (
                        region[0],
                        region[1],
                        "a bfloat16 autocast region the training runs; every region it reaches is one",
                    )
                ],
            )


# How many modules that import a scaler's module, directly or not, are read before giving up.
_IMPORTERS_READ = 64


def _importers_may_run_float16(project: Project, callers: Callers, module: str) -> bool:
    """Whether a module that imports ``module`` (directly or through others) names float16 or
    opens an autocast region that is not bfloat16; past ``_IMPORTERS_READ`` of them, say it may."""
    imports = import_edges(project)
    seen = {module}
    frontier = [module]
    while frontier:
        for importer in imports.importers(frontier.pop()):
            if importer in seen:
                continue
            seen.add(importer)
            if len(seen) > _IMPORTERS_READ or names_float16(callers, importer):
                return True
            if callers.has_class(importer, "autocast"):
                summary = project.summary(importer)
                if summary is None or (summary.get("regions") and not bfloat16_only(summary)):
                    return True
            frontier.append(importer)
    return False


# ---------------------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------------------


class Check:
    """One project check: the codes it reports (None: the codes of the file-local rules, which
    ``seeds.py`` runs again on a module's model with what its callees do seeded in), the function
    that implements it, and how a run's parts are handed to that function."""

    __slots__ = ("call", "codes", "function")

    def __init__(
        self,
        codes: Iterable[str] | None,
        function: Callable[..., Iterable[CrossReport]],
        call: Callable[[Callable[..., Iterable[CrossReport]], CheckRun], Iterable[CrossReport]],
    ) -> None:
        self.codes = None if codes is None else frozenset(codes)
        for code in self.codes or ():
            check_registration(code, function.__module__, "lint.project.")
        self.function = function
        self.call = call

    def runs_for(self, codes: frozenset[str]) -> bool:
        return self.codes is None or bool(self.codes & codes)


# The project checks, in the order they run. Each names the codes it reports; ``ampdoctor/codes.py``
# names the module of each check's function for those codes (``Check`` refuses one it does not).
PROJECT_CHECKS: tuple[Check, ...] = (
    Check(["AMP211"], checkpoint_reports, lambda f, r: f(r.project, r.targets, r.values, r.callers)),
    Check(
        None,
        seeded_reports,
        lambda f, r: f(r.values, r.targets, r.codes, r.callers.defining_with_scaler, r.callers.clipping),
    ),
    Check(["AMP201"], _clips_in_helpers, lambda f, r: f(r.project, r.targets, r.callers)),
    Check(["AMP202"], steps_without_update, lambda f, r: f(r.project, r.targets, r.callers)),
    Check(["AMP101"], _backward_under_autocast, lambda f, r: f(r.project, r.targets)),
    Check(
        ["AMP101", "AMP102"],
        region_call_reports,
        lambda f, r: f(r.values, r.targets, r.codes, r.callers.defining_with_scaler, r.callers.handling),
    ),
    Check(["AMP205"], _scaler_per_call, lambda f, r: f(r.project, r.targets, r.callers)),
    Check(["AMP209"], _bfloat16_scaler_factory, lambda f, r: f(r.project, r.targets, r.callers)),
    Check(["AMP209"], _scaler_beside_bfloat16, lambda f, r: f(r.project, r.targets, r.callers)),
    Check(["AMP208"], update_twice, lambda f, r: f(r.project, r.targets, r.callers)),
    Check(["AMP210"], scaler_never_passed, lambda f, r: f(r.project, r.targets, r.callers)),
    Check(["AMP303"], half_model_trained, lambda f, r: f(r.project, r.targets, r.callers)),
    Check(["AMP301", "AMP105"], float16_elsewhere, lambda f, r: f(r.project, r.targets, r.callers, r.codes, r.lazy)),
)


def run_checks(
    project: Project,
    targets: Iterable[str],
    callers: Callers,
    codes: frozenset[str],
    lazy: Iterable[str] = (),
    store: SummaryStore | None = None,
) -> list[CrossReport]:
    """The cross-module findings in ``targets`` (the named files with a summary); ``lazy``: named
    files to summarize only when float16 autocast set up elsewhere reaches them. ``store``: the
    project's summaries, given where a forked process may take a share of the work
    (``forked.py``); the findings are the same either way."""
    run = CheckRun(project, sorted(set(targets)), callers, codes, sorted(set(lazy)))
    checks = [check for check in PROJECT_CHECKS if check.runs_for(codes)]
    if store is None or len(checks) < 2 or len(run.targets) < FORK_TARGETS or not can_fork():
        return [report for check in checks for report in check.call(check.function, run)]
    # The first check (AMP211's judge) costs about as much as all the others together, and much
    # of either is summarizing modules on demand, which both would share in one process: the
    # first runs in a forked child, beside the others (6.5 s → 4.5 s on the 31-repository tree,
    # where any split of the judge's targets left this process the slower by a second or more).
    import tempfile  # (only here: a run that never forks never loads it)

    # What either process summarizes on demand, the other reads instead of making (``shared.py``).
    try:
        scratch = tempfile.TemporaryDirectory(
            prefix="ampdoctor-summaries-", dir=memory_folder(), ignore_cleanup_errors=True
        )
    except OSError:  # no temporary folder to write in: each process makes its own
        scratch = None
    store.shared = SharedSummaries(scratch.name) if scratch is not None else None
    try:
        answered = _apart(checks[0], checks[1:], run, store)
    finally:
        store.shared = None
        if scratch is not None:
            scratch.cleanup()
    if answered is None:  # the system has no process to spare: all of them here
        return [report for check in checks for report in check.call(check.function, run)]
    found, changes, later = answered
    store.adopt(changes)
    return [CrossReport(*fields) for fields in found] + later


# Fewer targets than this are checked in one process: a fork and its answer cost more than a
# share of a small project's checks.
FORK_TARGETS = 24


def _apart(
    first: Check, rest: list[Check], run: CheckRun, store: SummaryStore
) -> tuple[list[tuple[Any, ...]], dict[str, dict[str, Any]], list[CrossReport]] | None:
    """``first`` in a forked child while ``rest`` run here: the child's findings (as plain data)
    and what its store learned, and these; None where the system refuses the fork."""
    try:
        child = Forked(lambda: _judged_apart(first, run, store))
    except OSError:
        return None
    with child:
        later = [report for check in rest for report in check.call(check.function, run)]
        found, changes = child.result()
    return found, changes, later


def _judged_apart(
    check: Check, run: CheckRun, store: SummaryStore
) -> tuple[list[tuple[Any, ...]], dict[str, dict[str, Any]]]:
    """In the forked child: what ``check`` finds, as plain data, and what the store learned
    (nothing where the store is not saved: ``--no-cache``; the summaries the child made, 4.6 MB
    pickled on the 31-repository tree, would only be decoded and dropped)."""
    store.changed = set()  # this copy's own: what it learns from here on goes back
    found = [(r.code, r.module, r.at, r.message, r.help, r.related) for r in check.call(check.function, run)]
    return found, store.changes() if store.path is not None else {}
