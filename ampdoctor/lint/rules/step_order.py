"""AMP206–AMP208: the order of the GradScaler calls within one iteration. ``unscale_`` twice
before one step (AMP206), ``step``/``update``/``unscale_`` out of order (AMP207), ``update``
called per optimizer rather than once per iteration (AMP208).

These rules follow the paths of one pass through a loop body or a step function (control_paths.py) and
ask iteration.py how two events relate; whenever the answer is unclear they stay silent.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator

from ..anchors import Anchors
from ..iteration import (
    ACCUMULATION_TEST,
    accumulation_gate,
    assigned_in,
    common_prefix,
    exclusive,
    feeds,
    in_pass,
    is_prefix,
    loop_binds,
    pass_of,
    repeats,
    same_iteration,
)
from ..model import AmpFacts, Event, Frame
from ..syntax import FUNCTION_TYPES
from ..vocabulary import EventKind
from . import SCALER, LintRule, Report, register
from .scaler_queries import (
    event_text,
    hands,
    scaler_events,
)

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from ..control_paths import Path

# Tests that skip an optimizer step now and then: a non-finite guard, a skip flag, a step switch.
_SKIP_TEST = re.compile(r"finite|nan|inf\b|overflow|skip|norm|step|update", re.I)


# --------------------------------------------------------------------------------------
# AMP206 double-unscale
# --------------------------------------------------------------------------------------


def _built_in_loops(facts: AmpFacts, frame: Frame) -> set[tuple[str, int]]:
    """(name, loop) for each name the frame binds to a new GradScaler inside a loop."""
    from .scaler_queries import target_of

    found = set()
    for new in frame.events_of(EventKind.SCALER_NEW):
        loop = new.call.loop
        if loop is not None:
            target = target_of(facts, new.call.node)
            if target is not None:
                found.add((target, loop.ident))
    return found


@register
class DoubleUnscale(LintRule):
    code = "AMP206"
    tokens = ("unscale_",)
    anchors = Anchors(methods=("unscale_",))

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        for frame in facts.frames:
            reported: set[int] = set()
            # A scaler built anew in the loop (AMP205's mistake) is never unscaled twice.
            fresh = _built_in_loops(facts, frame)
            unscaled = {id(e.call.node): e for e in frame.events_of(EventKind.UNSCALE)} if fresh else {}
            for report in (
                *self._twice_on_one_path(frame, facts),
                *self._per_micro_step(frame, facts),
                *self._iteration_without_update(frame, facts),
            ):
                event = unscaled.get(id(report.node))
                if event is not None and event.call.loop is not None and (event.scaler, event.call.loop.ident) in fresh:
                    continue  # rebuilt on every pass of the loop its unscale_ repeats in
                if id(report.node) not in reported:
                    reported.add(id(report.node))
                    yield report

    def _twice_on_one_path(self, frame: Frame, facts: AmpFacts) -> Iterator[Report]:
        unscales = [u for u in frame.events_of(EventKind.UNSCALE) if u.optimizer]
        for i, second in enumerate(unscales):
            for first in unscales[:i]:
                if (first.scaler, first.optimizer) != (second.scaler, second.optimizer):
                    continue
                if not same_iteration(first, second) or exclusive(first, second):
                    continue
                if any(
                    first.order < e.order < second.order for e in scaler_events(frame, EventKind.UPDATE, first.scaler)
                ):
                    continue  # update() reset the state in between
                if any(
                    s.optimizer == first.optimizer and s.order < second.order and same_iteration(s, second)
                    for s in scaler_events(frame, EventKind.SCALER_STEP, first.scaler)
                ):
                    continue  # unscale_ after step: AMP207 reports it
                yield Report(
                    self.code,
                    second.call.node,
                    f"`{event_text(facts, second)}` runs a second time for one step (first at `{event_text(facts, first)}`): "
                    "torch raises 'unscale_() has already been called on this optimizer since the last update()'",
                    help="Call `unscale_` once per optimizer, after the last backward and before the step",
                    statement=second.call.statement,
                )
                break

    def _per_micro_step(self, frame: Frame, facts: AmpFacts) -> Iterator[Report]:
        steps = scaler_events(frame, EventKind.SCALER_STEP)
        updates = scaler_events(frame, EventKind.UPDATE)
        for unscale in frame.events_of(EventKind.UNSCALE):
            name = unscale.optimizer
            if not name:
                continue
            for step in steps:
                if (step.scaler, step.optimizer) != (unscale.scaler, name) or step.order < unscale.order:
                    continue
                shared = common_prefix(unscale.path, step.path)
                own, step_own = unscale.path[shared:], step.path[shared:]
                if any(b.kind != "loop" for b in own):
                    continue  # the unscale_ is conditional itself
                if own:
                    # unscale_ sits in a loop that the step is outside of: a micro-batch loop.
                    if any(loop_binds(b, name) or assigned_in(frame, facts, name, b) for b in own):
                        continue  # a loop over optimizers
                    if any(any(b.ident == own[0].ident for b in u.path) for u in updates if u.scaler == unscale.scaler):
                        continue
                    why = "it runs on every pass of the loop around it while the step runs once after the loop"
                    raises = True
                else:
                    gate = accumulation_gate(facts, step_own)
                    if gate is None or _handed_within(frame, unscale.scaler, gate):
                        continue  # (a helper handed the scaler in the other arm may step it)
                    why = f"it runs on every micro-step while the step is gated by `{facts.text(gate.test)}`"
                    # An update() on every micro-step resets the state: no error, but repeated division.
                    raises = not any(
                        u.scaler == unscale.scaler
                        and u.order > unscale.order
                        and is_prefix(u.path, unscale.path)
                        and len(u.path) == len(unscale.path)
                        for u in updates
                    )
                consequence = (
                    "the next unscale_ before the step raises 'unscale_() has already been called on this "
                    "optimizer since the last update()'"
                    if raises
                    else "the accumulated gradients are divided by the scale again and again"
                )
                yield Report(
                    self.code,
                    unscale.call.node,
                    f"`{event_text(facts, unscale)}` can run several times for one `{event_text(facts, step)}`: "
                    f"{why}; {consequence}",
                    help="Move `unscale_` under the same condition as the step, right before it",
                    statement=unscale.call.statement,
                )
                break

    def _iteration_without_update(self, frame: Frame, facts: AmpFacts) -> Iterator[Report]:
        """An ``unscale_`` on a path of one iteration that ends without ``update()`` (the next
        iteration's ``unscale_`` of the same optimizer raises), or that updates without stepping
        because the step waits for the accumulation step (the next ``unscale_`` divides the
        accumulated gradients again)."""
        for unscale in frame.events_of(EventKind.UNSCALE):
            node = pass_of(unscale)
            if node is None or not unscale.optimizer:
                continue
            updates = [u for u in scaler_events(frame, EventKind.UPDATE, unscale.scaler) if in_pass(u, node)]
            steps = [
                s
                for s in scaler_events(frame, EventKind.SCALER_STEP, unscale.scaler)
                if in_pass(s, node) and s.optimizer == unscale.optimizer
            ]
            if not updates or not steps:
                continue  # the protocol is finished somewhere else
            from ..control_paths import paths_of  # computed only for bodies where the question arises

            for path in paths_of(facts, frame, node) or ():
                where = path.index(unscale)
                if where < 0 or not repeats(path, node):
                    continue
                report = self._without_update(facts, unscale, node, path, where, updates) or self._without_step(
                    facts, unscale, path, where, steps
                )
                if report is not None:
                    yield report
                    break

    def _without_update(
        self, facts: AmpFacts, unscale: Event, node: ast.AST, path: Path, where: int, updates: list[Event]
    ) -> Report | None:
        if any(e.kind is EventKind.UPDATE and e.scaler == unscale.scaler for e in path.events[where + 1 :]):
            return None
        reason: str | None
        if path.jump is not None:
            reason = f"`{facts.text(path.jump)}` on line {path.jump.lineno} skips it"
        else:
            reason = _skipped_by(facts, path, where, updates, (ACCUMULATION_TEST, _SKIP_TEST))
        if reason is None:
            return None
        again = "call" if isinstance(node, FUNCTION_TYPES) else "iteration"
        return Report(
            self.code,
            unscale.call.node,
            f"`{event_text(facts, unscale)}` can run in a {again} that ends without `{unscale.scaler}.update()` "
            f"({reason}): the next {again}'s unscale_ raises 'unscale_() has already been called on this "
            "optimizer since the last update()'",
            help=f"Call `{unscale.scaler}.update()` on every path after `unscale_` (skip only the step), or "
            "move `unscale_` under the same condition as the step and the update",
            statement=unscale.call.statement,
        )

    def _without_step(
        self, facts: AmpFacts, unscale: Event, path: Path, where: int, steps: list[Event]
    ) -> Report | None:
        """Unscaled, then updated but not stepped because the step waits for the accumulation step.
        (A guard that skips a non-finite step is right to update without stepping.)"""
        later = path.events[where + 1 :]
        if any(e in steps for e in later) or not any(
            e.kind is EventKind.UPDATE and e.scaler == unscale.scaler for e in later
        ):
            return None
        reason = _skipped_by(facts, path, where, steps, (ACCUMULATION_TEST,))
        if reason is None:
            return None
        update = next(e for e in later if e.kind is EventKind.UPDATE and e.scaler == unscale.scaler)
        if _handed_between(unscale, update):
            return None  # ``optim_step_and_measure_param_change(model, optimizer, scaler)`` may step
        return Report(
            self.code,
            unscale.call.node,
            f"`{event_text(facts, unscale)}` can run on a micro-step that updates but does not step ({reason}): "
            "the next unscale_ divides the accumulated gradients by the scale again",
            help="Move `unscale_` under the same condition as the step, right before it",
            statement=unscale.call.statement,
        )


def _handed_between(unscale: Event, update: Event) -> bool:
    """Whether a call between the ``unscale_`` and the ``update()`` is handed the scaler: a
    helper that may step it."""
    start, end = unscale.call.order, update.call.order
    return any(start < site.order < end and hands(site, unscale.scaler) for site in unscale.call.frame.calls)


def _handed_within(frame: Frame, scaler: str | None, node: ast.If) -> bool:
    """Whether a call inside ``node`` is handed the scaler."""
    first, last = node.lineno, node.end_lineno or node.lineno
    return any(first <= site.node.lineno <= last and hands(site, scaler) for site in frame.calls)


def _skipped_by(
    facts: AmpFacts, path: Path, where: int, blocked: list[Event], patterns: tuple[re.Pattern[str], ...]
) -> str | None:
    """The condition that, on ``path`` after its event ``where``, kept all of ``blocked`` from running,
    when its test matches one of ``patterns`` (a config flag may be the unscale_'s own condition
    spelled differently: only a test that plainly gates or skips steps counts)."""
    for decision in path.decisions:
        if decision.position <= where:
            continue
        for event in blocked:
            for block in event.path:
                if block.node is decision.node and (block.kind == "if") != decision.truth:
                    test = facts.text(decision.node.test)
                    meaning = test if decision.test is decision.node.test else ast.unparse(decision.test)
                    if any(pattern.search(meaning) for pattern in patterns):
                        arm = "when" if block.kind == "if" else "unless"
                        return f"`{event_text(facts, event)}` runs only {arm} `{test}`"
    return None


# --------------------------------------------------------------------------------------
# AMP207 scaler-call-order
# --------------------------------------------------------------------------------------


@register
class ScalerCallOrder(LintRule):
    code = "AMP207"
    tokens = ("GradScaler", ".scale(")
    anchors = SCALER

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        for frame in facts.frames:
            yield from self._unscale_after_step(frame, facts)
            yield from self._update_before_step(frame, facts)
            yield from self._step_before_backward(frame, facts)

    def _pairs(self, frame: Frame, first_kind: EventKind, second_kind: EventKind) -> Iterator[tuple[Event, Event]]:
        for second in frame.events_of(second_kind):
            for first in frame.events_of(first_kind):
                if (
                    first.scaler == second.scaler
                    and first.order < second.order
                    and same_iteration(first, second)
                    and not exclusive(first, second)
                ):
                    yield first, second

    def _between(self, frame: Frame, kind: EventKind, scaler: str | None, start: int, end: int) -> bool:
        return any(start < e.order < end for e in scaler_events(frame, kind, scaler))

    def _unscale_after_step(self, frame: Frame, facts: AmpFacts) -> Iterator[Report]:
        done: set[int] = set()
        for step, unscale in self._pairs(frame, EventKind.SCALER_STEP, EventKind.UNSCALE):
            if id(unscale) in done or not step.optimizer or step.optimizer != unscale.optimizer:
                continue
            if self._between(frame, EventKind.UPDATE, step.scaler, step.order, unscale.order):
                continue
            yield Report(
                self.code,
                unscale.call.node,
                f"`{event_text(facts, unscale)}` after `{event_text(facts, step)}` in the same iteration: torch raises "
                "'unscale_() is being called after step()'",
                help="Call `unscale_` between the backward and the step",
                statement=unscale.call.statement,
            )
            done.add(id(unscale))

    def _update_before_step(self, frame: Frame, facts: AmpFacts) -> Iterator[Report]:
        done: set[int] = set()
        for update, step in self._pairs(frame, EventKind.UPDATE, EventKind.SCALER_STEP):
            if id(update) in done:
                continue
            start = max(
                (b.order for b in scaler_events(frame, EventKind.SCALED_BACKWARD, update.scaler) if feeds(b, update)),
                default=-1,
            )
            if start < 0 and update.call.loop is not None:
                start = min(c.order for c in frame.calls if update.call.loop in c.path) - 1
            if self._between(frame, EventKind.SCALER_STEP, update.scaler, start, update.order):
                continue  # a step before it: several optimizers (AMP208)
            done.add(id(update))
            yield Report(
                self.code,
                update.call.node,
                f"`{event_text(facts, update)}` runs before `{event_text(facts, step)}` of the same iteration: update() must "
                "come last, after every optimizer has stepped",
                help=f"Move `{update.scaler}.update()` after the last `{update.scaler}.step(...)`",
                statement=update.call.statement,
            )

    def _step_before_backward(self, frame: Frame, facts: AmpFacts) -> Iterator[Report]:
        done: set[int] = set()
        for step, backward in self._pairs(frame, EventKind.SCALER_STEP, EventKind.SCALED_BACKWARD):
            if id(step) in done or any(
                feeds(b, step) for b in scaler_events(frame, EventKind.SCALED_BACKWARD, step.scaler)
            ):
                continue
            if any(b.kind != "loop" for b in step.path[common_prefix(step.path, backward.path) :]):
                continue  # a conditional step (``if i > 0:``) may be deliberate
            yield Report(
                self.code,
                step.call.node,
                f"`{event_text(facts, step)}` runs before the scaled backward `{event_text(facts, backward)}` of the same "
                "iteration: it steps on the previous gradients, or on none",
                help="Step after `scaler.scale(loss).backward()`",
                statement=step.call.statement,
            )
            done.add(id(step))


# --------------------------------------------------------------------------------------
# AMP208 update-per-optimizer
# --------------------------------------------------------------------------------------


_PARTIAL_UPDATE = (
    "the later steps unscale with a scale that was already updated, and each update only sees part of the inf checks"
)


@register
class UpdatePerOptimizer(LintRule):
    code = "AMP208"
    tokens = ("GradScaler", ".scale(")
    anchors = SCALER

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        for frame in facts.frames:
            for update in frame.events_of(EventKind.UPDATE):
                report = (
                    self._between_steps(frame, facts, update)
                    or self._in_optimizer_loop(frame, facts, update)
                    or self._before_another_round(frame, facts, update)
                )
                if report is not None:
                    yield report

    def _between_steps(self, frame: Frame, facts: AmpFacts, update: Event) -> Report | None:
        steps = [
            s
            for s in scaler_events(frame, EventKind.SCALER_STEP, update.scaler)
            if same_iteration(s, update) and not exclusive(s, update)
        ]
        before = [s for s in steps if s.order < update.order]
        after = [s for s in steps if s.order > update.order]
        if not before or not after:
            return None
        following = after[0]
        backwards = scaler_events(frame, EventKind.SCALED_BACKWARD, update.scaler)
        if any(update.order < b.order < following.order for b in backwards):
            return None  # a new backward: the next step is a new round, not another optimizer
        return self._report(facts, update, f"before `{event_text(facts, following)}` of the same iteration")

    def _in_optimizer_loop(self, frame: Frame, facts: AmpFacts, update: Event) -> Report | None:
        loop = update.call.loop
        if loop is None or not isinstance(loop.node, (ast.For, ast.AsyncFor)):
            return None
        for step in scaler_events(frame, EventKind.SCALER_STEP, update.scaler):
            if step.order > update.order or step.call.loop is None or step.call.loop.ident != loop.ident:
                continue
            if not step.optimizer or not loop_binds(loop, step.optimizer):
                continue
            if any(any(b.ident == loop.ident for b in e.path) for e in scaler_events(frame, EventKind.SCALED_BACKWARD)):
                continue
            return self._report(facts, update, f"inside the loop over optimizers (`{event_text(facts, step)}`)")
        return None

    def _before_another_round(self, frame: Frame, facts: AmpFacts, update: Event) -> Report | None:
        """On some path of one iteration, another optimizer steps (after its own scaled backward)
        once this update has run: a GAN's discriminator and generator halves, each with an update,
        also when one half is under a condition or the halves sit in different branches."""
        node = pass_of(update)
        if node is None:
            return None
        from ..control_paths import paths_of  # computed only for bodies where the question arises

        for path in paths_of(facts, frame, node) or ():
            where = path.index(update)
            if where < 0:
                continue
            mine = [e for e in path.events if e.scaler == update.scaler and in_pass(e, node)]
            before = {e.optimizer for e in mine if e.kind is EventKind.SCALER_STEP and path.index(e) < where}
            if not before or None in before:
                continue
            for later in mine:
                if (
                    later.kind is EventKind.SCALER_STEP
                    and path.index(later) > where
                    and later.optimizer
                    and later.optimizer not in before
                ):
                    return self._report(
                        facts,
                        update,
                        f"before `{event_text(facts, later)}` of the same iteration",
                        "torch expects one update() per iteration, after every optimizer has stepped: here the scale "
                        "changes between the optimizers' steps, grows twice as often as it should, and each update "
                        "sees only one optimizer's inf checks",
                    )
        return None

    def _report(self, facts: AmpFacts, update: Event, where: str, why: str = _PARTIAL_UPDATE) -> Report:
        return Report(
            self.code,
            update.call.node,
            f"`{event_text(facts, update)}` runs {where}: {why}",
            help=f"Call `{update.scaler}.update()` once, after the last `{update.scaler}.step(...)` of the iteration",
            statement=update.call.statement,
        )
