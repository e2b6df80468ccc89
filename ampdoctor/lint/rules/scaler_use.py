"""AMP203–AMP205: what goes through the GradScaler. An optimizer stepped beside the scaler
(AMP203), a backward pass the scaler never scaled (AMP204), a scaler built anew inside the
training loop (AMP205).

Events are compared within one frame (a function body or the module body); iteration.py answers
"same iteration" and "exclusive branches", scaler_queries.py the small questions.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from ..iteration import (
    exclusive,
    feeds,
    in_pass,
    is_prefix,
    pass_of,
    target_names,
)
from ..model import AmpFacts, Block, CallSite, Event, Frame
from ..passes import is_optimizer_constructor
from ..syntax import FUNCTION_TYPES, dotted, parameter_names
from ..vocabulary import EventKind
from . import SCALED_BACKWARD, SCALER, LintRule, Report, register
from .scaler_queries import (
    event_text,
    framework_backward,
    is_epoch_loop,
    scaler_enabled,
    scaler_events,
    target_of,
    uses_framework,
)

# --------------------------------------------------------------------------------------
# AMP203 step-bypasses-scaler
# --------------------------------------------------------------------------------------


@register
class StepBypassesScaler(LintRule):
    code = "AMP203"
    tokens = (".scale(",)
    anchors = SCALED_BACKWARD

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if uses_framework(facts):
            return
        doubled = set()
        for report in self._after_stepping_helper(facts):
            doubled.add(id(report.node))
            yield report
        for frame in facts.frames:
            backwards = frame.events_of(EventKind.BACKWARD, EventKind.SCALED_BACKWARD)
            if not any(b.kind is EventKind.SCALED_BACKWARD for b in backwards):
                continue
            stepped = {(e.scaler, e.optimizer) for e in scaler_events(frame, EventKind.SCALER_STEP)}
            for step in frame.events_of(EventKind.OPTIMIZER_STEP):
                if id(step.call.node) in doubled or _chosen_in_expression(step.call):
                    continue
                feeding = [b for b in backwards if feeds(b, step) and not exclusive(b, step)]
                if not feeding or feeding[-1].kind is not EventKind.SCALED_BACKWARD:
                    continue
                backward = feeding[-1]
                scaler = backward.scaler
                if (scaler, step.optimizer) in stepped:
                    # The scaler steps this optimizer too: the plain step is another branch, unless
                    # both run in one pass (``scaler.step(opt); scaler.update(); opt.step()``).
                    first = _stepped_before(facts, frame, step, scaler)
                    if first is not None:
                        yield self._second_step(facts, step, f"`{event_text(facts, first)}`", f"`{scaler}.step(...)`")
                    continue
                if any(
                    u.optimizer == step.optimizer and backward.order < u.order < step.order
                    for u in scaler_events(frame, EventKind.UNSCALE, scaler)
                ):
                    continue  # unscaled by hand: the step sees true gradients
                yield Report(
                    self.code,
                    step.call.node,
                    f"`{event_text(facts, step)}` applies gradients that `{scaler}.scale(...).backward()` multiplied by "
                    f"the loss scale, and it is not skipped when they overflow",
                    help=f"Call `{scaler}.step({step.optimizer})` instead, then `{scaler}.update()`",
                    statement=step.call.statement,
                )

    def _after_stepping_helper(self, facts: AmpFacts) -> Iterable[Report]:
        """``self.optimizer_step()`` (a method of the class whose body runs
        ``self.scaler.step(self.optimizer)``), then ``self.optimizer.step()`` in the same block
        with no backward between: the optimizer steps twice per update, the second time even when
        the scaler skipped an overflowing step. The plain step must sit in the very block of the
        helper's call: under a test of its own (``if self.scaler is None:``) it may be the other
        arm of the helper's choice."""
        helpers = _stepping_helpers(facts)
        if not helpers:
            return
        for frame in facts.frames:
            steps = frame.events_of(EventKind.OPTIMIZER_STEP)
            if not steps:
                continue
            for site in frame.calls:
                if not _called_alone(site):
                    continue  # ``self._amp_step() if amp else self.optimizer.step()``: one or the other
                stepped = _helper_steps(helpers, frame, site)
                if stepped is None:
                    continue
                helper, optimizer = stepped
                for step in steps:
                    if (
                        step.optimizer != optimizer
                        or step.order <= site.order
                        or not _called_alone(step.call)
                        or [b.ident for b in step.path] != [b.ident for b in site.path]
                        or any(
                            site.order < b.order < step.order
                            for b in frame.events_of(EventKind.BACKWARD, EventKind.SCALED_BACKWARD)
                        )
                    ):
                        continue
                    called = facts.text(site.node.func) + (
                        "()" if not (site.node.args or site.node.keywords) else "(...)"
                    )
                    after = f"`{called}`, which steps it through `{helper.scaler}.step(...)`"
                    yield self._second_step(facts, step, after, f"`{called}`")
                    break

    def _second_step(self, facts: AmpFacts, step: Event, after: str, stepper: str) -> Report:
        """A plain ``optimizer.step()`` after ``after`` has stepped the same optimizer."""
        return Report(
            self.code,
            step.call.node,
            f"`{event_text(facts, step)}` steps the optimizer a second time after {after}: it applies the "
            "gradients again, and applies them even when the scaler skipped an overflowing step",
            help=f"Remove `{event_text(facts, step)}`: {stepper} already steps it",
            statement=step.call.statement,
        )


def _chosen_in_expression(site: CallSite) -> bool:
    """Whether the call is one arm of a choice made inside an expression (``self._amp_step() if
    amp else self.optimizer.step()``, ``amp and amp_step() or opt.step()``): like the other arm
    of an ``if``, it may be the branch without AMP."""
    if _called_alone(site):
        return False
    return any(
        type(node) in (ast.IfExp, ast.BoolOp) and any(inner is site.node for inner in ast.walk(node))
        for node in ast.walk(site.statement)
    )


def _called_alone(site: CallSite) -> bool:
    """Whether the call is a statement of its own (``helper()``), not part of an expression that
    may skip it (``a() if c else b()``, ``amp and a() or b()``)."""
    statement = site.statement
    return type(statement) is ast.Expr and statement.value is site.node


def _stepping_helpers(facts: AmpFacts) -> dict[tuple[str | None, str], Event]:
    """The functions of the module that step an optimizer through a scaler, by (class, name): a
    method's ``self.X`` optimizer, or a module function's parameter."""
    found: dict[tuple[str | None, str], Event] = {}
    for frame in facts.frames:
        node = frame.node
        if not isinstance(node, FUNCTION_TYPES) or frame.parent is None or frame.parent.parent is not None:
            continue  # a nested function is called through names this does not follow
        for event in scaler_events(frame, EventKind.SCALER_STEP):
            if event.optimizer is not None:
                found.setdefault((frame.class_name, frame.name), event)
                break
    return found


def _helper_steps(
    helpers: dict[tuple[str | None, str], Event], frame: Frame, site: CallSite
) -> tuple[Event, str] | None:
    """The helper's scaler step and the caller's name for the optimizer it steps, where ``site``
    calls one of ``helpers``: ``self.name(...)`` in a method of the same class, ``name(...)``
    for a module function, whose optimizer parameter is matched to the argument passed."""
    if site.receiver == "self" and frame.class_name is not None and site.method is not None:
        event = helpers.get((frame.class_name, site.method))
        if event is None or event.optimizer is None or not event.optimizer.startswith("self."):
            return None
        return event, event.optimizer
    node = site.node
    if site.receiver is not None or type(node.func) is not ast.Name:
        return None
    event = helpers.get((None, node.func.id))
    if event is None or event.optimizer is None:
        return None
    helper = event.call.frame.node
    if event.optimizer not in parameter_names(helper):
        return None
    args = helper.args  # type: ignore[attr-defined]  # (a function: it has parameters)
    positional = [a.arg for a in (*args.posonlyargs, *args.args)]
    where = positional.index(event.optimizer) if event.optimizer in positional else None
    passed = site.arg(where, event.optimizer)
    spelled = dotted(passed.value) if passed is not None else None
    return (event, spelled) if spelled is not None else None


def _stepped_before(facts: AmpFacts, frame: Frame, step: Event, scaler: str | None) -> Event | None:
    """The ``scaler.step(optimizer)`` that, on some path of one pass, runs before the plain
    ``optimizer.step()`` with no backward between them (tests the path decides are followed:
    ``if amp: scaler.step(opt)`` and ``if not amp: opt.step()`` never run together)."""
    node = pass_of(step)
    if node is None:
        return None
    candidates = [
        s
        for s in scaler_events(frame, EventKind.SCALER_STEP, scaler)
        if s.optimizer == step.optimizer and s.order < step.order and in_pass(s, node) and not exclusive(s, step)
    ]
    if not candidates:
        return None
    from ..control_paths import paths_of  # computed only for bodies where the question arises

    for path in paths_of(facts, frame, node) or ():
        at = path.index(step)
        if at < 0:
            continue
        for position in range(at - 1, -1, -1):
            event = path.events[position]
            if event.kind in (EventKind.BACKWARD, EventKind.SCALED_BACKWARD):
                break
            if event in candidates:
                return event
    return None


# --------------------------------------------------------------------------------------
# AMP204 unscaled-backward
# --------------------------------------------------------------------------------------


@register
class UnscaledBackward(LintRule):
    code = "AMP204"
    tokens = ("GradScaler", ".scale(")
    anchors = SCALER

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        disabled = {
            target
            for event in facts.events(EventKind.SCALER_NEW)
            if (target := target_of(facts, event.call.node)) is not None
            and scaler_enabled(event.call.node, event.call.qname or "") is False
        }
        for frame in facts.frames:
            steps = [s for s in scaler_events(frame, EventKind.SCALER_STEP) if s.scaler not in disabled]
            if not steps or frame.events_of(EventKind.SCALED_BACKWARD):
                continue
            # Any ``K.scale(...)`` in the function (a scaled loss divided later, a list of scaled
            # losses) means scaling happens here in a form the model does not follow.
            if any(site.method == "scale" and site.receiver in facts.scalers for site in frame.calls):
                continue
            params = parameter_names(frame.node)
            for backward in frame.events_of(EventKind.BACKWARD):
                site = backward.call
                if framework_backward(site) or "scale" in (site.receiver or "").lower():
                    continue
                if site.receiver in params and not facts.assigned(frame, site.receiver):
                    continue  # a loss the caller made, and may have scaled (``self._backward(loss)``)
                fed = [s for s in steps if feeds(backward, s) and not exclusive(backward, s)]
                if not fed:
                    continue
                step = fed[0]
                yield Report(
                    self.code,
                    site.node,
                    f"plain `{event_text(facts, backward)}` before `{event_text(facts, step)}`: the gradients were never "
                    f"multiplied by the loss scale, so `{step.scaler}.step` divides them by it and float16 gradients "
                    "underflow",
                    help=f"Scale the loss first: `{step.scaler}.scale(loss).backward()`",
                    statement=site.statement,
                )


# --------------------------------------------------------------------------------------
# AMP205 scaler-in-loop
# --------------------------------------------------------------------------------------


def _lazy_set_up(facts: AmpFacts, new: Event, loop: Block, target: str) -> bool:
    """Whether a construction inside a loop is made on one pass only, or carries the old state on:

    - under a test of the scaler itself (``if scaler is None:``, ``if not hasattr(self,
      "scaler"):``): made once, on the first pass;
    - under an equality test of the loop's own variable (``if step == resume_step:``): one pass;
    - followed in its block by ``<target>.load_state_dict(...)``: the scale goes on from the
      state saved before (a scaler rebuilt on resuming).

    A test of anything else (``if cfg.mixed_precision:``) builds a new scaler on every pass it
    holds."""
    inside = False
    name = target.rsplit(".", 1)[-1]
    counters = _loop_names(loop.node)
    for block in new.path:
        if block.ident == loop.ident:
            inside = True
            continue
        if inside and isinstance(block.node, ast.If):
            test = block.node.test
            if name in facts.text(test) or (block.kind == "if" and _tests_one_pass(test, counters)):
                return True
    return _restored(facts, new, target)


def _loop_names(loop: ast.AST) -> set[str]:
    return set(target_names(loop.target)) if isinstance(loop, (ast.For, ast.AsyncFor)) else set()


def _tests_one_pass(test: ast.expr, counters: set[str]) -> bool:
    """``step == 3``, ``epoch == start and ...``: an equality of a loop variable holds on one pass."""
    if type(test) is ast.BoolOp and type(test.op) is ast.And:
        return any(_tests_one_pass(value, counters) for value in test.values)
    if type(test) is not ast.Compare or not all(type(op) in (ast.Eq, ast.Is) for op in test.ops):
        return False
    return any(type(side) is ast.Name and side.id in counters for side in (test.left, *test.comparators))


def _restored(facts: AmpFacts, new: Event, target: str) -> bool:
    """Whether ``<target>.load_state_dict(...)`` follows the construction in its block (or in a
    block nested in it), on the same pass."""
    return any(
        call.receiver == target
        and call.frame is new.call.frame
        and call.order > new.order
        and is_prefix(new.path, call.path)
        for call in facts.calls_named("load_state_dict")
    )


@register
class ScalerInLoop(LintRule):
    code = "AMP205"
    tokens = ("GradScaler",)
    anchors = SCALER

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        for frame in facts.frames:
            for new in frame.events_of(EventKind.SCALER_NEW):
                target = target_of(facts, new.call.node)
                if target is None:
                    continue
                report = (
                    self._in_stepping_loop(frame, facts, new, target)
                    or self._in_epoch_loop(frame, facts, new, target)
                    or self._in_epoch_function(frame, facts, new, target)
                )
                if report is not None:
                    yield report

    def _in_stepping_loop(self, frame: Frame, facts: AmpFacts, new: Event, target: str) -> Report | None:
        loop = new.call.loop
        if loop is None or _lazy_set_up(facts, new, loop, target):
            return None
        if not any(
            s.order > new.order and s.call.loop is not None and s.call.loop.ident == loop.ident
            for s in scaler_events(frame, EventKind.SCALER_STEP, target)
        ):
            return None
        return self._report(
            facts,
            new,
            f"a new GradScaler is assigned to `{target}` on every pass of the loop that steps it",
            "each iteration",
            "Create the GradScaler once, before the training loop",
        )

    def _in_epoch_loop(self, frame: Frame, facts: AmpFacts, new: Event, target: str) -> Report | None:
        """Built directly in an epoch loop, stepped in the loop nested in it. A loop over folds or
        trials, or one that also builds its optimizer, is a fresh training run per pass: correct."""
        loop = new.call.loop
        if loop is None or new.path[-1].ident != loop.ident or not is_epoch_loop(facts, loop.node):
            return None
        nested = [
            s
            for s in scaler_events(frame, EventKind.SCALER_STEP, target)
            if s.order > new.order
            and s.call.loop is not None
            and s.call.loop.ident != loop.ident
            and any(b.ident == loop.ident for b in s.path)
        ]
        if not nested or _builds_optimizer(facts, frame, loop):
            return None
        return self._report(
            facts,
            new,
            f"a new GradScaler is assigned to `{target}` on every pass of the epoch loop",
            "each epoch",
            "Create the GradScaler once, before the epoch loop",
        )

    def _in_epoch_function(self, frame: Frame, facts: AmpFacts, new: Event, target: str) -> Report | None:
        """Built in a function that trains with it and that the module calls from its epoch loop."""
        if new.call.loop is not None or "." in target or not isinstance(frame.node, FUNCTION_TYPES):
            return None
        if not any(s.call.loop is not None for s in scaler_events(frame, EventKind.SCALER_STEP, target)):
            return None
        if _builds_optimizer(facts, frame):
            return None  # a complete training run (a fold, a trial)
        name = frame.node.name
        for site in _calls_of(facts, frame):
            loop = site.loop
            if loop is not None and (is_epoch_loop(facts, loop.node) or "epoch" in name.lower()):
                return self._report(
                    facts,
                    new,
                    f"a new GradScaler is assigned to `{target}` on every call of `{name}`, which the loop on line "
                    f"{getattr(loop.node, 'lineno', None)} calls once per epoch",  # a loop: it has a line
                    "each epoch",
                    f"Create the GradScaler once, before the epoch loop, and pass it to `{name}`",
                )
        return None

    def _report(self, facts: AmpFacts, new: Event, what: str, when: str, help: str) -> Report:
        return Report(
            self.code,
            new.call.node,
            f"{what}: the loss scale restarts at its initial value {when} and never settles",
            help=help,
            statement=new.call.statement,
        )


def _builds_optimizer(facts: AmpFacts, frame: Frame, block: Block | None = None) -> bool:
    """Whether ``frame`` (inside ``block``, when given) constructs an optimizer."""
    return any(
        (block is None or any(b.ident == block.ident for b in site.path)) and is_optimizer_constructor(site.node, facts)
        for site in frame.calls
    )


def _calls_of(facts: AmpFacts, frame: Frame) -> list[CallSite]:
    """Calls of a module-level function (``f(...)``) or of a method through ``self`` of its class."""
    if frame.parent is None or frame.parent.parent is not None:
        return []  # a nested function: called through names the model does not follow
    name = frame.name
    if frame.class_name is None:
        return [c for c in facts.calls_named(name) if c.receiver is None and isinstance(c.node.func, ast.Name)]
    return [
        c
        for c in facts.calls_named(name)
        if c.receiver == "self" and c.method == name and c.frame.class_name == frame.class_name
    ]
