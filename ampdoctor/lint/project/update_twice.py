"""AMP208 across functions: one scaler updated by two functions called in one iteration.

A GAN trainer often splits the iteration into methods, ``train_discriminator()`` and
``train_generator()``, each of which runs ``self.scaler.step(its_optimizer)`` and
``self.scaler.update()``; the training loop calls both. Each method is right on its own; the
scale is still updated twice per iteration (what AMP208 reports inside one function).

Certain when: both calls sit in one loop of one function, on one receiver (``worker.d()`` and
``worker.g()``, ``self.d()`` and ``self.g()``), not in different arms of one ``if``; both land on
methods of one class whose updates name the same ``self.`` field; and the optimizers stepped
before the two updates are spelled differently. A scaler handed in as a parameter counts when
both calls pass it under one name. One helper called twice in the iteration with different
optimizers for its optimizer parameter (``step(opt_d, scaler)``, ``step(opt_g, scaler)``) is
such a pair too. An update under a condition (``if update_scaler: scaler.update()``) may be
the one the caller leaves on: not judged. Reported once per pair, at the update of the function
called first. Both functions are looked for in one module (a class's methods, or a module of
step helpers), so that the callers are searched only where a pair exists.
"""

from __future__ import annotations

from collections.abc import Iterator

from .callsites import IMPORTERS, callers_of
from .link import Project, Target
from .reports import Callers, CrossReport

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from .shapes import CallRecord, FunctionSummary, UpdateRecord


def update_twice(project: Project, targets: list[str], callers: Callers) -> Iterator[CrossReport]:
    reported: set[frozenset[tuple[str, str]]] = set()
    for module in targets:
        summary = project.summary(module)
        if summary is None:
            continue
        functions = summary.get("functions", {})
        for name, kind in _paired(functions).items():
            for caller, call, target in callers_of(project, callers, kind, module, name):
                if "loop" not in call:
                    continue
                report = _pair(project, caller, call, target, reported)
                if report is not None:
                    yield report


def _paired(functions: dict[str, FunctionSummary]) -> dict[str, str]:
    """The functions that have a possible partner in their own module (finding the callers costs):
    another method of the class that updates the same field after stepping another optimizer,
    or another function that updates a scaler it is handed; or that may be their own partner,
    stepping an optimizer and updating a scaler they are handed (called twice with two). Each
    with the token class its callers' modules hold (``Callers``)."""
    fields: dict[tuple[str, str], set[str]] = {}
    handed: list[str] = []
    paired: set[str] = set()
    for name, function in functions.items():
        for update in function.get("updates", []):
            if update["optimizer"].startswith("#") and update["scaler"].startswith("#") and not update.get("guarded"):
                paired.add(name)
            if update["scaler"].startswith("#"):
                handed.append(name)
            elif "." in name:
                fields.setdefault((name.split(".", 1)[0], update["scaler"]), set()).add(name)
    # A helper with a name of its own (``update_parameter_and_lr``) is looked for in the modules
    # that import its own: the loop that calls it twice is often handed the scaler and names no
    # GradScaler itself. A plain one-word name (``step``, ``update``) only where one is named.
    kinds = {name: IMPORTERS if "_" in name.rsplit(".", 1)[-1].strip("_") else "scaler" for name in sorted(paired)}
    kinds.update((name, "any") for names in fields.values() if len(names) > 1 for name in names)
    if len(set(handed)) > 1:
        kinds.update((name, "any") for name in handed)
    return dict(sorted(kinds.items()))


def _pair(
    project: Project, caller: str, call: CallRecord, target: Target, reported: set[frozenset[tuple[str, str]]]
) -> CrossReport | None:
    receiver = call["callee"].rsplit(".", 1)[0] if "." in call["callee"] else None
    for other in project.calls(caller):
        if other is call or other.get("frame") != call["frame"] or other.get("loop") != call.get("loop"):
            continue
        if other["at"] is None or _exclusive(call, other):
            continue
        if (other["callee"].rsplit(".", 1)[0] if "." in other["callee"] else None) != receiver:
            continue
        second = project.resolve_call(caller, other)
        if second is None:
            continue
        shared = _shared_scaler(target, call, second, other)
        if shared is None:
            continue
        same = (second.module, second.name) == (target.module, target.name)
        key = frozenset({(target.module, target.name), (second.module, second.name), (caller, str(same))})
        if key in reported:
            continue
        first_call, first, first_update, then_call, then, then_update = (
            (call, target, shared[0], other, second, shared[1])
            if call["at"] < other["at"]
            else (other, second, shared[1], call, target, shared[0])
        )
        reported.add(key)
        short, other_short = first.name.rsplit(".", 1)[-1], then.name.rsplit(".", 1)[-1]
        if same:
            return CrossReport(
                "AMP208",
                first.module,
                first_update["at"],
                f"`update()` runs here on every call of `{short}`, and one iteration calls it twice, for two "
                "optimizers: the loss scale is updated twice per iteration, from half of the inf checks each time",
                f"Take `update()` out of `{short}` and call it once per iteration, after both steps",
                [
                    (caller, first_call["at"], f"`{short}` is called here"),
                    (caller, then_call["at"], "and again here, for another optimizer, in the same iteration"),
                ],
            )
        return CrossReport(
            "AMP208",
            first.module,
            first_update["at"],
            f"`update()` runs here and again in `{other_short}`, and one iteration calls both: the loss scale is "
            "updated twice per iteration, from half of the inf checks each time",
            f"Call `update()` once per iteration, after both `{short}` and `{other_short}` have stepped",
            [
                (caller, first_call["at"], f"`{short}` is called here"),
                (caller, then_call["at"], f"`{other_short}` is called in the same iteration"),
                (then.module, then_update["at"], f"the second `update()`, in `{other_short}`"),
            ],
        )
    return None


def _exclusive(one: CallRecord, other: CallRecord) -> bool:
    """Whether the two calls sit in different arms of one branch (or under a ``match``)."""
    arms = {(line, column): kind for line, column, kind in one.get("arms", [])}
    for line, column, kind in other.get("arms", []):
        if kind == "match" or arms.get((line, column), kind) != kind:
            return True
    return any(kind == "match" for *_, kind in one.get("arms", []))


def _shared_scaler(
    target: Target, call: CallRecord, second: Target, other: CallRecord
) -> tuple[UpdateRecord, UpdateRecord] | None:
    """The two updates, when both functions update one scaler after stepping different optimizers."""
    for update in target.function.get("updates", []):
        if update.get("guarded"):
            continue  # an update the caller may turn off (``update_scaler=False`` on the first call)
        for then in second.function.get("updates", []):
            if then.get("guarded"):
                continue
            first_optimizer = _spelled(target, call, update["optimizer"])
            then_optimizer = _spelled(second, other, then["optimizer"])
            if first_optimizer is None or then_optimizer is None or first_optimizer == then_optimizer:
                continue  # one optimizer (or one not known): a second step of it, not a second half
            if update["scaler"].startswith("self."):
                same_class = target.module == second.module and _class(target) == _class(second)
                if same_class and update["scaler"] == then["scaler"]:
                    return update, then
            elif then["scaler"].startswith("#"):
                one = _passed(target, call, int(update["scaler"][1:]))
                if one is not None and one == _passed(second, other, int(then["scaler"][1:])):
                    return update, then
    return None


def _class(target: Target) -> str | None:
    return target.name.split(".", 1)[0] if "." in target.name else None


def _spelled(target: Target, call: CallRecord, name: str) -> str | None:
    """An optimizer as the caller names it: the argument passed for a parameter (``#i``)."""
    return _passed(target, call, int(name[1:])) if name.startswith("#") else name


def _passed(target: Target, call: CallRecord, index: int) -> str | None:
    argument = target.arg_for(call, index)
    return argument.get("name") if argument is not None else None
