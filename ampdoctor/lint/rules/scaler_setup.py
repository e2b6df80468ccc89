"""AMP209–AMP213: the scaler's configuration and its place in a training script. A scaler with
bfloat16 (AMP209), float16 autocast without one (AMP210), checkpoints that leave its state out
(AMP211), a plain GradScaler under FSDP (AMP212), gradients zeroed between backward and step
(AMP213).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from ..anchors import Anchors
from ..iteration import (
    exclusive,
    feeds,
    is_prefix,
    leaves_the_pass,
)
from ..model import AmpFacts, CallSite, Region
from ..passes import is_optimizer
from ..syntax import call_args, dotted, iter_nodes
from ..vocabulary import GRAD_SCALER_NAMES, Enabled, EventKind
from . import AUTOCAST, SCALED_BACKWARD, SCALER, LintRule, Report, register
from .scaler_queries import (
    SaverScalers,
    event_text,
    float16_in_code,
    framework_backward,
    mentions,
    never_trains,
    scaler_device,
    scaler_enabled,
    scaler_enabled_arg,
    scaler_events,
    uses_framework,
)

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from ..model import Event, Frame

# --------------------------------------------------------------------------------------
# AMP209 scaler-with-bfloat16
# --------------------------------------------------------------------------------------


@register
class ScalerWithBfloat16(LintRule):
    code = "AMP209"
    tokens = ("GradScaler",)
    anchors = SCALER

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if not facts.regions:
            return
        checked_text = False
        # The regions a scaler of each device meets, and whether all are bfloat16 (asked once
        # per device, not per scaler).
        by_device: dict[str | None, tuple[list[Region], bool]] = {}
        for new in facts.events(EventKind.SCALER_NEW):
            qname = new.call.qname or ""
            device = scaler_device(new.call.node, qname)
            if device not in by_device:
                met = [r for r in facts.regions if r.enabled.counts_as_on and (r.device == device or r.device is None)]
                by_device[device] = (met, bool(met) and all(r.effective_dtype == "bfloat16" for r in met))
            regions, all_bfloat16 = by_device[device]
            if not all_bfloat16:
                continue
            enabled = scaler_enabled(new.call.node, qname)
            if enabled is None and not _same_flag(facts, new.call.node, qname, regions):
                continue
            if enabled is False:
                continue
            if not checked_text:
                # float16 named in the code (a dtype, an ``--fp16`` option) means a float16 path
                # may exist; in a comment or a docstring it does not.
                if float16_in_code(facts):
                    return
                checked_text = True
            yield Report(
                self.code,
                new.call.node,
                "GradScaler in a module whose autocast regions all use bfloat16: bfloat16 has float32's exponent "
                "range, its gradients do not underflow, and the scaler only adds work",
                help="Drop the scaler and call `loss.backward()` and `optimizer.step()` directly",
                statement=new.call.statement,
            )


def _bfloat16_only(facts: AmpFacts) -> bool:
    """Whether every autocast region of the module that is or may be on uses bfloat16, and
    float16 is named nowhere in its code (a dtype, an ``--fp16`` option)."""
    regions = [r for r in facts.regions if r.enabled.counts_as_on]
    return bool(regions) and all(r.effective_dtype == "bfloat16" for r in regions) and not float16_in_code(facts)


def _same_flag(facts: AmpFacts, call: ast.Call, qname: str, regions: list[Region]) -> bool:
    """``GradScaler(enabled=use_bf16)`` beside ``autocast(dtype=torch.bfloat16, enabled=use_bf16)``:
    the scaler is on exactly when the (bfloat16) regions are."""
    arg = scaler_enabled_arg(call, qname)
    if arg is None:
        return False
    flag = facts.text(arg.value)
    return all(r.enabled is Enabled.MAYBE and r.flag is not None and facts.text(r.flag) == flag for r in regions)


# --------------------------------------------------------------------------------------
# AMP210 float16-without-scaler
# --------------------------------------------------------------------------------------


@register
class Float16WithoutScaler(LintRule):
    code = "AMP210"
    tokens = ("autocast",)
    anchors = AUTOCAST

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if not any(r.is_float16 for r in facts.regions) or self._has_scaler(facts) or uses_framework(facts):
            return
        if never_trains(facts):
            return  # a backward for a gradient check or a timing: nothing is updated
        reported: set[int] = set()
        decorated = _float16_decorated(facts)
        for frame in facts.frames:
            backwards = [
                b
                for b in frame.events_of(EventKind.BACKWARD)
                if not framework_backward(b.call) and "scale" not in (b.call.receiver or "").lower()
            ]
            if not backwards:
                continue
            last = backwards[-1].order
            without_grad: set[int] | None = None
            for site in frame.calls:
                region = site.region
                if (region is None or not region.is_float16) and decorated:
                    # The loss comes from a function decorated with float16 autocast.
                    callee = _local_callee(site)
                    region = decorated.get(callee) if callee is not None else None
                if region is None or not region.is_float16 or site.order > last or id(region.node) in reported:
                    continue
                if without_grad is None:
                    without_grad = _under_no_grad(facts, frame)
                if id(region.node) in without_grad:
                    continue  # a frozen forward: no gradient flows through its float16 ops
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
        if facts.scalers or mentions(facts, "GradScaler"):
            return True
        # ``scaler.scale(loss)``, or a loss scaler handed in and called: ``loss_scaler(loss, optimizer)``.
        return any(
            "scaler" in (site.receiver or "").lower() or "scaler" in (dotted(site.node.func) or "").lower()
            for site in facts.calls
        )

    def _statement(self, facts: AmpFacts, node: ast.AST) -> ast.AST | None:
        for site in facts.calls:
            if site.node is node:
                return site.statement
        return None


_NO_GRAD = {
    "torch.no_grad",
    "torch.inference_mode",
    "torch.autograd.no_grad",
    "torch.autograd.grad_mode.no_grad",
    "torch.autograd.grad_mode.inference_mode",
}


def _under_no_grad(facts: AmpFacts, frame: Frame) -> set[int]:
    """Ids of the nodes the frame runs inside ``with torch.no_grad():`` (or ``inference_mode``)."""
    inside: set[int] = set()
    for node in iter_nodes(frame.node):
        if isinstance(node, (ast.With, ast.AsyncWith)) and any(
            isinstance(item.context_expr, ast.Call) and facts.qualify(item.context_expr.func) in _NO_GRAD
            for item in node.items
        ):
            for statement in node.body:
                inside.update(id(n) for n in iter_nodes(statement))
    return inside


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


def _wrapper_state_dicts(facts: AmpFacts) -> Iterable[Report]:
    """An optimizer wrapper that owns a GradScaler (``self.scaler = GradScaler(...)``) and steps
    an optimizer, but whose ``state_dict()`` returns the optimizer's state without the scaler's:
    every checkpoint made through it loses the loss scale."""
    owned: dict[str, str] = {}
    for assignment in facts.assignments:
        target, value = assignment.target, assignment.value
        if (
            target.startswith("self.")
            and assignment.frame.class_name
            and type(value) is ast.Call
            and facts.qualify(value.func) in GRAD_SCALER_NAMES
        ):
            owned.setdefault(assignment.frame.class_name, target)
    for function, frame in facts.functions:
        scaler = owned.get(frame.class_name or "")
        if scaler is None or function.name != "state_dict" or frame.parent is None or frame.parent.parent is not None:
            continue
        text = facts.text(function)
        if "scaler" in text.lower() or scaler.split(".", 1)[1] in text:
            continue
        returns = [(n, n.value) for n in iter_nodes(function) if isinstance(n, ast.Return) and n.value is not None]
        if len(returns) != 1:
            continue
        statement, value = returns[0]
        receivers = [
            dotted(n.func.value)
            for n in iter_nodes(value)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "state_dict"
        ]
        if not receivers or not all(is_optimizer(r, facts) or "optim" in (r or "").lower() for r in receivers):
            continue
        yield Report(
            ScalerStateNotSaved.code,
            value,
            f"`{frame.class_name}.state_dict()` returns the optimizer's state but not that of the GradScaler it owns "
            f"(`{scaler}`): checkpoints made through it restart the loss scale at 65536 on resume",
            help=f"Include `{scaler}.state_dict()` and restore it in `load_state_dict`",
            statement=statement,
        )


def _holds_scaler_state(facts: AmpFacts, save: CallSite, mapping: ast.expr) -> bool:
    """A value of the mapping is a name the saving function bound to something that mentions a
    scaler (``amp_state = scaler.state_dict()`` saved as ``"amp_state": amp_state``)."""
    names = {dotted(node) for node in iter_nodes(mapping) if isinstance(node, ast.Name)}
    return any(
        a.order < save.order and "scaler" in facts.text(a.value).lower()
        for name in names
        if name is not None
        for a in facts.assigned(save.frame, name)
    )


def _is_mapping_literal(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Dict) or (isinstance(expr, ast.Call) and dotted(expr.func) == "dict")


@register
class ScalerStateNotSaved(LintRule):
    code = "AMP211"
    tokens = ("GradScaler", ".scale(")
    needs = (rb"save\(|def state_dict\(",)
    anchors = SCALER

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if not facts.scalers and not any(True for _ in facts.events(EventKind.SCALER_NEW)):
            return
        if _bfloat16_only(facts):
            return  # no bfloat16 gradient overflows: a fresh scale skips no step (AMP209 says drop it)
        yield from _wrapper_state_dicts(facts)
        savers = SaverScalers(facts)
        for save in facts.calls_to("torch.save"):
            arg = save.arg(0, "obj")
            if arg is None or not savers.has_scaler(save):
                continue
            mapping = self._mapping(facts, save, arg.value)
            if mapping is None or "scaler" in facts.text(mapping).lower() or _holds_scaler_state(facts, save, mapping):
                continue
            receivers, opaque = _state_dict_receivers(mapping)
            if opaque or not any(is_optimizer(r, facts) or "optim" in (r or "").lower() for r in receivers):
                continue
            yield Report(
                self.code,
                save.node,
                "checkpoint saves the optimizer's state but not the GradScaler's: on resume the loss scale restarts "
                "at its initial value (65536) and the first steps are skipped while it backs off",
                help='Add `"scaler": scaler.state_dict()` to the checkpoint and `scaler.load_state_dict(...)` on resume',
                statement=save.statement,
            )

    def _mapping(self, facts: AmpFacts, save: CallSite, expr: ast.expr) -> ast.expr | None:
        if _is_mapping_literal(expr):
            return expr
        name = dotted(expr)
        if name is None:
            return None
        frame = save.frame
        earlier = [a for a in facts.assigned(frame, name) if a.order < save.order]
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
    return qname is not None and qname.startswith("torch.distributed.") and qname.endswith(".FullyShardedDataParallel")


def _excludes_sharding(facts: AmpFacts, new: Event, wraps: list[CallSite]) -> bool:
    """Whether the scaler is built only where the FSDP wrap is not: under ``assert not flag``
    earlier in its block, or in the ``else`` of ``if flag:``, where every wrap runs only under
    ``if flag:`` (``flag``: the same expression, ``args.fsdp``)."""
    tests = set()
    for wrap in wraps:
        guards = {ast.dump(b.node.test) for b in wrap.path if b.kind == "if" and type(b.node) is ast.If}
        if not guards:
            return False  # a wrap that always runs
        tests |= guards
    for block in new.path:
        if block.kind == "else" and type(block.node) is ast.If and ast.dump(block.node.test) in tests:
            return True
    statement = new.call.statement
    for node in ast.walk(new.call.frame.node):
        if type(node) is ast.Assert and node.lineno <= statement.lineno and node.col_offset == statement.col_offset:
            test = node.test
            if type(test) is ast.UnaryOp and type(test.op) is ast.Not and ast.dump(test.operand) in tests:
                return True
    return False


@register
class FsdpPlainGradScaler(LintRule):
    code = "AMP212"
    tokens = ("FullyShardedDataParallel",)
    anchors = Anchors(names=tuple(GRAD_SCALER_NAMES), requires_names=("torch.distributed.fsdp",))

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if not any(_is_fsdp1(site.qname) for site in facts.calls):
            return
        if mentions(facts, "ShardedGradScaler"):
            return
        wraps = [site for site in facts.calls if _is_fsdp1(site.qname)]
        for new in facts.events(EventKind.SCALER_NEW):
            qname = new.call.qname or ""
            if qname in _SHARDED or scaler_enabled(new.call.node, qname) is False:
                continue
            if _excludes_sharding(facts, new, wraps):
                continue  # the scaler is made only where the model is not sharded
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


def _keeps_zeros(call: ast.Call) -> bool:
    """``zero_grad(set_to_none=False)`` (or ``zero_grad(False)``): gradients become zeros, not None."""
    for keyword in call.keywords:
        if keyword.arg == "set_to_none":
            return type(keyword.value) is ast.Constant and keyword.value.value is False
    return bool(call.args) and type(call.args[0]) is ast.Constant and call.args[0].value is False


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
            for step in scaler_events(frame, EventKind.SCALER_STEP):
                backwards = [b for b in scaler_events(frame, EventKind.SCALED_BACKWARD, step.scaler) if feeds(b, step)]
                if not backwards:
                    continue
                backward = backwards[-1]
                for zero in zeroes:
                    if zero.optimizer != step.optimizer or not backward.order < zero.order < step.order:
                        continue
                    # Only a zero_grad that runs whenever the step does; a guarded one is a deliberate
                    # skip, and so is one in an arm that leaves the pass when it keeps zeroed tensors
                    # (``zero_grad(set_to_none=False); scaler.step(); scaler.update(); continue`` drops
                    # a bad batch and keeps the scaler's schedule; with the default ``set_to_none=True``
                    # the step finds no gradients and raises "No inf checks were recorded").
                    if not is_prefix(zero.path, step.path) or exclusive(backward, zero):
                        continue
                    if leaves_the_pass(zero) and _keeps_zeros(zero.call.node):
                        continue
                    yield Report(
                        self.code,
                        zero.call.node,
                        f"`{event_text(facts, zero)}` between `{event_text(facts, backward)}` and `{event_text(facts, step)}`: "
                        "the gradients are cleared before the step uses them",
                        help="Zero the gradients before the forward pass or after the step",
                        statement=zero.call.statement,
                    )
                    break
