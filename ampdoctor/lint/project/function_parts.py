"""What one function does with the training step, for the cross-module checks: the parts of a
function's summary (``summary.py``) read off the module's fact model.

``params``/``star``  its parameters in order (``self`` included), and whether it takes ``*``/``**``
``clips``      a clip followed by ``P.step(optimizer)`` on a parameter ``P`` with no ``P.unscale_``
               before it and no scaled backward in the function: the scaled backward is a caller's
               (AMP201 across functions, ``checks.py``)
``clips_for_caller``   a clip of gradients the function neither scaled nor unscaled (a
               ``_clip_gradients`` helper): a clip in its callers' model (``seeds.py``)
``unscales_for_caller`` the scaler and optimizer parameters it unscales without stepping (a
               per-micro-batch helper): an ``unscale_`` in its callers' model (``seeds.py``)
``backward``   the first backward it runs outside any autocast region of its own (AMP101 when a
               caller runs it in autocast)
``returns_scaler`` where the enabled GradScaler it returns is built (AMP209)
``new_scaler`` a GradScaler built into a local (or a ``self.`` field at the top of a method) and
               stepped in the function (or handed to a ``step`` helper), ``single_step`` when it takes
               one step per call (AMP205)
``stub``       an abstract body (a subclass overrides it)
``updates``    each ``S.update()`` after ``S.step(optimizer)``, S a ``self.`` field or a parameter:
               two of them called in one iteration update the scale twice (AMP208 across
               functions, ``update_twice.py``)
``protocol``   the GradScaler calls a method makes on one field of ``self``, each on every call (an
               engine's ``backward_loss``, ``optimizer_step``): those calls in its callers' model,
               on the scaler of the object the call is made on (``seeds.py``)
``returns_half`` a model it converts to float16 (``.half()``, ``.convert_to_fp16()``) and returns,
               alone or as element ``index`` of a tuple; ``trains_returned``: the optimizers it
               builds over the parameters of what a call returned (AMP303 across functions,
               ``half_returned.py``)
``scaler_default`` a float16 autocast region and a scaler parameter that defaults to None (and is
               never rebound), with a backward or the scaler handed on: unscaled float16 training
               when no caller passes a scaler (AMP210 across functions, ``unscaled_float16.py``)
"""

from __future__ import annotations

import ast
import re

from ..iteration import accumulation_gate
from ..model import AmpFacts, CallSite, Frame
from ..passes import is_optimizer_constructor
from ..rules.scaler_queries import hands, scaler_enabled
from ..syntax import dotted, iter_nodes
from ..syntax import span as position
from ..vocabulary import EventKind
from .half_parts import returned_half, trains_returned

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from typing import Any

    from .shapes import FunctionSummary, NewScaler, ProtocolRecord, ScalerDefault, UpdateRecord
    from .value_atoms import FunctionFlow


def qualname(frame: Frame) -> str | None:
    """``f``, ``Class.f`` or ``<module>``; None for a nested function."""
    if frame.parent is None:
        return "<module>"
    if frame.parent.parent is not None:
        return None
    return f"{frame.class_name}.{frame.name}" if frame.class_name else frame.name


def params_of(function: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[list[str], bool]:
    args = function.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    return names, args.vararg is not None or args.kwarg is not None


def function_summary(
    facts: AmpFacts, function: ast.FunctionDef | ast.AsyncFunctionDef, frame: Frame
) -> FunctionSummary:
    params, star = params_of(function)
    summary: FunctionSummary = {"at": position(function), "params": params, "star": star}
    clips = _clips_before_param_step(facts, frame, params)
    if clips:
        summary["clips"] = clips
    clip = _clip_for_caller(frame)
    if clip is not None:
        summary["clips_for_caller"] = clip
    unscales = _unscale_for_caller(facts, frame, params)
    if unscales is not None:
        summary["unscales_for_caller"] = unscales
    backward = _own_backward(frame)
    if backward is not None:
        summary["backward"] = backward
    scales = _scales_for_caller(frame, params)
    if scales is not None:
        summary["scales"] = scales
    updated = _updated_names(facts, frame, params)
    if updated:
        summary["updated"] = updated
    handed = _steps_handed(facts, frame)
    if handed:
        summary["steps_handed"] = handed
    returned = _returned_scaler(facts, function, frame)
    if returned is not None:
        summary["returns_scaler"] = returned
    if is_stub(function):
        summary["stub"] = True
    updates = _updates_after_step(frame, params)
    if updates:
        summary["updates"] = updates
    protocol = _scaler_protocol(frame, params, facts)
    if protocol is not None:
        summary["protocol"] = protocol
    half = returned_half(facts, function, frame)
    if half is not None:
        summary["returns_half"] = half
    trained = trains_returned(facts, function, frame)
    if trained:
        summary["trains_returned"] = trained
    default = _scaler_default_none(facts, function, frame, params)
    if default is not None:
        summary["scaler_default"] = default
    new_scaler = _local_scaler(facts, frame)
    if new_scaler is not None:
        summary["new_scaler"] = new_scaler
        if any(is_optimizer_constructor(site.node, facts) for site in frame.calls):
            summary["builds_optimizer"] = True
    return summary


def _updates_after_step(frame: Frame, params: list[str]) -> list[UpdateRecord]:
    """``{"scaler", "optimizer", "at"}`` for each ``S.update()`` that follows ``S.step(O)`` in
    the function, where S is a ``self.`` field (a method's) or one of its parameters; ``scaler``
    and ``optimizer`` are spelled as written, or ``"#i"`` for the parameter at index i;
    ``guarded`` when the update runs under a condition (``if update_scaler: scaler.update()``).

    A parameter named like a scaler (``scaler``, ``grad_scaler``) counts even where the function
    only drives it (``scaler.unscale_(optimizer) ... scaler.step(optimizer); scaler.update()``,
    a step helper that never scales a loss itself, which the fact model does not take for a
    scaler): what a helper does with the scaler it is handed is its callers' concern."""
    found: list[UpdateRecord] = []
    pairs = [(update.scaler, update.call) for update in frame.events_of(EventKind.UPDATE) if update.scaler]
    steps = [(step.scaler, step.optimizer, step.order, step.call) for step in frame.events_of(EventKind.SCALER_STEP)]
    named = {p for p in params if _SCALER_NAME.search(p)} - {s for s, _call in pairs}
    if named:
        for site in frame.calls:
            if site.receiver not in named:
                continue
            if site.method == "update" and not site.node.args and not site.node.keywords:
                pairs.append((site.receiver, site))
            elif site.method == "step" and (site.node.args or site.node.keywords):
                given = site.arg(0, "optimizer")
                steps.append((site.receiver, dotted(given.value) if given else None, site.order, site))
    steps.sort(key=lambda step: step[2])
    for scaler, call in pairs:
        if scaler in params:
            key = f"#{params.index(scaler)}"
        elif scaler.startswith("self.") and scaler.count(".") == 1 and frame.class_name:
            key = scaler
        else:
            continue
        step = next((s for s in reversed(steps) if s[0] == scaler and s[2] < call.order), None)
        if step is not None and step[1]:
            optimizer = f"#{params.index(step[1])}" if step[1] in params else step[1]
            record: UpdateRecord = {"scaler": key, "optimizer": optimizer, "at": position(call.node)}
            # A condition over the update alone (``if update_scaler: scaler.update()``), not one
            # over the step and the update together (``if amp: scaler.step(o); scaler.update()``).
            shared = {block.ident for block in step[3].path}
            if any(block.kind in ("if", "else", "match") and block.ident not in shared for block in call.path):
                record["guarded"] = True
            found.append(record)
    return found


# A parameter named like a GradScaler.
_SCALER_NAME = re.compile(r"^(grad_|amp_|loss_)?scaler$", re.IGNORECASE)


_PROTOCOL = {
    EventKind.SCALED_BACKWARD: "backward",
    EventKind.UNSCALE: "unscale",
    EventKind.SCALER_STEP: "step",
    EventKind.UPDATE: "update",
}
_NOT_PROTOCOL = (EventKind.BACKWARD, EventKind.DELEGATED_BACKWARD, EventKind.CLIP, EventKind.OPTIMIZER_STEP)


def _scaler_protocol(frame: Frame, params: list[str], facts: AmpFacts | None = None) -> ProtocolRecord | None:
    """``{"field", "events"}`` for a method whose whole training-step work is GradScaler calls
    on one field of ``self``, each run on every call (an engine's ``backward_loss``:
    ``self.scaler.scale(loss).backward()``; its ``optimizer_step``: ``self.scaler.step(optimizer)``
    then ``self.scaler.update()``): the events in order, as ``[kind, optimizer parameter index]``.
    A method of the same class that it calls on every call and that only updates the field
    (``return self._update_scale()``) counts as its own update."""
    if frame.class_name is None or not params or frame.events_of(*_NOT_PROTOCOL):
        return None
    prefix = params[0] + "."
    fields = set()
    events: list[tuple[int, list[Any]]] = []
    for event in frame.events:
        kind = _PROTOCOL.get(event.kind)
        if kind is None:
            continue
        scaler = event.scaler or ""
        if event.path or not scaler.startswith(prefix) or "." in scaler[len(prefix) :]:
            return None  # on a path of its own, or not one of the object's fields
        fields.add(scaler[len(prefix) :])
        index = None
        if event.kind in (EventKind.SCALER_STEP, EventKind.UNSCALE):
            if event.optimizer not in params:
                return None
            index = params.index(event.optimizer)
        events.append((event.order, [kind, index]))
    if facts is not None and events:
        for site in frame.calls:
            if site.receiver != params[0] or site.path or site.method is None:
                continue
            field = _update_only(facts, frame.class_name, site.method)
            if field is not None:
                fields.add(field)
                events.append((site.order, ["update", None]))
    if len(fields) != 1:
        return None
    return {"field": fields.pop(), "events": [event for _order, event in sorted(events, key=lambda e: e[0])]}


def _update_only(facts: AmpFacts, class_name: str, method: str) -> str | None:
    """The field of ``self`` whose ``update()`` is all the GradScaler work the class's method
    ``method`` does, on every call; None otherwise."""
    for other in facts.frames:
        if other.class_name != class_name or other.name != method or other.parent is None:
            continue
        if other.parent.parent is not None:
            continue  # a nested function of that name, not the method
        node = other.node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not node.args.args:
            return None
        prefix = node.args.args[0].arg + "."
        kinds = [e for e in other.events if e.kind in _PROTOCOL]
        # Updates only, one of them on every call (a second one on some path, which sets the
        # scale to a floor after an overflow, is the method's own business).
        if not kinds or any(e.kind is not EventKind.UPDATE for e in kinds) or all(e.path for e in kinds):
            return None
        scalers = {e.scaler or "" for e in kinds}
        scaler = scalers.pop()
        if scalers or not scaler.startswith(prefix) or "." in scaler[len(prefix) :]:
            return None
        if other.events_of(*_NOT_PROTOCOL):
            return None
        return scaler[len(prefix) :]
    return None


def _scaler_default_none(
    facts: AmpFacts, function: ast.FunctionDef | ast.AsyncFunctionDef, frame: Frame, params: list[str]
) -> ScalerDefault | None:
    """``{"param", "index", "region"}`` for ``def train(..., scaler=None)`` that opens a float16
    autocast region, builds no scaler and never rebinds the parameter, and either runs a
    backward itself or hands the scaler on (``engine.step(loss, scaler=scaler)``)."""
    region = next((s.region for s in frame.calls if s.region is not None and s.region.is_float16), None)
    if region is None:
        return None
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    defaults = dict(zip((a.arg for a in positional[len(positional) - len(args.defaults) :]), args.defaults))
    defaults.update((a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None)
    for name, default in defaults.items():
        if "scaler" not in name.lower() or not (type(default) is ast.Constant and default.value is None):
            continue
        if facts.assigned(frame, name) or frame.events_of(EventKind.SCALER_NEW):
            return None
        handed_on = any(hands(site, name) for site in frame.calls)
        trains = frame.events_of(EventKind.BACKWARD, EventKind.SCALED_BACKWARD)
        if handed_on or trains:
            return {"param": name, "index": params.index(name), "region": position(region.node)}
    return None


def _unscale_for_caller(facts: AmpFacts, frame: Frame, params: list[str]) -> list[Any] | None:
    """``[scaler, optimizer or None, where]`` when the function unscales the gradients of a
    scaler it is handed (``scaler.unscale_(optimizer)`` on its parameters) and steps nothing:
    the step is its caller's (a per-micro-batch helper). Each of the two is a parameter's index,
    or, in a method, a field of its own object as ``".name"`` (``self.scaler.unscale_(
    self.optimizer)`` in a ``clip_gradients`` method that the training method calls on ``self``,
    run on every call of the method)."""
    if frame.events_of(EventKind.SCALER_STEP, EventKind.OPTIMIZER_STEP, EventKind.UPDATE):
        return None
    unscales = frame.events_of(EventKind.UNSCALE)
    for event in unscales:
        if event.scaler in params:
            # Not one that waits for the accumulation boundary itself (``if (i + 1) % accum ==
            # 0: scaler.unscale_(optimizer)``, or an early ``return`` before it): that one runs
            # once per step. A condition of another kind (``if clip_grad:``) still runs it on
            # every micro-step.
            if accumulation_gate(facts, event.path) is not None or _leaves_before(frame.node, event.call.node):
                continue
            optimizer = params.index(event.optimizer) if event.optimizer in params else None
            return [params.index(event.scaler), optimizer, position(event.call.node)]
    if frame.class_name is None or not params:
        return None
    clips = frame.events_of(EventKind.CLIP)
    for event in unscales:
        field = _own_field(event.scaler, params[0])
        # Only an unscale_ on every call, before any clip: a method's own condition may be the
        # accumulation boundary its caller's step waits for (``if self.n_accumulated % self.accum
        # == 0:`` around it, or an early ``return`` on the other micro-steps).
        if field is None or event.path or any(clip.order < event.order for clip in clips):
            continue
        if _leaves_before(frame.node, event.call.node):
            continue
        stepped = event.optimizer
        spelled = params.index(stepped) if stepped in params else _own_field(stepped, params[0])
        return [field, spelled, position(event.call.node)]
    return None


_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _leaves_before(function: ast.AST, node: ast.AST) -> bool:
    """Whether the function may return or raise before ``node`` (a ``return`` or ``raise`` of its
    own, nested functions and classes aside, that starts before it)."""
    line = getattr(node, "lineno", 0)
    body = getattr(function, "body", [])
    for statement in body:
        for inner in iter_nodes(statement, _NESTED):
            if type(inner) in (ast.Return, ast.Raise) and inner.lineno < line:  # type: ignore[attr-defined]
                return True
    return False


def _own_field(spelled: str | None, own: str) -> str | None:
    """``".name"`` for ``own.name`` (a field of the method's own object), else None."""
    if spelled is None or not spelled.startswith(own + "."):
        return None
    name = spelled[len(own) :]
    return name if name.count(".") == 1 else None


def _clip_for_caller(frame: Frame) -> list[int] | None:
    """Where the function clips gradients that it neither scaled nor unscaled itself (no scaled
    backward, no ``unscale_``, no scaler step in it): the state of the gradients is its
    caller's (a ``_clip_gradients`` helper, a ``ClipGradNorm`` object's ``__call__``)."""
    if frame.events_of(EventKind.SCALED_BACKWARD, EventKind.UNSCALE, EventKind.SCALER_STEP, EventKind.BACKWARD):
        return None
    for clip in frame.events_of(EventKind.CLIP):
        if not clip.norm_only:
            return position(clip.call.node)
    return None


def _clips_before_param_step(facts: AmpFacts, frame: Frame, params: list[str]) -> list[dict[str, Any]]:
    if frame.events_of(EventKind.SCALED_BACKWARD) or not params:
        return []
    found: list[dict[str, Any]] = []
    for clip in frame.events_of(EventKind.CLIP):
        if clip.norm_only:
            continue
        for site in frame.calls:
            if site.order <= clip.order or site.method != "step" or site.receiver not in params:
                continue
            scaler = site.receiver
            unscaled = any(
                s.receiver == scaler and s.method == "unscale_" and s.order < clip.order for s in frame.calls
            )
            if unscaled:
                continue
            optimizer = site.arg(0, "optimizer")
            found.append(
                {
                    "param": scaler,
                    "clip": position(clip.call.node),
                    "optimizer": dotted(optimizer.value) if optimizer else None,
                }
            )
            break
    return found


def _scales_for_caller(frame: Frame, params: list[str]) -> list[Any] | None:
    """``[parameter, where]``: the function runs ``P.scale(loss).backward()`` on a scaler it
    receives as ``P`` and never unscales it (a ``backward_step(model, scaler, loss)`` helper):
    its caller's gradients are still multiplied by the loss scale after the call."""
    for event in frame.events_of(EventKind.SCALED_BACKWARD):
        scaler = event.scaler
        if scaler in params and not any(u.scaler == scaler for u in frame.events_of(EventKind.UNSCALE)):
            return [scaler, position(event.call.node)]
    return None


def _updated_names(facts: AmpFacts, frame: Frame, params: list[str]) -> list[str]:
    """The parameters and known scalers of the function on which ``X.update()`` is called
    (``handed_steps.py``: whether a helper, or the caller of a step function, updates the scaler
    it has)."""
    scalers = facts.scalers
    return sorted(
        {
            site.receiver
            for site in frame.calls
            if site.method == "update"
            and site.receiver is not None
            and (site.receiver in params or site.receiver in scalers)
        }
    )


def _steps_handed(facts: AmpFacts, frame: Frame) -> list[dict[str, Any]]:
    """``[{scaler, at, handed}]``: a scaler the function scales a backward with and steps, that
    is updated nowhere in the module under its name, and that it hands to other calls (``handed``:
    where). The module's own AMP202 stays silent there: the helpers may update it."""
    steps = frame.events_of(EventKind.SCALER_STEP)
    if not steps:
        return []
    scaled = {e.scaler for e in frame.events_of(EventKind.SCALED_BACKWARD)}
    updated = {e.scaler for e in facts.events(EventKind.UPDATE)}
    out: list[dict[str, Any]] = []
    for scaler in sorted({e.scaler for e in steps if e.scaler and e.scaler in scaled and e.scaler not in updated}):
        handed = [position(site.node) for site in frame.calls if hands(site, scaler)]
        if handed:
            last = [e for e in steps if e.scaler == scaler][-1]
            out.append({"scaler": scaler, "at": position(last.call.node), "handed": handed})
    return out


def _own_backward(frame: Frame) -> list[int] | None:
    kinds = (EventKind.BACKWARD, EventKind.SCALED_BACKWARD, EventKind.DELEGATED_BACKWARD)
    for event in frame.events_of(*kinds):
        if event.call.region is None:
            return position(event.call.node)
    for site in frame.calls:  # ``accelerator.backward(loss)``: a backward the model leaves out of its events
        if site.method == "backward" and site.region is None and "accelerator" in (site.receiver or "").lower():
            return position(site.node)
    return None


def _returned_scaler(facts: AmpFacts, function: ast.AST, frame: Frame) -> list[int] | None:
    """Where the GradScaler is built that the function returns (``return GradScaler(...)``, or
    a local bound to one and returned), when it is enabled whatever the arguments."""
    made = {}
    for new in frame.events_of(EventKind.SCALER_NEW):
        if scaler_enabled(new.call.node, new.call.qname or "") is not True:
            continue
        statement = new.call.statement
        if isinstance(statement, ast.Return) and statement.value is new.call.node:
            return position(new.call.node)
        if (
            isinstance(statement, ast.Assign)
            and statement.value is new.call.node
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
        ):
            made[statement.targets[0].id] = new.call.node
    if not made:
        return None
    for node in iter_nodes(function):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Name) and node.value.id in made:
            return position(made[node.value.id])
    return None


def _local_scaler(facts: AmpFacts, frame: Frame) -> NewScaler | None:
    """A GradScaler built into a local of this function (not in a loop of its own), or into a
    ``self.`` attribute at the top of a method's body, and stepped in the function."""
    for new in frame.events_of(EventKind.SCALER_NEW):
        if new.call.loop is not None:
            continue
        statement = new.call.statement
        value = statement.value if isinstance(statement, ast.Assign) else None
        if type(value) is ast.IfExp and new.call.node in (value.body, value.orelse):
            value = new.call.node  # ``scaler = GradScaler() if amp else None``
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1 and value is new.call.node):
            continue
        target = dotted(statement.targets[0])
        if target is None or (
            type(statement.targets[0]) is not ast.Name
            and not (target.count(".") == 1 and target.startswith("self.") and not new.call.path and frame.class_name)
        ):
            continue  # ``if self.scaler is None: self.scaler = ...`` is set-up done once
        steps = [s for s in frame.calls if s.method == "step" and (s.receiver == target or _hands_on(s, target))]
        if steps:
            found: NewScaler = {"at": position(new.call.node), "name": target}
            if all(s.loop is None for s in steps):
                found["single_step"] = True  # one optimizer step per call, on a fresh scaler
            return found
    return None


def _hands_on(call: CallSite, target: str) -> bool:
    """``optimizers.step("generator", scaler=scaler)``: a step helper handed the scaler itself
    steps it (a multi-optimizer wrapper's ``step``)."""
    node = call.node
    values = [*node.args, *(k.value for k in node.keywords)]
    return any(dotted(value) == target for value in values)


def is_stub(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A body of a docstring, ``pass``, ``...`` or ``raise NotImplementedError``: an abstract
    method that a subclass overrides."""
    for stmt in function.body:
        if isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            continue
        if isinstance(stmt, ast.Raise) and "NotImplementedError" in (dotted(getattr(stmt.exc, "func", stmt.exc)) or ""):
            continue
        return False
    return True


def mark_steps(facts: AmpFacts, flows: dict[str, FunctionFlow]) -> dict[str, FunctionFlow]:
    """``plain`` on the flows of the functions that step an optimizer themselves without a
    scaler (``loss.backward(); optimizer.step()``): what they save is that training's state;
    ``scaled`` on those that run a scaled backward."""
    for frame in facts.frames:
        if not frame.events:
            continue
        name = qualname(frame)
        if name is None or name not in flows:
            continue
        if frame.events_of(EventKind.OPTIMIZER_STEP) and not frame.events_of(EventKind.SCALER_STEP):
            flows[name]["plain"] = True
        if frame.events_of(EventKind.SCALED_BACKWARD):
            flows[name]["scaled"] = True  # its calls may run on scaled gradients (``seeds.py``)
    return flows


def training_frames(facts: AmpFacts) -> list[str]:
    """The functions (and ``<module>``) that run a backward pass of their own."""
    kinds = (EventKind.BACKWARD, EventKind.SCALED_BACKWARD, EventKind.DELEGATED_BACKWARD)
    found = []
    for frame in facts.frames:
        name = qualname(frame)
        if name is not None and frame.events_of(*kinds):
            found.append(name)
    return found
