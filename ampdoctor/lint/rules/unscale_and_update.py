"""AMP2xx: the GradScaler protocol, compared within one function body.

The order a training step must follow, per scaler and iteration::

    scaler.scale(loss).backward()      # gradients are multiplied by the scale
    scaler.unscale_(optimizer)         # optional; required before clipping or reading grads
    clip_grad_norm_(...)
    scaler.step(optimizer)             # skipped when an inf/NaN was found
    scaler.update()                    # once, after every optimizer stepped

Each rule here looks at the events of one frame (function or module body). When a protocol is
spread over several functions, these rules stay silent (a miss costs less than a false alarm)
and the project analysis judges it: ``project/seeds.py`` runs these rules again with what a
function's helpers and callers do put into its model (a clip helper, an ``unscale_`` in a
per-micro-batch helper, a caller's scaled backward), and ``project/checks.py`` lists the checks
that follow the protocol across functions (AMP201 in a clip helper, AMP208 for updates in two
methods of one iteration); ``ampdoctor rule CODE`` names the modules of each code.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

from ..iteration import exclusive, is_prefix
from ..model import AmpFacts, Event, Frame
from ..syntax import parameter_names
from ..vocabulary import CLIP_NAMES, EventKind
from . import SCALED_BACKWARD, FixPlan, LintRule, NodeEdit, Report, register
from .scaler_queries import hands

# Statements with a body, when the call sits in their header: a line added after one would
# follow the whole block. (Match and TryStar exist only on newer Pythons.)
_COMPOUND = tuple(
    getattr(ast, name)
    for name in (
        "If",
        "For",
        "AsyncFor",
        "While",
        "With",
        "AsyncWith",
        "Try",
        "TryStar",
        "FunctionDef",
        "AsyncFunctionDef",
        "ClassDef",
        "Match",
    )
    if hasattr(ast, name)
)
# What may follow a statement that has its lines to itself: a semicolon, a comment.
_LINE_END = re.compile(rb"\s*;?\s*(#.*)?")


def _scaler_events(frame: Frame, kind: EventKind, scaler: str) -> list[Event]:
    return [e for e in frame.events if e.kind is kind and e.scaler == scaler]


def _simple_statement(facts: AmpFacts, event: Event) -> ast.stmt | ast.expr | None:
    """The call's statement when it is a simple statement alone on its lines, so that a line can
    be added before or after it at its indentation (not ``a = 1; clip(...)`` nor ``if c: clip(...)``)."""
    statement = event.call.statement
    if isinstance(statement, _COMPOUND) or not isinstance(statement, (ast.stmt, ast.expr)):
        return None
    # ast columns count UTF-8 bytes (a parsed node has every position: ``end_lineno`` too).
    first = facts.lines.text(statement.lineno).encode()
    last = facts.lines.text(statement.end_lineno or statement.lineno).encode()
    if first[: statement.col_offset].strip() or not _LINE_END.fullmatch(last[statement.end_col_offset :]):
        return None
    return statement


@register
class ClipBeforeUnscale(LintRule):
    code = "AMP201"
    tokens = ("clip_grad", ".clamp_(", ".clip_(")
    anchors = SCALED_BACKWARD

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        for frame in facts.frames:
            for clip in frame.events_of(EventKind.CLIP):
                if not clip.norm_only:
                    report = self._check_clip(facts, frame, clip)
                    if report is not None:
                        yield report

    def _check_clip(self, facts: AmpFacts, frame: Frame, clip: Event) -> Report | None:
        backwards = [e for e in frame.events_of(EventKind.SCALED_BACKWARD) if e.order < clip.order]
        if not backwards:
            return None
        scaler = backwards[-1].scaler
        assert scaler is not None
        steps = [e for e in _scaler_events(frame, EventKind.SCALER_STEP, scaler) if e.order > clip.order]
        if not steps:
            return None  # the step happens elsewhere: the protocol is split, stay silent
        unscales = _scaler_events(frame, EventKind.UNSCALE, scaler)
        if any(backwards[-1].order < u.order < clip.order for u in unscales):
            return None
        # The user's own optimizer name when the steps after the clip say which one it is and
        # it is bound at the clip (not ``for o in optimizers: scaler.step(o)`` after it).
        optimizers = {s.optimizer for s in steps}
        named = next(iter(optimizers)) if len(optimizers) == 1 else None
        if named is not None and not _bound_before(frame, named, clip.call.statement):
            named = None
        optimizer = named or "optimizer"
        return Report(
            self.code,
            clip.call.node,
            f"gradients are clipped while still multiplied by the loss scale of `{scaler}`: "
            f"call `{scaler}.unscale_({optimizer})` before clipping",
            help=f"Insert `{scaler}.unscale_({optimizer})` before the clip",
            fix=self._fix(facts, frame, clip, backwards[-1], scaler, named, steps, unscales) if named else None,
            statement=clip.call.statement,
        )

    def _fix(
        self,
        facts: AmpFacts,
        frame: Frame,
        clip: Event,
        backward: Event,
        scaler: str,
        optimizer: str,
        steps: list[Event],
        unscales: list[Event],
    ) -> FixPlan | None:
        """``scaler.unscale_(optimizer)`` before the clip, only where that line is sure to run once
        per update: torch raises when ``unscale_`` runs twice on an optimizer between updates."""
        statement = _simple_statement(facts, clip)
        if statement is None:
            return None
        # A clipper the module cannot see (``self.clip_gradients()`` of a base class in another
        # module) may unscale first itself: an unscale_ inserted before it would run twice.
        if clip.call.qname not in CLIP_NAMES:
            return None
        # An unscale_ between the clip and the step would then run twice: torch raises.
        if any(clip.order < u.order < steps[0].order for u in unscales):
            return None
        # Several clips after one backward (a UNet's and a text encoder's): the unscale_ goes
        # before the first of them, and the others need none.
        if any(
            backward.order < other.order < clip.order and not other.norm_only and not exclusive(other, clip)
            for other in frame.events_of(EventKind.CLIP)
        ):
            return None
        if not _runs_once_per_update(frame, clip, scaler, steps[0]):
            return None
        text = f"{scaler}.unscale_({optimizer})"
        return FixPlan(f"Insert `{text}` before the clip", (NodeEdit("line_before", statement, text),))


def _runs_once_per_update(frame: Frame, clip: Event, scaler: str, step: Event) -> bool:
    """Whether a line before the clip runs at most once between two ``update()`` calls: the update
    after the clip (else the step) sits in a block around the clip, and no loop lies between
    them (a clip per model in ``for m in models:``, or every micro-batch while the step waits for
    the accumulation test, would unscale twice)."""
    updates = [e for e in _scaler_events(frame, EventKind.UPDATE, scaler) if e.order > step.order]
    governing = updates[0] if updates else step
    if not is_prefix(governing.path, clip.path):
        return False
    return not any(block.is_loop for block in clip.path[len(governing.path) :])


def _bound_before(frame: Frame, optimizer: str, statement: ast.AST) -> bool:
    """Whether the optimizer's name is bound where the clip is: a name the function binds only
    after the clip (``for o in optimizers: scaler.step(o)``) would raise NameError there."""
    root = optimizer.split(".", 1)[0].split("[", 1)[0]
    if root == "self":
        return True
    node = frame.node
    if root in parameter_names(node):
        return True
    bindings = [n.lineno for n in ast.walk(node) if type(n) is ast.Name and n.id == root and type(n.ctx) is ast.Store]
    return not bindings or min(bindings) <= getattr(statement, "lineno", 0)


@register
class MissingScalerUpdate(LintRule):
    code = "AMP202"
    tokens = (".scale(",)
    anchors = SCALED_BACKWARD

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        updated = {e.scaler for e in facts.events(EventKind.UPDATE)}
        for frame in facts.frames:
            scaled = {e.scaler for e in frame.events_of(EventKind.SCALED_BACKWARD)}
            steps_by_scaler: dict[str, list[Event]] = {}
            for event in frame.events_of(EventKind.SCALER_STEP):
                steps_by_scaler.setdefault(event.scaler or "", []).append(event)
            for scaler, steps in steps_by_scaler.items():
                # Only a complete step in one function is judged; an update anywhere in the
                # module under the same name, or a scaler handed to a helper, means silence.
                if scaler not in scaled or scaler in updated or _passed_to_helper(frame, scaler):
                    continue
                last = steps[-1]
                yield Report(
                    self.code,
                    last.call.node,
                    f"`{scaler}.step()` is never followed by `{scaler}.update()`: the loss scale never "
                    "adapts, and the next `step()` raises 'step() has already been called since the last update()'",
                    help=f"Call `{scaler}.update()` once per iteration, after the last `{scaler}.step(...)`",
                    fix=self._fix(facts, last, steps, scaler),
                    statement=last.call.statement,
                )

    def _fix(self, facts: AmpFacts, last: Event, steps: list[Event], scaler: str) -> FixPlan | None:
        statement = _simple_statement(facts, last)
        if statement is None or any(s.path != last.path for s in steps):
            return None
        text = f"{scaler}.update()"
        return FixPlan(f"Add `{text}` after the last `{scaler}.step(...)`", (NodeEdit("line_after", statement, text),))


def _passed_to_helper(frame: Frame, scaler: str) -> bool:
    return any(hands(site, scaler) for site in frame.calls)
