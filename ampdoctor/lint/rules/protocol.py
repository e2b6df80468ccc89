"""AMP203–AMP213: the rest of the GradScaler protocol, and the scaler's place in a training script.

Like the rules in ``scaler.py``, these compare the events of one frame (a function body or the
module body). Three questions come up again and again and are answered by the helpers below:

* *same iteration*: two events share their innermost loop (or both sit outside any loop);
  a backward pass may also sit deeper than the step it feeds (a micro-batch loop), so "this
  backward precedes that step" also accepts a backward nested inside the step's loop;
* *exclusive branches*: the two arms of one ``if``, or two ``if`` statements whose conditions
  are each other's negation (``if scaler is None`` / ``if scaler is not None``) never both run;
* *gated*: a call under an ``if`` that its partner is not under runs on some iterations only.

Whenever the answer is unclear the rules stay silent.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator

from ..facts import (
    FUNCTION_TYPES,
    GRAD_SCALER_NAMES,
    AmpFacts,
    Block,
    CallSite,
    Event,
    EventKind,
    Frame,
    Region,
    call_args,
    dotted,
    get_arg,
    is_optimizer,
    is_optimizer_constructor,
    iter_nodes,
    string_value,
)
from ..gate import Anchors
from ..paths import CONTINUE, NEXT, RETURN, Path
from . import AUTOCAST, LintRule, Report, SCALED_BACKWARD, SCALER, register

# --------------------------------------------------------------------------------------
# Paths: iterations, branches, gating
# --------------------------------------------------------------------------------------

_BRANCH_KINDS = ("if", "else")
_ACCUMULATION_TEST = re.compile(r"%|accum|sync_grad|grad_acc|micro", re.I)
# Tests that skip an optimizer step now and then: a non-finite guard, a skip flag, a step switch.
_SKIP_TEST = re.compile(r"finite|nan|inf\b|overflow|skip|norm|step|update", re.I)


def _loop_key(event: Event) -> int | None:
    loop = event.call.loop
    return loop.ident if loop is not None else None


def _same_iteration(a: Event, b: Event) -> bool:
    return _loop_key(a) == _loop_key(b)


def _feeds(earlier: Event, later: Event) -> bool:
    """``earlier`` runs before ``later`` in ``later``'s iteration (possibly in a nested loop)."""
    if earlier.order >= later.order:
        return False
    loop = later.call.loop
    return loop is None or any(block.ident == loop.ident for block in earlier.path)


def _is_prefix(short: tuple[Block, ...], long: tuple[Block, ...]) -> bool:
    return len(short) <= len(long) and all(a.ident == b.ident for a, b in zip(short, long))


def _common_prefix(a: tuple[Block, ...], b: tuple[Block, ...]) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[n].ident == b[n].ident:
        n += 1
    return n


# Comparisons whose negation is another comparison: (positive spelling, negated?).
_COMPARISONS = {ast.Is: ("is", False), ast.IsNot: ("is", True), ast.Eq: ("==", False), ast.NotEq: ("==", True)}


def _condition(block: Block) -> tuple[str, bool] | None:
    """(normalised test, truth) that must hold inside an if/else arm.

    Tests are compared by structure (``ast.dump``), so spacing and parentheses do not matter.
    """
    if block.kind not in _BRANCH_KINDS or not isinstance(block.node, ast.If):
        return None
    test = block.node.test
    truth = block.kind == "if"
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, truth = test.operand, not truth
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _COMPARISONS:
        spelling, negated = _COMPARISONS[type(test.ops[0])]
        text = f"{ast.dump(test.left)} {spelling} {ast.dump(test.comparators[0])}"
        return text, truth != negated
    return ast.dump(test), truth


def _exclusive(a: Event, b: Event) -> bool:
    """True when the two calls can never run in the same pass."""
    arms = {id(block.node): block.kind for block in a.path if block.kind in _BRANCH_KINDS}
    for block in b.path:
        kind = arms.get(id(block.node))
        if kind is not None and kind != block.kind:
            return True
    conditions = dict(c for c in map(_condition, a.path) if c is not None)
    for block in b.path:
        cond = _condition(block)
        if cond is not None and cond[0] in conditions and conditions[cond[0]] != cond[1]:
            return True
    return False


def _accumulation_gate(facts: AmpFacts, blocks: Iterable[Block]) -> ast.If | None:
    for block in blocks:
        if block.kind in _BRANCH_KINDS and isinstance(block.node, ast.If):
            if _ACCUMULATION_TEST.search(facts.text(block.node.test)):
                return block.node
    return None


def _loop_binds(block: Block, name: str) -> bool:
    """Whether a ``for`` loop's target binds the root of ``name`` (unknown loops: yes)."""
    if not isinstance(block.node, (ast.For, ast.AsyncFor)):
        return True
    root = name.split(".", 1)[0]
    return root in set(_walk_names(block.node.target))


def _walk_names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _walk_names(element)
    elif isinstance(target, ast.Starred):
        yield from _walk_names(target.value)


def _assigned_in(frame: Frame, facts: AmpFacts, name: str, block: Block) -> bool:
    """Whether ``name`` is (re)assigned inside ``block`` of ``frame``."""
    start, end = _block_orders(frame, block)
    return any(a.frame is frame and a.target == name and start <= a.order <= end for a in facts.assignments)


def _block_orders(frame: Frame, block: Block) -> tuple[int, int]:
    inside = [c.order for c in frame.calls if any(b.ident == block.ident for b in c.path)]
    return (min(inside), max(inside)) if inside else (0, -1)


def _pass_of(event: Event) -> ast.AST | None:
    """The body that one iteration runs once and that holds ``event``: its innermost loop, or the
    function it is in (a step function runs once per iteration of its caller)."""
    loop = event.call.loop
    if loop is not None:
        return loop.node
    node = event.call.frame.node
    return node if isinstance(node, FUNCTION_TYPES) else None


def _in_pass(event: Event, node: ast.AST) -> bool:
    """Whether ``event`` sits in ``node``'s body itself, not in a loop nested inside it."""
    return _pass_of(event) is node


def _repeats(path: Path, node: ast.AST) -> bool:
    """Whether what follows ``path`` is the next pass through ``node``: the end of a loop body or a
    ``continue``; for a function, its end or a ``return`` (the caller's next iteration)."""
    if isinstance(node, FUNCTION_TYPES):
        return path.end in (NEXT, RETURN)
    return path.end in (NEXT, CONTINUE)


# --------------------------------------------------------------------------------------
# Small queries
# --------------------------------------------------------------------------------------


def _of(frame: Frame, kind: EventKind, scaler: str | None = None) -> list[Event]:
    return [e for e in frame.events if e.kind is kind and (scaler is None or e.scaler == scaler)]


def _framework_backward(site: CallSite) -> bool:
    """``engine.backward(loss)`` of DeepSpeed, Lightning strategies and the like scale by themselves."""
    receiver = (site.receiver or "").lower()
    return bool(site.node.args or site.node.keywords) and any(
        word in receiver for word in ("engine", "deepspeed", "strategy", "trainer", "booster", "accelerator", "fabric")
    )


def _frameworks(facts: AmpFacts) -> bool:
    """Modules built on a framework that owns the loss scaling (accelerate, Lightning, DeepSpeed, apex)."""
    roots = {q.split(".", 1)[0] for q in facts.imports.values()}
    return bool(roots & {"accelerate", "lightning", "pytorch_lightning", "lightning_fabric", "deepspeed", "apex", "colossalai"})


def _scaler_construction_enabled(call: ast.Call, qname: str) -> bool | None:
    """True/False for a literal ``enabled=``, None when it depends on run-time values."""
    arg = get_arg(call, None, "enabled")
    if arg is None:
        # torch.cuda.amp.GradScaler(init_scale, growth_factor, backoff_factor, growth_interval, enabled)
        fixed = GRAD_SCALER_NAMES.get(qname) is not None
        arg = get_arg(call, 4 if fixed else 5, None)
    if arg is None:
        return True
    value = arg.value
    if isinstance(value, ast.Constant) and isinstance(value.value, bool):
        return value.value
    return None


def _scaler_device(call: ast.Call, qname: str) -> str | None:
    fixed = GRAD_SCALER_NAMES.get(qname)
    if fixed is not None:
        return fixed
    arg = get_arg(call, 0, "device")
    if arg is None:
        return "cuda"
    return string_value(arg.value)


def _target_of(facts: AmpFacts, call: ast.Call) -> str | None:
    for assignment in facts.assignments:
        if assignment.value is call:
            return assignment.target
    return None


def _mentions(facts: AmpFacts, class_name: str) -> bool:
    """Whether an import or a resolved name of the module ends in ``class_name`` (``ShardedGradScaler``
    ends in ``GradScaler``)."""
    names = [ref.qname for ref in facts.import_refs] + [name for _, name in facts.references]
    return any(name.rsplit(".", 1)[-1].endswith(class_name) for name in names)


def _label(facts: AmpFacts, event: Event) -> str:
    return facts.text(event.call.node)


# --------------------------------------------------------------------------------------
# AMP203 step-bypasses-scaler
# --------------------------------------------------------------------------------------


@register
class StepBypassesScaler(LintRule):
    code = "AMP203"
    tokens = (".scale(",)
    anchors = SCALED_BACKWARD

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if _frameworks(facts):
            return
        for frame in facts.frames:
            backwards = frame.events_of(EventKind.BACKWARD, EventKind.SCALED_BACKWARD)
            if not any(b.kind is EventKind.SCALED_BACKWARD for b in backwards):
                continue
            stepped = {(e.scaler, e.optimizer) for e in _of(frame, EventKind.SCALER_STEP)}
            for step in frame.events_of(EventKind.OPTIMIZER_STEP):
                feeding = [b for b in backwards if _feeds(b, step) and not _exclusive(b, step)]
                if not feeding or feeding[-1].kind is not EventKind.SCALED_BACKWARD:
                    continue
                backward = feeding[-1]
                scaler = backward.scaler
                if (scaler, step.optimizer) in stepped:
                    continue  # the scaler steps this optimizer too: the plain step is another branch
                if any(
                    u.optimizer == step.optimizer and backward.order < u.order < step.order
                    for u in _of(frame, EventKind.UNSCALE, scaler)
                ):
                    continue  # unscaled by hand: the step sees true gradients
                yield Report(
                    self.code,
                    step.call.node,
                    f"`{_label(facts, step)}` applies gradients that `{scaler}.scale(...).backward()` multiplied by "
                    f"the loss scale, and it is not skipped when they overflow",
                    help=f"Call `{scaler}.step({step.optimizer})` instead, then `{scaler}.update()`",
                    statement=step.call.statement,
                )


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
            if (target := _target_of(facts, event.call.node)) is not None
            and _scaler_construction_enabled(event.call.node, event.call.qname or "") is False
        }
        for frame in facts.frames:
            steps = [s for s in _of(frame, EventKind.SCALER_STEP) if s.scaler not in disabled]
            if not steps or frame.events_of(EventKind.SCALED_BACKWARD):
                continue
            # Any ``K.scale(...)`` in the function (a scaled loss divided later, a list of scaled
            # losses) means scaling happens here in a form the model does not follow.
            if any(site.method == "scale" and site.receiver in facts.scalers for site in frame.calls):
                continue
            for backward in frame.events_of(EventKind.BACKWARD):
                site = backward.call
                if _framework_backward(site) or "scale" in (site.receiver or "").lower():
                    continue
                fed = [s for s in steps if _feeds(backward, s) and not _exclusive(backward, s)]
                if not fed:
                    continue
                step = fed[0]
                yield Report(
                    self.code,
                    site.node,
                    f"plain `{_label(facts, backward)}` before `{_label(facts, step)}`: the gradients were never "
                    f"multiplied by the loss scale, so `{step.scaler}.step` divides them by it and float16 gradients "
                    "underflow",
                    help=f"Scale the loss first: `{step.scaler}.scale(loss).backward()`",
                    statement=site.statement,
                )


# --------------------------------------------------------------------------------------
# AMP205 scaler-in-loop
# --------------------------------------------------------------------------------------


@register
class ScalerInLoop(LintRule):
    code = "AMP205"
    tokens = ("GradScaler",)
    anchors = SCALER

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        for frame in facts.frames:
            for new in frame.events_of(EventKind.SCALER_NEW):
                target = _target_of(facts, new.call.node)
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
        # Only a construction directly in the loop body: ``if scaler is None:`` is lazy set-up.
        if loop is None or new.path[-1].ident != loop.ident:
            return None
        if not any(
            s.order > new.order and s.call.loop is not None and s.call.loop.ident == loop.ident
            for s in _of(frame, EventKind.SCALER_STEP, target)
        ):
            return None
        return self._report(
            facts, new, f"a new GradScaler is assigned to `{target}` on every pass of the loop that steps it",
            "each iteration", "Create the GradScaler once, before the training loop",
        )

    def _in_epoch_loop(self, frame: Frame, facts: AmpFacts, new: Event, target: str) -> Report | None:
        """Built directly in an epoch loop, stepped in the loop nested in it. A loop over folds or
        trials, or one that also builds its optimizer, is a fresh training run per pass: correct."""
        loop = new.call.loop
        if loop is None or new.path[-1].ident != loop.ident or not _is_epoch_loop(facts, loop.node):
            return None
        nested = [
            s
            for s in _of(frame, EventKind.SCALER_STEP, target)
            if s.order > new.order and s.call.loop is not None and s.call.loop.ident != loop.ident
            and any(b.ident == loop.ident for b in s.path)
        ]
        if not nested or _builds_optimizer(facts, frame, loop):
            return None
        return self._report(
            facts, new, f"a new GradScaler is assigned to `{target}` on every pass of the epoch loop",
            "each epoch", "Create the GradScaler once, before the epoch loop",
        )

    def _in_epoch_function(self, frame: Frame, facts: AmpFacts, new: Event, target: str) -> Report | None:
        """Built in a function that trains with it and that the module calls from its epoch loop."""
        if new.call.loop is not None or "." in target or not isinstance(frame.node, FUNCTION_TYPES):
            return None
        if not any(s.call.loop is not None for s in _of(frame, EventKind.SCALER_STEP, target)):
            return None
        if _builds_optimizer(facts, frame):
            return None  # a complete training run (a fold, a trial)
        name = frame.node.name
        for site in _calls_of(facts, frame):
            loop = site.loop
            if loop is not None and (_is_epoch_loop(facts, loop.node) or "epoch" in name.lower()):
                return self._report(
                    facts, new,
                    f"a new GradScaler is assigned to `{target}` on every call of `{name}`, which the loop on line "
                    f"{loop.node.lineno} calls once per epoch",
                    "each epoch", f"Create the GradScaler once, before the epoch loop, and pass it to `{name}`",
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


def _is_epoch_loop(facts: AmpFacts, node: ast.AST) -> bool:
    """A loop whose target or iterable (or ``while`` test) speaks of epochs."""
    if isinstance(node, (ast.For, ast.AsyncFor)):
        text = f"{facts.text(node.target)} {facts.text(node.iter)}"
    elif isinstance(node, ast.While):
        text = facts.text(node.test)
    else:
        return False
    return "epoch" in text.lower()


def _builds_optimizer(facts: AmpFacts, frame: Frame, block: Block | None = None) -> bool:
    """Whether ``frame`` (inside ``block``, when given) constructs an optimizer."""
    return any(
        (block is None or any(b.ident == block.ident for b in site.path)) and is_optimizer_constructor(site.node, facts)
        for site in frame.calls
    )


def _calls_of(facts: AmpFacts, frame: Frame) -> list[CallSite]:
    """Calls of a module-level function (``f(...)``) or of a method through ``self`` of its class."""
    node = frame.node
    if frame.parent is None or frame.parent.parent is not None:
        return []  # a nested function: called through names the model does not follow
    if frame.class_name is None:
        return [c for c in facts.calls if c.receiver is None and isinstance(c.node.func, ast.Name)
                and c.node.func.id == node.name]
    return [c for c in facts.calls if c.receiver == "self" and c.method == node.name
            and c.frame.class_name == frame.class_name]


# --------------------------------------------------------------------------------------
# AMP206 double-unscale
# --------------------------------------------------------------------------------------


@register
class DoubleUnscale(LintRule):
    code = "AMP206"
    tokens = ("unscale_",)
    anchors = Anchors(methods=("unscale_",))

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        for frame in facts.frames:
            reported: set[int] = set()
            for report in (
                *self._twice_on_one_path(frame, facts),
                *self._per_micro_step(frame, facts),
                *self._iteration_without_update(frame, facts),
            ):
                if id(report.node) not in reported:
                    reported.add(id(report.node))
                    yield report

    def _twice_on_one_path(self, frame: Frame, facts: AmpFacts) -> Iterator[Report]:
        unscales = [u for u in frame.events_of(EventKind.UNSCALE) if u.optimizer]
        for i, second in enumerate(unscales):
            for first in unscales[:i]:
                if (first.scaler, first.optimizer) != (second.scaler, second.optimizer):
                    continue
                if not _same_iteration(first, second) or _exclusive(first, second):
                    continue
                if any(first.order < e.order < second.order for e in _of(frame, EventKind.UPDATE, first.scaler)):
                    continue  # update() reset the state in between
                if any(
                    s.optimizer == first.optimizer and s.order < second.order and _same_iteration(s, second)
                    for s in _of(frame, EventKind.SCALER_STEP, first.scaler)
                ):
                    continue  # unscale_ after step: AMP207 reports it
                yield Report(
                    self.code,
                    second.call.node,
                    f"`{_label(facts, second)}` runs a second time for one step (first at `{_label(facts, first)}`): "
                    "torch raises 'unscale_() has already been called on this optimizer since the last update()'",
                    help="Call `unscale_` once per optimizer, after the last backward and before the step",
                    statement=second.call.statement,
                )
                break

    def _per_micro_step(self, frame: Frame, facts: AmpFacts) -> Iterator[Report]:
        steps = _of(frame, EventKind.SCALER_STEP)
        updates = _of(frame, EventKind.UPDATE)
        for unscale in frame.events_of(EventKind.UNSCALE):
            name = unscale.optimizer
            if not name:
                continue
            for step in steps:
                if (step.scaler, step.optimizer) != (unscale.scaler, name) or step.order < unscale.order:
                    continue
                shared = _common_prefix(unscale.path, step.path)
                own, step_own = unscale.path[shared:], step.path[shared:]
                if any(b.kind != "loop" for b in own):
                    continue  # the unscale_ is conditional itself
                if own:
                    # unscale_ sits in a loop that the step is outside of: a micro-batch loop.
                    if any(_loop_binds(b, name) or _assigned_in(frame, facts, name, b) for b in own):
                        continue  # a loop over optimizers
                    if any(any(b.ident == own[0].ident for b in u.path) for u in updates if u.scaler == unscale.scaler):
                        continue
                    why = "it runs on every pass of the loop around it while the step runs once after the loop"
                    raises = True
                else:
                    gate = _accumulation_gate(facts, step_own)
                    if gate is None:
                        continue
                    why = f"it runs on every micro-step while the step is gated by `{facts.text(gate.test)}`"
                    # An update() on every micro-step resets the state: no error, but repeated division.
                    raises = not any(
                        u.scaler == unscale.scaler and u.order > unscale.order and _is_prefix(u.path, unscale.path)
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
                    f"`{_label(facts, unscale)}` can run several times for one `{_label(facts, step)}`: "
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
            node = _pass_of(unscale)
            if node is None or not unscale.optimizer:
                continue
            updates = [u for u in _of(frame, EventKind.UPDATE, unscale.scaler) if _in_pass(u, node)]
            steps = [
                s for s in _of(frame, EventKind.SCALER_STEP, unscale.scaler)
                if _in_pass(s, node) and s.optimizer == unscale.optimizer
            ]
            if not updates or not steps:
                continue  # the protocol is finished somewhere else
            for path in facts.paths(frame, node) or ():
                where = path.index(unscale)
                if where < 0 or not _repeats(path, node):
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
        if any(e.kind is EventKind.UPDATE and e.scaler == unscale.scaler for e in path.events[where + 1:]):
            return None
        if path.jump is not None:
            reason = f"`{facts.text(path.jump)}` on line {path.jump.lineno} skips it"
        else:
            reason = _skipped_by(facts, path, where, updates, (_ACCUMULATION_TEST, _SKIP_TEST))
        if reason is None:
            return None
        again = "call" if isinstance(node, FUNCTION_TYPES) else "iteration"
        return Report(
            self.code,
            unscale.call.node,
            f"`{_label(facts, unscale)}` can run in a {again} that ends without `{unscale.scaler}.update()` "
            f"({reason}): the next {again}'s unscale_ raises 'unscale_() has already been called on this "
            "optimizer since the last update()'",
            help=f"Call `{unscale.scaler}.update()` on every path after `unscale_` (skip only the step), or "
            "move `unscale_` under the same condition as the step and the update",
            statement=unscale.call.statement,
        )

    def _without_step(self, facts: AmpFacts, unscale: Event, path: Path, where: int, steps: list[Event]) -> Report | None:
        """Unscaled, then updated but not stepped because the step waits for the accumulation step.
        (A guard that skips a non-finite step is right to update without stepping.)"""
        later = path.events[where + 1:]
        if any(e in steps for e in later) or not any(
            e.kind is EventKind.UPDATE and e.scaler == unscale.scaler for e in later
        ):
            return None
        reason = _skipped_by(facts, path, where, steps, (_ACCUMULATION_TEST,))
        if reason is None:
            return None
        return Report(
            self.code,
            unscale.call.node,
            f"`{_label(facts, unscale)}` can run on a micro-step that updates but does not step ({reason}): "
            "the next unscale_ divides the accumulated gradients by the scale again",
            help="Move `unscale_` under the same condition as the step, right before it",
            statement=unscale.call.statement,
        )


def _skipped_by(facts: AmpFacts, path: Path, where: int, blocked: list[Event], patterns: tuple) -> str | None:
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
                        return f"`{_label(facts, event)}` runs only {arm} `{test}`"
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
                    and _same_iteration(first, second)
                    and not _exclusive(first, second)
                ):
                    yield first, second

    def _between(self, frame: Frame, kind: EventKind, scaler: str | None, start: int, end: int) -> bool:
        return any(start < e.order < end for e in _of(frame, kind, scaler))

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
                f"`{_label(facts, unscale)}` after `{_label(facts, step)}` in the same iteration: torch raises "
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
                (b.order for b in _of(frame, EventKind.SCALED_BACKWARD, update.scaler) if _feeds(b, update)),
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
                f"`{_label(facts, update)}` runs before `{_label(facts, step)}` of the same iteration: update() must "
                "come last, after every optimizer has stepped",
                help=f"Move `{update.scaler}.update()` after the last `{update.scaler}.step(...)`",
                statement=update.call.statement,
            )

    def _step_before_backward(self, frame: Frame, facts: AmpFacts) -> Iterator[Report]:
        done: set[int] = set()
        for step, backward in self._pairs(frame, EventKind.SCALER_STEP, EventKind.SCALED_BACKWARD):
            if id(step) in done or any(_feeds(b, step) for b in _of(frame, EventKind.SCALED_BACKWARD, step.scaler)):
                continue
            if any(b.kind != "loop" for b in step.path[_common_prefix(step.path, backward.path):]):
                continue  # a conditional step (``if i > 0:``) may be deliberate
            yield Report(
                self.code,
                step.call.node,
                f"`{_label(facts, step)}` runs before the scaled backward `{_label(facts, backward)}` of the same "
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
            for s in _of(frame, EventKind.SCALER_STEP, update.scaler)
            if _same_iteration(s, update) and not _exclusive(s, update)
        ]
        before = [s for s in steps if s.order < update.order]
        after = [s for s in steps if s.order > update.order]
        if not before or not after:
            return None
        following = after[0]
        backwards = _of(frame, EventKind.SCALED_BACKWARD, update.scaler)
        if any(update.order < b.order < following.order for b in backwards):
            return None  # a new backward: the next step is a new round, not another optimizer
        return self._report(facts, update, f"before `{_label(facts, following)}` of the same iteration")

    def _in_optimizer_loop(self, frame: Frame, facts: AmpFacts, update: Event) -> Report | None:
        loop = update.call.loop
        if loop is None or not isinstance(loop.node, (ast.For, ast.AsyncFor)):
            return None
        for step in _of(frame, EventKind.SCALER_STEP, update.scaler):
            if step.order > update.order or step.call.loop is None or step.call.loop.ident != loop.ident:
                continue
            if not step.optimizer or not _loop_binds(loop, step.optimizer):
                continue
            if any(any(b.ident == loop.ident for b in e.path) for e in _of(frame, EventKind.SCALED_BACKWARD)):
                continue
            return self._report(facts, update, f"inside the loop over optimizers (`{_label(facts, step)}`)")
        return None

    def _before_another_round(self, frame: Frame, facts: AmpFacts, update: Event) -> Report | None:
        """On some path of one iteration, another optimizer steps (after its own scaled backward)
        once this update has run: a GAN's discriminator and generator halves, each with an update,
        also when one half is under a condition or the halves sit in different branches."""
        node = _pass_of(update)
        if node is None:
            return None
        for path in facts.paths(frame, node) or ():
            where = path.index(update)
            if where < 0:
                continue
            mine = [e for e in path.events if e.scaler == update.scaler and _in_pass(e, node)]
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
                        f"before `{_label(facts, later)}` of the same iteration",
                        "torch expects one update() per iteration, after every optimizer has stepped: here the scale "
                        "changes between the optimizers' steps, grows twice as often as it should, and each update "
                        "sees only one optimizer's inf checks",
                    )
        return None

    def _report(self, facts: AmpFacts, update: Event, where: str, why: str = _PARTIAL_UPDATE) -> Report:
        return Report(
            self.code,
            update.call.node,
            f"`{_label(facts, update)}` runs {where}: {why}",
            help=f"Call `{update.scaler}.update()` once, after the last `{update.scaler}.step(...)` of the iteration",
            statement=update.call.statement,
        )


# --------------------------------------------------------------------------------------
# AMP209 scaler-with-bfloat16
# --------------------------------------------------------------------------------------

_FLOAT16_TEXT = re.compile(r"\bfloat16|\bfp16|\bhalf\b|HalfTensor", re.I)


@register
class ScalerWithBfloat16(LintRule):
    code = "AMP209"
    tokens = ("GradScaler",)
    anchors = SCALER

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if not facts.regions or _FLOAT16_TEXT.search(facts.source):
            return
        for new in facts.events(EventKind.SCALER_NEW):
            qname = new.call.qname or ""
            if _scaler_construction_enabled(new.call.node, qname) is not True:
                continue
            device = _scaler_device(new.call.node, qname)
            regions = [r for r in facts.regions if r.enabled.counts_as_on and (r.device == device or r.device is None)]
            if not regions or any(r.effective_dtype != "bfloat16" for r in regions):
                continue
            yield Report(
                self.code,
                new.call.node,
                "GradScaler in a module whose autocast regions all use bfloat16: bfloat16 has float32's exponent "
                "range, its gradients do not underflow, and the scaler only adds work",
                help="Drop the scaler and call `loss.backward()` and `optimizer.step()` directly",
                statement=new.call.statement,
            )


# --------------------------------------------------------------------------------------
# AMP210 float16-without-scaler
# --------------------------------------------------------------------------------------


@register
class Float16WithoutScaler(LintRule):
    code = "AMP210"
    tokens = ("autocast",)
    anchors = AUTOCAST

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if not any(r.is_float16 for r in facts.regions) or self._has_scaler(facts) or _frameworks(facts):
            return
        reported: set[int] = set()
        decorated = _float16_decorated(facts)
        for frame in facts.frames:
            backwards = [
                b
                for b in frame.events_of(EventKind.BACKWARD)
                if not _framework_backward(b.call) and "scale" not in (b.call.receiver or "").lower()
            ]
            if not backwards:
                continue
            last = backwards[-1].order
            for site in frame.calls:
                region = site.region
                if (region is None or not region.is_float16) and decorated:
                    # The loss comes from a function decorated with float16 autocast.
                    region = decorated.get(_local_callee(site))
                if region is None or not region.is_float16 or site.order > last or id(region.node) in reported:
                    continue
                reported.add(id(region.node))
                yield Report(
                    self.code,
                    region.node,
                    "float16 autocast with a backward pass and no GradScaler in the module: small float16 "
                    "gradients underflow to zero",
                    help="Scale the loss with `torch.amp.GradScaler` (scale, step, update), or use bfloat16",
                    statement=self._statement(facts, region.node),
                )

    def _has_scaler(self, facts: AmpFacts) -> bool:
        if facts.scalers or _mentions(facts, "GradScaler"):
            return True
        return any("scaler" in (site.receiver or "").lower() for site in facts.calls)

    def _statement(self, facts: AmpFacts, node: ast.AST) -> ast.stmt | None:
        for site in facts.calls:
            if site.node is node:
                return site.statement
        return None


def _float16_decorated(facts: AmpFacts) -> dict[str, Region]:
    """Functions of the module whose body runs in float16 autocast by a decorator, by name."""
    regions = {id(region.node): region for region in facts.regions if region.is_float16}
    found: dict[str, Region] = {}
    if regions:
        for function, _frame in facts.functions:
            for decorator in function.decorator_list:
                region = regions.get(id(decorator))
                if region is not None:
                    found[function.name] = region
    return found


def _local_callee(site: CallSite) -> str | None:
    """``f`` for ``f(...)``, ``self.f(...)`` and ``cls.f(...)``: a function of this module, by name."""
    if type(site.node.func) is ast.Name:
        return site.node.func.id
    return site.method if site.receiver in ("self", "cls") else None


# --------------------------------------------------------------------------------------
# AMP211 scaler-state-not-saved
# --------------------------------------------------------------------------------------


def _state_dict_receivers(mapping: ast.expr) -> tuple[list[str | None], bool]:
    """Receivers of ``x.state_dict()`` inside a mapping, and whether ``**other`` spreads into it
    (then the mapping is partly built elsewhere)."""
    receivers: list[str | None] = []
    opaque = False
    for node in iter_nodes(mapping):
        if isinstance(node, ast.Dict):
            # ``{**other, ...}``: a None key marks the spread entry.
            opaque = opaque or any(key is None for key in node.keys)
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr == "state_dict":
                receivers.append(dotted(node.func.value))
            if dotted(node.func) == "dict" and any(a.star for a in call_args(node)):
                opaque = True
    return receivers, opaque


def _scaler_in_reach(facts: AmpFacts, save: CallSite) -> bool:
    """Whether the function that saves trains with a scaler it could save.

    A module-level scaler (a script), a scaler used in the saving function itself, or a
    ``self.`` scaler of the saving method's class. A large module with one AMP test and an
    unrelated checkpoint elsewhere is not a resume bug.
    """
    frame = save.frame
    for assignment in facts.assignments:
        if assignment.target in facts.scalers and assignment.frame.parent is None:
            return True  # constructed in the module body
    spelled = {site.receiver for site in frame.calls} | {e.scaler for e in frame.events}
    if spelled & facts.scalers:
        return True
    if frame.class_name is not None:
        own = [f for f in facts.frames if f.class_name == frame.class_name]
        return any(
            (site.receiver or "") in facts.scalers and (site.receiver or "").startswith("self.")
            for f in own
            for site in f.calls
        )
    return False


def _is_mapping_literal(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Dict) or (isinstance(expr, ast.Call) and dotted(expr.func) == "dict")


@register
class ScalerStateNotSaved(LintRule):
    code = "AMP211"
    tokens = ("GradScaler", ".scale(")
    needs = (rb"save\(",)
    anchors = SCALER

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if not facts.scalers and not any(True for _ in facts.events(EventKind.SCALER_NEW)):
            return
        for save in facts.calls_to("torch.save"):
            arg = save.arg(0, "obj")
            if arg is None or not _scaler_in_reach(facts, save):
                continue
            mapping = self._mapping(facts, save, arg.value)
            if mapping is None or "scaler" in facts.text(mapping).lower():
                continue
            receivers, opaque = _state_dict_receivers(mapping)
            if opaque or not any(is_optimizer(r, facts) or "optim" in (r or "").lower() for r in receivers):
                continue
            yield Report(
                self.code,
                save.node,
                "checkpoint saves the optimizer's state but not the GradScaler's: on resume the loss scale restarts "
                "at its initial value (65536) and the first steps are skipped while it backs off",
                help="Add `\"scaler\": scaler.state_dict()` to the checkpoint and `scaler.load_state_dict(...)` on resume",
                statement=save.statement,
            )

    def _mapping(self, facts: AmpFacts, save: CallSite, expr: ast.expr) -> ast.expr | None:
        if _is_mapping_literal(expr):
            return expr
        name = dotted(expr)
        if name is None:
            return None
        frame = save.frame
        earlier = [a for a in facts.assignments if a.frame is frame and a.target == name and a.order < save.order]
        if not earlier or not _is_mapping_literal(earlier[-1].value):
            return None
        built = earlier[-1].order
        # The mapping is completed elsewhere: a method call on it, or handed to a helper.
        for site in frame.calls:
            if built < site.order < save.order and site is not save:
                if site.receiver == name or any(dotted(a.value) == name for a in call_args(site.node)):
                    return None
        added = [
            facts.text(node) for target, node, where in facts.item_assignments if where is frame and target == name
        ]
        if any("scaler" in text.lower() for text in added):
            return None
        return earlier[-1].value


# --------------------------------------------------------------------------------------
# AMP212 fsdp-plain-grad-scaler
# --------------------------------------------------------------------------------------

_SHARDED = {
    "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
    "torch.distributed.fsdp.ShardedGradScaler",
}


def _is_fsdp1(qname: str | None) -> bool:
    return bool(qname) and qname.startswith("torch.distributed.") and qname.endswith(".FullyShardedDataParallel")


@register
class FsdpPlainGradScaler(LintRule):
    code = "AMP212"
    tokens = ("FullyShardedDataParallel",)
    anchors = Anchors(names=tuple(GRAD_SCALER_NAMES), requires_names=("torch.distributed.fsdp",))

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if not any(_is_fsdp1(site.qname) for site in facts.calls):
            return
        if _mentions(facts, "ShardedGradScaler"):
            return
        for new in facts.events(EventKind.SCALER_NEW):
            qname = new.call.qname or ""
            if qname in _SHARDED or _scaler_construction_enabled(new.call.node, qname) is False:
                continue
            yield Report(
                self.code,
                new.call.node,
                "plain GradScaler in a module that shards with FullyShardedDataParallel: each rank checks only its "
                "own shard for infs, so ranks disagree on skipping a step and the replicas drift apart",
                help="Use `torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler`",
                statement=new.call.statement,
            )


# --------------------------------------------------------------------------------------
# AMP213 zero-grad-before-step
# --------------------------------------------------------------------------------------


@register
class ZeroGradBeforeStep(LintRule):
    code = "AMP213"
    tokens = (".scale(",)  # a scaled backward is the anchor
    anchors = SCALED_BACKWARD

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        for frame in facts.frames:
            zeroes = [z for z in frame.events_of(EventKind.ZERO_GRAD) if z.optimizer]
            if not zeroes:
                continue
            for step in _of(frame, EventKind.SCALER_STEP):
                backwards = [b for b in _of(frame, EventKind.SCALED_BACKWARD, step.scaler) if _feeds(b, step)]
                if not backwards:
                    continue
                backward = backwards[-1]
                for zero in zeroes:
                    if zero.optimizer != step.optimizer or not backward.order < zero.order < step.order:
                        continue
                    # Only a zero_grad that runs whenever the step does; a guarded one is a deliberate skip.
                    if not _is_prefix(zero.path, step.path) or _exclusive(backward, zero):
                        continue
                    yield Report(
                        self.code,
                        zero.call.node,
                        f"`{_label(facts, zero)}` between `{_label(facts, backward)}` and `{_label(facts, step)}`: "
                        "the gradients are cleared before the step uses them",
                        help="Zero the gradients before the forward pass or after the step",
                        statement=zero.call.statement,
                    )
                    break
