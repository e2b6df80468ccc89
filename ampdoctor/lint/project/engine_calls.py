"""Calls into an engine's scaler protocol: ``runner.engine.backward_loss(loss, model, optimizer)``

where the engine's class decides what runs (``AMPEngine.backward_loss``:
``self.scaler.scale(loss).backward()``; its ``optimizer_step``: ``self.scaler.step(optimizer)``
and ``self.scaler.update()``).

The object's class is what the link step resolves the receiver to when it can; a receiver of
unseen class (a runner handed in as a parameter, an engine a factory picks by config) is matched
by its methods: the project classes that define a method of the call's name with a scaler
protocol (``function_parts.py`` ``protocol``), and have every other method the function calls on
the same receiver. Each call then stands, in the caller's model, for the scaler calls that
class makes, on ``<receiver>.<field>`` (``runner.engine.scaler``): a clip between the engine's
backward and its step, an ``unscale_`` that runs on micro-steps the engine does not step, are the
caller's mistakes, made for every run with that engine. Where the candidate classes disagree
(another field, other events), nothing is seeded.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .flow import Values, flatten
from .packed_calls import call_heads, flow_call

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from .shapes import FunctionSummary
    from .value_atoms import CallFlow, FunctionFlow

# Seeded event: (kind, scaler spelled, optimizer argument (index, keyword) or None)
Seeded = tuple[str, str, "tuple[int, str] | None"]
# The method that runs them: (module, its position, qualified name)
Method = tuple[str, list[int], str]


def protocol_seeds(
    values: Values, module: str, function: str, flow: FunctionFlow, defining: Callable[[str], list[str]] | None
) -> dict[tuple[int, int], tuple[list[Seeded], Method]]:
    """The scaler calls each engine call of ``function`` stands for, and the method that makes
    them (one of the candidate classes'), by call position."""
    heads = call_heads(flow)  # (a call's record is read only where its receiver may be an engine)
    chosen = [
        index
        for index, (callee, received, _line) in enumerate(heads)
        # (not the object's own methods, ``self.m()``/``super().m()``: a subclass's are not its)
        if received
        and "." in callee
        and not callee.startswith("super.")
        and not (callee.startswith("self.") and callee.count(".") == 1)
    ]
    if not chosen:
        return {}
    by_receiver: dict[str, list[int]] = {}
    for index in chosen:
        by_receiver.setdefault(heads[index][0].rsplit(".", 1)[0], []).append(index)
    out: dict[tuple[int, int], tuple[list[Seeded], Method]] = {}
    for receiver, indexes in by_receiver.items():
        names = {heads[index][0].rsplit(".", 1)[1] for index in indexes}
        if not any(_PROTOCOL_NAME.search(name) for name in names):
            continue  # no method that may run a scaler call: not an engine call
        on_it: list[CallFlow] = [call for index in indexes if (call := flow_call(flow, index)) is not None]
        classes = _classes(values, module, function, on_it[0], names, defining)
        if not classes:
            continue
        for call in on_it:
            name = call["callee"].rsplit(".", 1)[1]
            found: set[tuple[str, tuple[tuple[str, tuple[int, str] | None], ...]]] = set()
            first: Method | None = None
            agree = True
            for where, cls in classes:
                method = values.project.method(where, cls, name)
                summary = _function(values, method)
                protocol = summary.get("protocol") if summary is not None else None
                if protocol is None or method is None or summary is None:
                    agree = False
                    break
                params = summary.get("params", [])
                found.add((protocol["field"], tuple((kind, _arg(params, i)) for kind, i in protocol["events"])))
                if first is None:
                    first = (method[0], summary["at"], method[1])
            if not agree or len(found) != 1 or first is None:
                continue  # the candidate classes do not agree on what the call runs
            ((field, events),) = found
            scaler = f"{receiver}.{field}"
            out[(call["at"][0], call["at"][1])] = ([(kind, scaler, arg) for kind, arg in events], first)
    return out


# What the name of a method that runs scaler calls holds (``backward_loss``, ``optimizer_step``,
# ``scale_and_step``): a receiver called with none of these is not asked about.
_PROTOCOL_NAME = re.compile(r"backward|step|update|scale")
# The methods a tensor, an optimizer or a GradScaler has: a receiver of unseen class called with
# one of them is one of those (``loss.backward()``), not a project engine of that method name.
_OWN_NAMES = frozenset({"backward", "step", "update", "zero_grad", "scale", "unscale_", "forward", "__call__"})


def _arg(params: list[str], index: int | None) -> tuple[int, str] | None:
    """The caller's argument for the method's parameter ``index``: (position without ``self``,
    keyword)."""
    return None if index is None else (index - 1, params[index])


def _function(values: Values, method: tuple[str, str] | None) -> FunctionSummary | None:
    if method is None:
        return None
    return (values.project.summary(method[0]) or {}).get("functions", {}).get(method[1])


def _defining_protocol(values: Values, name: str, defining: Callable[[str], list[str]]) -> set[tuple[str, str]]:
    """The project's classes (and their subclasses) whose method ``name`` runs a scaler
    protocol, found once per name and run."""
    key = ("engine_calls", name)
    known = values.asked.get(key)
    if isinstance(known, set):
        return known
    found: set[tuple[str, str]] = set()
    for where in defining(name)[:16]:  # (the modules that make or use a scaler)
        for qualified, summary in (values.project.summary(where) or {}).get("functions", {}).items():
            cls, _, method = qualified.rpartition(".")
            if method == name and cls and "." not in cls and "protocol" in summary:
                found.add((where, cls))
                found.update(values.subclasses(where, cls))
    values.asked[key] = found
    return found


def _protocol_defined(values: Values, name: str, defining: Callable[[str], list[str]]) -> bool:
    """Whether a method ``name`` of some project class runs a scaler protocol, found once per
    name and run."""
    key = ("engine_protocol", name)
    known = values.asked.get(key)
    if not isinstance(known, bool):
        suffix = "." + name
        known = values.asked[key] = any(
            qualified.endswith(suffix) and "protocol" in summary
            for where in defining(name)
            for qualified, summary in (values.project.summary(where) or {}).get("functions", {}).items()
        )
    return known


def _classes(
    values: Values,
    module: str,
    function: str,
    call: CallFlow,
    names: set[str],
    defining: Callable[[str], list[str]] | None,
) -> list[tuple[str, str]]:
    """The classes the receiver may be of that run a scaler protocol: those its value resolves
    to and their subclasses, else the project's classes with a protocol method among ``names``
    (other than a tensor's, an optimizer's or a scaler's own methods); of these, the ones with all
    of ``names`` and a protocol in one of them."""
    project = values.project
    if values.scans and defining is not None and not any(_protocol_defined(values, name, defining) for name in names):
        # A protocol is made of scaler calls, which a module's summary finds only where its text
        # makes or uses a GradScaler (``passes.find_scalers_and_optimizers``): where no method
        # of these names in such a module has one, no class the receiver may be of has one, and
        # its value (a walk that summarizes the modules its construction runs through: 84
        # modules and 0.35 s of the 31-repository tree's checks, for 7 engine calls) is not
        # worked out.
        return []
    resolved = {
        atom[2:]
        for atom in flatten(values.resolve(module, function, call["recv"], (), 1))
        if type(atom) is str and atom.startswith("H@")
    }
    candidates: set[tuple[str, str]] = set()
    if resolved:
        # An object of the class or of one of its subclasses (an ``engine: IEngine`` field).
        for held in sorted(resolved)[:8]:
            where, _, cls = held.partition("|")
            candidates.add((where, cls))
            candidates.update(values.subclasses(where, cls))
    elif defining is not None:
        for name in sorted(names - _OWN_NAMES):
            if _PROTOCOL_NAME.search(name):
                candidates.update(_defining_protocol(values, name, defining))
    return sorted(
        (where, cls)
        for where, cls in candidates
        if all(project.method(where, cls, name) is not None for name in names)
        and any("protocol" in (_function(values, project.method(where, cls, name)) or {}) for name in names)
    )
