"""AMP101 and AMP102 for the calls made inside an autocast region that another module made
(``with self.backend.autocast:``, ``with self.engine.autocast():``): the functions the call runs,
followed a few calls deep, run the backward pass or the optimizer step inside the region.

Followed: the calls the linker resolves, the methods an object's field holds
(``self._step.get(stage)()`` where ``self._step = {"train": self.train_step, ...}``), events
dispatched by name (``self.fire("on_batch_end")`` where ``fire`` runs ``getattr(callback,
event)(self)``: the project's methods of that name, in modules that run a backward or a step),
and the engine calls whose class runs a scaler protocol (``self.backend.backward_loss(loss)`` of
an AMP backend, ``engine_calls.py``).

``with self.engine.autocast():`` where the field's class returns a ``nullcontext()`` and only
some subclasses an autocast (``_engines_on``): the region is on with those engines, and a call
inside it is judged by the scaler protocols those engine classes run. The region's engine and the engine whose methods run the backward
are the same object where both are reached through the same field (``self.backend``): then the
backward runs in autocast exactly when the region is on.

One finding per call in the region and code, anchored at the call, with the backward (or step)
and the region as related locations. A lexical ``with torch.autocast(...)`` is the file-local
rules' and ``checks.py``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from .engine_calls import protocol_seeds
from .fields import field_stores
from .flow import Values, flatten, self_type
from .link import Target
from .packed_calls import calls_where, flow_call, flow_calls
from .reports import CrossReport
from .seeds import region_of

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from .value_atoms import CallFlow, FunctionFlow

_DEPTH = 4
_BUDGET = 60
Found = tuple[str, list[int], str]  # (module, position, what it is)


def region_call_reports(
    values: Values,
    targets: list[str],
    codes: frozenset[str],
    defining: Callable[[str], list[str]] | None,
    handlers: Callable[[str], list[str]] | None = None,
) -> Iterator[CrossReport]:
    """``defining``: the modules that may define an engine method of a name (``engine_calls``);
    ``handlers``: those that may define a method an event of that name dispatches to."""
    if "AMP101" not in codes and "AMP102" not in codes:
        return
    for module in targets:
        for function, flow in values.flows(module).items():
            for at, atoms, *rest in flow.get("withs", []):
                if not rest or any(type(a) is str and a.startswith("A@") for a in atoms):
                    continue  # a lexical autocast: the module's own rules see inside it
                engines = None
                region = region_of(flatten(values.resolve(module, function, atoms)))
                if region is None:
                    engines = _engines_on(values, module, function, flow, atoms)
                    if not engines:
                        continue
                elif region[1] != "on" and not _correlated(atoms):
                    continue
                last = rest[0]
                walk = _Walk(values, defining, handlers, engines)
                for call, targets_of_call in _calls_inside(values, module, function, flow, at[0], last):
                    backward, step = walk.first(targets_of_call)
                    if backward is not None and "AMP101" in codes:
                        yield _report("AMP101", module, call, backward, at)
                    if step is not None and "AMP102" in codes:
                        yield _report("AMP102", module, call, step, at)


def _correlated(atoms: list[str]) -> bool:
    """A region that is on only for some objects (an AMP backend's ``autocast`` field, a plain
    backend's ``nullcontext()``): judged where the object is reached through a field of ``self``,
    whose methods then run on that same object."""
    return any(type(a) is str and a.startswith("D") and "#F" in a for a in atoms)


def _engines_on(
    values: Values, module: str, function: str, flow: FunctionFlow, atoms: list[str]
) -> set[tuple[str, str]]:
    """``with self.engine.autocast():`` where the field's class makes no autocast of its own
    (``IEngine.autocast`` returns a ``nullcontext()``) but subclasses do (``AMPEngine``): the
    classes whose ``autocast`` method opens an enabled region. A run with one of them has the
    region on; the calls inside are judged against those engines only."""
    if len(atoms) != 1 or not (type(atoms[0]) is str and atoms[0].startswith("C")):
        return set()
    call = flow_call(flow, int(atoms[0][1:]))
    if call is None:
        return set()
    # The method the call names on a field of ``self``: ``Dautocast#Fengine``
    spelled = [a for a in call.get("func", []) if a.startswith("D") and "#F" in a]
    if len(spelled) != 1:
        return set()
    method, _, field = spelled[0][1:].partition("#F")
    project = values.project
    classes: set[tuple[str, str]] = set()
    for atom in flatten(values.resolve(module, function, [f"F{field}"])):
        if type(atom) is str and atom.startswith("H@"):
            where, _, cls = atom[2:].partition("|")
            classes.add((where, cls))
            classes.update(values.subclasses(where, cls))
    found = set()
    for where, cls in sorted(classes)[:32]:
        landed = project.method(where, cls, method)
        if landed is None:
            continue
        returned = values.flow(landed[0], landed[1]).get("ret", [])
        region = region_of(flatten(values.resolve(landed[0], landed[1], returned)))
        if region is not None and region[1] == "on":
            found.add((where, cls))
    return found


def _report(code: str, module: str, call: tuple[str, list[int]], found: Found, region: list[int]) -> CrossReport:
    """``call``: how the call is named in the message (``self.run_batch(...)``), and where it is."""
    named, at = call
    if code == "AMP101":
        message = (
            f"{named} runs a backward pass inside an autocast region made elsewhere ({found[2]}); backward ops "
            "would reuse the forward's autocast dtypes"
        )
        help = "Leave the `with` block before the backward runs: autocast only the forward and the loss"
        what = "the backward it runs"
    else:
        message = (
            f"{named} steps the optimizer inside an autocast region made elsewhere ({found[2]}); the "
            "step and the scaler's update belong after the region"
        )
        help = "Leave the `with` block before the step runs: autocast only the forward and the loss"
        what = "the step it runs"
    return CrossReport(
        code,
        module,
        at,
        message,
        help,
        [(found[0], found[1], what), (module, region, "the autocast region around the call")],
    )


def _calls_inside(
    values: Values, module: str, function: str, flow: FunctionFlow, first: int, last: int
) -> Iterator[tuple[tuple[str, list[int]], list[tuple[Target, dict[str, str] | None]]]]:
    """The calls of ``function`` made inside the ``with`` (lines after its first, to its last),
    with the project functions each may run."""
    # (the calls' records are read only where one is made inside the ``with``)
    for call in calls_where(flow, lambda callee, _received, line: first < line <= last and bool(callee)):
        target = values.target(module, function, call)
        if target is not None:
            yield (f"`{call['callee']}(...)`", call["at"]), [(target, _bound_names(target, call))]
    for at, atoms in flow.get("dynamic", []):
        if first < at[0] <= last:
            held = held_methods(values, module, function, atoms)
            if held:
                names = " or ".join(f"`{_short(t.name)}`" for t in held)
                yield (f"the call of a method held in a field ({names})", at), [(t, None) for t in held]


def held_methods(values: Values, module: str, function: str, atoms: list[str], depth: int = 0) -> list[Target]:
    """The object's own methods a field holds (``self._step = {"train": self.train_step}``: the
    ``F`` atoms that name a method of the class rather than a stored field)."""
    owner = self_type(module, function, ())
    if owner is None or depth > 2:
        return []
    project = values.project
    out: list[Target] = []
    for atom in atoms:
        if not atom.startswith("F"):
            continue
        name = atom[1:]
        method = project.method(owner[0], owner[1], name)
        if method is not None:
            summary = (project.summary(method[0]) or {}).get("functions", {}).get(method[1])
            if summary is not None:
                out.append(Target(method[0], method[1], summary, 1))
            continue
        for _function, stored_flow in values.methods(owner[0], owner[1]):
            for stored in field_stores(stored_flow.get("stores", {}), name):
                out.extend(held_methods(values, module, function, stored, depth + 1))
    return out[:8]


class _Walk:
    """The first backward and the first step the functions a call runs reach, depth first."""

    def __init__(
        self,
        values: Values,
        defining: Callable[[str], list[str]] | None,
        handlers: Callable[[str], list[str]] | None = None,
        engines: set[tuple[str, str]] | None = None,
    ) -> None:
        self.values = values
        self.defining = defining
        self.handlers = handlers
        # Where the region is on only with some engine classes (``_engines_on``): a scaler
        # protocol counts only when one of those classes runs it.
        self.engines = engines
        self.seen: dict[tuple[str, str, tuple[tuple[str, str], ...]], tuple[Found | None, Found | None]] = {}
        self.budget = _BUDGET

    def first(self, targets: list[tuple[Target, dict[str, str] | None]]) -> tuple[Found | None, Found | None]:
        """``targets``: the functions a call may run, each with the parameters the call binds to
        a string literal (an event's name)."""
        backward = step = None
        for target, names in targets:
            b, s = self._function(target, 0, names)
            backward = backward or b
            step = step or s
        return backward, step

    def _function(
        self, target: Target, depth: int, names: dict[str, str] | None = None
    ) -> tuple[Found | None, Found | None]:
        """``names``: the parameters (``P<i>``) bound to a string literal by the call."""
        key = (target.module, target.name, tuple(sorted(names.items())) if names else ())
        known = self.seen.get(key)
        if known is not None:
            return known
        self.seen[key] = (None, None)  # (a recursive call adds nothing)
        if self.budget <= 0:
            return None, None
        self.budget -= 1
        values = self.values
        function = target.function
        backward: Found | None = None
        step: Found | None = None
        at = function.get("backward")
        if at is not None:
            backward = (target.module, at, f"`{_short(target.name)}` calls backward")
        updates = function.get("updates")
        if updates:
            step = (target.module, updates[0]["at"], f"`{_short(target.name)}` steps the scaler")
        if self.engines is not None:
            # The region is on only with some engines: what the function runs itself does not
            # depend on the engine, but it is judged only where an engine's method runs it.
            backward = step = None
        flow = values.flow(target.module, target.name)
        for (_line, _column), (events, method) in sorted(
            protocol_seeds(values, target.module, target.name, flow, self.defining).items()
        ):
            if self.engines is not None and not self._engine_runs(method):
                continue
            kinds = {kind for kind, _scaler, _arg in events}
            where = method[2]
            if backward is None and "backward" in kinds:
                backward = (method[0], method[1], f"`{where}` runs the scaled backward")
            if step is None and "step" in kinds:
                step = (method[0], method[1], f"`{where}` steps the scaler")
        if depth < _DEPTH and (backward is None or step is None):
            inner: list[tuple[Target, dict[str, str] | None]] = []
            for call in flow_calls(flow):
                if call.get("callee", "").startswith("super."):
                    continue
                found = values.target(target.module, target.name, call)
                if found is not None:
                    inner.append((found, _bound_names(found, call)))
            for _at, atoms in flow.get("dynamic", []):
                inner.extend((held, None) for held in held_methods(values, target.module, target.name, atoms))
            for _at, named in flow.get("named", []):
                event = named[1:] if named.startswith("=") else (names or {}).get(named)
                if event is not None:
                    inner.extend((handler, None) for handler in self._handlers(event, target))
            for next_target, bound in inner:
                b, s = self._function(next_target, depth + 1, bound)
                backward = backward or b
                step = step or s
                if backward is not None and step is not None:
                    break
        result = (backward, step)
        self.seen[key] = result
        return result

    def _engine_runs(self, method: tuple[str, list[int], str]) -> bool:
        """Whether the engine method of a protocol seed is one of ``engines``' (its own or
        inherited)."""
        module, _at, qualified = method
        owner = qualified.rsplit(".", 1)[0]
        project = self.values.project
        name = qualified.rsplit(".", 1)[-1]
        return any(
            (where, cls) == (module, owner) or project.method(where, cls, name) == (module, qualified)
            for where, cls in self.engines or ()
        )

    def _handlers(self, method: str, dispatcher: Target) -> list[Target]:
        """The methods an event named ``method`` may be dispatched to (``getattr(callback,
        event)(self)`` in ``dispatcher``): the project's methods of that name, in the modules
        ``handlers`` names, whose class says it handles this dispatcher's events: a parameter
        annotated with the dispatcher's class, one of its bases or subclasses (``runner:
        "IRunner"``). Handlers of another dispatcher's events (an evaluator's metrics firing
        the same event names) are not its."""
        if self.handlers is None or "." not in dispatcher.name:
            return []
        owner = (dispatcher.module, dispatcher.name.rsplit(".", 1)[0])
        key = ("handlers", method, owner)
        known = self.values.asked.get(key)
        if isinstance(known, list):
            return known
        values = self.values
        family = set(values.hierarchy(*owner)) | set(values.subclasses(*owner))
        found: list[Target] = []
        for where in self.handlers(method)[:_HANDLER_MODULES]:
            for qualified, function in (values.project.summary(where) or {}).get("functions", {}).items():
                cls, _, name = qualified.rpartition(".")
                if name != method or not cls or "." in cls:
                    continue
                annotated = [a for a in values.flow(where, qualified).get("scalers", []) if a.startswith("K")]
                classes = {
                    tuple(atom[2:].split("|", 1))
                    for atom in flatten(values.resolve(where, qualified, annotated))
                    if type(atom) is str and atom.startswith("H@")
                }
                if classes & family:
                    found.append(Target(where, qualified, function, 1))
        values.asked[key] = found
        return found


# The modules searched for the handlers of one dispatched event.
_HANDLER_MODULES = 32


def _bound_names(target: Target, call: CallFlow) -> dict[str, str] | None:
    """The callee's parameters (``P<i>``) that ``call`` binds to a string literal."""
    given = call.get("names")
    if not given:
        return None
    params = target.function.get("params", [])
    bound = {}
    for where, value in given.items():
        if where.isdigit():
            index = int(where) + target.skip
        elif where in params:
            index = params.index(where)
        else:
            continue
        if index < len(params):
            bound[f"P{index}"] = value
    return bound or None


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


__all__ = ["held_methods", "region_call_reports"]
