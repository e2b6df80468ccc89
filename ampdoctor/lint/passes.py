"""After the walk: the passes that complete a module's AmpFacts once every call is recorded.

* regions: each ``with`` item, decorator and context object resolved to the autocast Region it
  opens (held autocast names through held.py, devices held in module constants);
* roles: which receivers hold a GradScaler or an optimizer, by construction and by use;
* events: each call classified as a training-step event (backward, unscale_, step, update ...).
"""

from __future__ import annotations

import ast
import re

from .held import constant_device, delegated_backward, held_region, module_strings
from .held import factories as held_factories
from .model import AmpFacts, CallSite, Event, Frame, Region, autocast_region
from .syntax import call_args, dotted, get_arg, qualify, qualify_spelled, string_value
from .vocabulary import (
    AUTOCAST_NAMES,
    AUTOGRAD_BACKWARD,
    CLIP_NAMES,
    CUSTOM_FWD_NAMES,
    DTYPES,
    GRAD_SCALER_NAMES,
    HALF_TENSOR_TYPES,
    Enabled,
    EventKind,
)

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any

    from .held import Held
    from .model import Assignment

# Optimizer classes by their last name, whatever package they come from (torch.optim,
# apex.optimizers, bitsandbytes, timm.optim, transformers ...).
_OPTIMIZER_CLASS = frozenset(
    {
        "Adam",
        "AdamW",
        "SGD",
        "RMSprop",
        "Adagrad",
        "Adadelta",
        "Adamax",
        "NAdam",
        "RAdam",
        "ASGD",
        "Rprop",
        "LBFGS",
        "SparseAdam",
        "Adafactor",
        "Lamb",
        "LAMB",
        "Lion",
        "Adan",
        "FusedAdam",
        "FusedLAMB",
        "FusedSGD",
        "LARS",
        "Shampoo",
        "Muon",
        "Sophia",
        "AdamW8bit",
        "Adam8bit",
        "PagedAdamW",
        "PagedAdamW8bit",
        "Lion8bit",
        "AdaBelief",
        "Novograd",
        "ZeroRedundancyOptimizer",
    }
)
_OPTIMIZER_NAME = re.compile(r"(^|_)(opt|optim|optimizer|optimiser|optimizers)(_\w+)?$|^(g|d|gen|disc)_?opt\w*$")


def _region_of_expression(expr: ast.expr, facts: AmpFacts, held: dict[str, Held] | None = None) -> Region | None:
    """Autocast region for a ``with`` item: a call, a context object, ``a if c else b``, or a
    call of a name that holds an autocast factory (held.py)."""
    if type(expr) is ast.Call:
        region = autocast_region(expr, facts.imports)
        if region is not None:
            return region
        name = qualify(expr.func, facts.imports)
        if name in CUSTOM_FWD_NAMES and get_arg(expr, None, "cast_inputs") is not None:
            # custom_fwd(cast_inputs=...) runs forward with autocast disabled.
            return Region(expr, None, None, False, Enabled.OFF, "custom_fwd")
        if _framework_autocast(expr):
            # ``accelerator.autocast()`` (Accelerate), ``fabric.autocast()`` (Lightning Fabric):
            # torch's autocast with the dtype the object was configured with, when it is.
            return Region(expr, None, None, False, Enabled.MAYBE)
        return held_region(expr, facts, held) if held else None
    if type(expr) is ast.IfExp:
        # ``ctx = nullcontext() if cpu else torch.autocast(...)``: on in one arm only.
        arms = [_region_of_expression(expr.body, facts, held), _region_of_expression(expr.orelse, facts, held)]
        found = [a for a in arms if a is not None]
        if not found:
            return None
        first = found[0]
        enabled: Enabled = first.enabled if len(found) == 2 and first.enabled is Enabled.OFF else Enabled.MAYBE
        if len(found) == 2 and all(a.enabled is Enabled.ON for a in found):
            enabled = Enabled.ON
        flag = expr.test if enabled is Enabled.MAYBE and len(found) == 1 else None
        return Region(first.node, first.device, first.dtype, first.dtype_given, enabled, first.kind, flag)
    name = dotted(expr)
    if name is not None:
        return facts.context_objects.get(name)
    return None


def _bind_context(table: dict[Any, Region], name: Any, count: int, assignment: Assignment, region: Region) -> None:
    """Bind ``name`` in ``table`` to the context object an assignment makes: one made on in one
    binding and off in another may be either; ``ctx = nullcontext()`` then ``if fp16: ctx =
    torch.autocast(...)`` (``count`` bindings of the name) is on where the test that chose it
    holds (the region's flag), off elsewhere."""
    existing = table.get(name)
    if existing is not None and existing.enabled is not region.enabled:
        region = Region(region.node, region.device, region.dtype, region.dtype_given, Enabled.MAYBE)
    elif existing is None and count > 1 and region.enabled is Enabled.ON:
        flag = _choosing_test(assignment)
        region = Region(region.node, region.device, region.dtype, region.dtype_given, Enabled.MAYBE, region.kind, flag)
    table[name] = region


def _binding_frame(assignment: Assignment) -> Frame:
    """The frame whose name an assignment binds: its own, or, under ``global name``, the
    module's; under ``nonlocal name``, the enclosing function's (``Frame.declared``)."""
    frame = assignment.frame
    declared = frame.declared
    scope = declared.get(assignment.target) if declared else None
    if scope is None or frame.parent is None:
        return frame
    if not scope:
        return frame.parent
    while frame.parent is not None:
        frame = frame.parent
    return frame


def _scoped_region(scoped: dict[tuple[int, str], Region], frame: Frame | None, name: str) -> Region | None:
    """The context object a plain name holds where it is used: bound in the function itself, or
    in a function (or the module body) around it; another function's local of the same name is
    not it."""
    while frame is not None:
        found = scoped.get((id(frame), name))
        if found is not None:
            return found
        frame = frame.parent
    return None


def _seeded_region(expr: ast.expr, seeds: dict[str, Any]) -> Region | None:
    """The region a ``with`` item opens by what the project analysis found it to be (an
    autocast context made in another module: ``self.amp_cm``, ``self.engine.autocast()``)."""
    found = seeds.get("regions", {}).get((expr.lineno, expr.col_offset + 1))
    if found is None:
        return None
    dtype, enabled, device = found
    return Region(expr, device, dtype, dtype is not None, Enabled(enabled))


def _choosing_test(assignment: Assignment) -> ast.expr | None:
    """The test of the ``if`` whose body (not its ``else``) makes the assignment, directly."""
    frame = assignment.frame.node
    stack = [frame]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if type(child) is ast.If and any(
                type(stmt) is ast.Assign and stmt.value is assignment.value for stmt in child.body
            ):
                return child.test
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.expr)):
                stack.append(child)
    return None


_FRAMEWORK_OBJECT = re.compile(r"(^|_)(accelerator|fabric)$", re.I)


def _framework_autocast(call: ast.Call) -> bool:
    """``accelerator.autocast()`` / ``self.accelerator.autocast()`` / ``fabric.autocast()``."""
    func = call.func
    if type(func) is not ast.Attribute or func.attr != "autocast" or call.args:
        return False
    receiver = dotted(func.value)
    return receiver is not None and _FRAMEWORK_OBJECT.search(receiver.rsplit(".", 1)[-1]) is not None


def resolve_regions(facts: AmpFacts) -> None:
    held = held_factories(facts, AUTOCAST_NAMES)
    # Context objects: ``ctx = torch.autocast(...)`` anywhere in the module, by spelling; a plain
    # name is also kept per function (``scoped``): two functions' ``context`` are two objects.
    bound: dict[str, int] = {}
    bound_in: dict[tuple[int, str], int] = {}
    for assignment in facts.assignments:
        bound[assignment.target] = bound.get(assignment.target, 0) + 1
        place = (id(_binding_frame(assignment)), assignment.target)
        bound_in[place] = bound_in.get(place, 0) + 1
    scoped: dict[tuple[int, str], Region] = {}
    for assignment in facts.assignments:
        made = _region_of_expression(assignment.value, facts, held)
        if made is not None:
            _bind_context(facts.context_objects, assignment.target, bound[assignment.target], assignment, made)
            place = (id(_binding_frame(assignment)), assignment.target)
            _bind_context(scoped, place, bound_in[place], assignment, made)
    seen: dict[int, Region | None] = {}
    for site in facts.calls:
        for ref in site.withs:
            key = id(ref)
            if key in seen or ref.region is not None:
                continue
            if type(ref.expr) is ast.Name and ref.expr.id in facts.context_objects:
                region = _scoped_region(scoped, site.frame, ref.expr.id)
            else:
                region = _region_of_expression(ref.expr, facts, held)
            if region is None and facts.seeds is not None:
                region = _seeded_region(ref.expr, facts.seeds)
            if region is not None and ref.decorator:
                region = Region(
                    region.node,
                    region.device,
                    region.dtype,
                    region.dtype_given,
                    region.enabled,
                    "decorator" if region.kind == "with" else region.kind,
                )
            ref.region = region
            seen[key] = region
    regions: dict[int, Region] = {}
    for region in list(facts.context_objects.values()) + [r for r in seen.values() if r is not None]:
        regions.setdefault(id(region.node), region)
    # Regions that enclose no call at all (``with autocast(): pass``) still count as uses.
    for site in facts.calls:
        if site.spelled is None or qualify_spelled(site.spelled, facts.imports) not in AUTOCAST_NAMES:
            continue  # not an autocast call (``autocast_region`` would say None)
        if id(site.node) not in regions:
            region = autocast_region(site.node, facts.imports)
            if region is not None:
                regions[id(site.node)] = region
    _devices_from_constants(facts, [*facts.context_objects.values(), *seen.values(), *regions.values()])
    facts.regions = list(regions.values())


def _devices_from_constants(facts: AmpFacts, found: list[Region | None]) -> None:
    """``torch.autocast(device_type=DEVICE_TYPE)`` with ``DEVICE_TYPE = "cuda"`` in the module
    (and the other device values ``constant_device`` reads)."""
    unknown = [r for r in found if r is not None and r.device is None]
    if not unknown:
        return
    constants = module_strings(facts)
    frames = {id(site.node): site.frame for site in facts.calls}
    for region in unknown:
        if id(region.node) in frames:
            region.device = constant_device(region.node, frames[id(region.node)], facts, constants)


def _is_scale_call(expr: ast.expr) -> str | None:
    """``K.scale(x)`` → ``K``."""
    if type(expr) is ast.Call and type(expr.func) is ast.Attribute and expr.func.attr == "scale":
        return dotted(expr.func.value)
    return None


def find_scalers_and_optimizers(facts: AmpFacts) -> None:
    if facts.seeds is not None:
        # The scalers of engine objects whose methods run the scaler calls (``runner.engine.scaler``).
        for seeded in facts.seeds.get("protocol", {}).values():
            facts.scalers.update(scaler for _kind, scaler, _argument in seeded)
    for assignment in facts.assignments:
        value = assignment.value
        if type(value) is ast.IfExp:
            # ``scaler = GradScaler() if amp else None``: a scaler whenever one is used.
            value = next((arm for arm in (value.body, value.orelse) if type(arm) is ast.Call), value)
        if type(value) is ast.Call:
            qname = facts.qualify(value.func)
            if qname in GRAD_SCALER_NAMES:
                facts.scalers.add(assignment.target)
                device_arg = get_arg(value, 0, "device")
                device = GRAD_SCALER_NAMES[qname] or (string_value(device_arg.value) if device_arg else "cuda")
                facts.scaler_devices[assignment.target] = device
            elif is_optimizer_constructor(value, facts):
                facts.optimizers.add(assignment.target)
    scaled_vars: dict[str, str] = {}
    if _another_framework(facts):
        facts.scaled_vars = scaled_vars
        return  # PaddlePaddle's ``scaler.scale(loss).backward()``: its GradScaler is not torch's
    # By use: whatever has ``.scale(x).backward()`` called on it is a scaler.
    for assignment in facts.assignments:
        scaler = _is_scale_call(assignment.value)
        if scaler is not None:
            scaled_vars[_scaled_key(assignment.target, assignment.frame)] = scaler
    for site in facts.calls:
        if site.method == "backward":
            scaler = _is_scale_call(site.node.func.value) if type(site.node.func) is ast.Attribute else None
            if scaler is not None:
                facts.scalers.add(scaler)
    for site in facts.calls:
        if site.receiver in facts.scalers and site.method in ("step", "unscale_"):
            opt = site.arg(0, "optimizer")
            name = dotted(opt.value) if opt else None
            if name:
                facts.optimizers.add(name)
    for site in facts.calls:
        if site.method == "zero_grad" and site.receiver and _OPTIMIZER_NAME.search(site.receiver.rsplit(".", 1)[-1]):
            facts.optimizers.add(site.receiver)
    facts.scaled_vars = scaled_vars


_NOT_OPTIMIZERS = ("torch.optim.lr_scheduler.", "torch.optim.swa_utils.")
# Deep learning frameworks whose mixed precision copies torch's names (``paddle.amp.GradScaler``
# with ``scale``, ``step``, ``update``) but not their contract.
_OTHER_FRAMEWORKS = frozenset({"paddle", "mindspore", "oneflow", "jittor", "megengine"})


def _another_framework(facts: AmpFacts) -> bool:
    """Whether the module imports another deep learning framework and nothing of torch: its
    ``x.scale(loss).backward()`` is that framework's scaler, not a torch GradScaler."""
    roots = {qname.partition(".")[0] for qname in facts.imports.values()}
    return not roots.isdisjoint(_OTHER_FRAMEWORKS) and "torch" not in roots


def is_optimizer_constructor(call: ast.Call, facts: AmpFacts) -> bool:
    known = facts.constructors.get(id(call))
    if known is None:
        known = facts.constructors[id(call)] = _builds_optimizer(call, facts)
    return known


def _builds_optimizer(call: ast.Call, facts: AmpFacts) -> bool:
    func = call.func
    if type(func) is ast.Attribute and func.attr not in _OPTIMIZER_CLASS and not func.attr[:1].isupper():
        # Qualifying a dotted callee changes only its first name: the last one, its attribute,
        # names no optimizer class (nor, lower-case, any class of ``torch.optim``). Most calls
        # end here: asked of the 46,200 calls of a file of 4,200 training functions, the
        # summary's question (``half_parts.trains_returned``) took 0.08 s, 0.04 s now.
        return False
    qname = facts.qualify(func) or dotted(func) or ""
    if qname.startswith(_NOT_OPTIMIZERS):
        return False  # schedulers and SWA helpers also have .step()
    last = qname.rsplit(".", 1)[-1]
    return last in _OPTIMIZER_CLASS or (qname.startswith("torch.optim.") and last[:1].isupper())


# Objects with a ``step()`` whose names would otherwise look like optimizers.
_NOT_OPTIMIZER_NAME = re.compile(r"sched|ema|swa|warmup|lr_|pbar|progress", re.I)


def is_optimizer(name: str | None, facts: AmpFacts) -> bool:
    if not name:
        return False
    if name in facts.optimizers:
        return True
    last = name.rsplit(".", 1)[-1]
    return bool(_OPTIMIZER_NAME.search(last)) and not _NOT_OPTIMIZER_NAME.search(last)


def classify_events(facts: AmpFacts) -> None:
    scaled_vars = facts.scaled_vars
    protocol = facts.seeds.get("protocol") if facts.seeds is not None else None
    for frame in facts.frames:
        for site in frame.calls:
            if protocol:
                seeded = protocol.get((site.node.lineno, site.node.col_offset + 1))
                if seeded is not None:
                    frame.events.extend(_protocol_events(site, seeded))
                    continue
            event = _event_for(site, facts, scaled_vars)
            if event is not None:
                frame.events.append(event)


_PROTOCOL_KINDS = {
    "backward": EventKind.SCALED_BACKWARD,
    "unscale": EventKind.UNSCALE,
    "step": EventKind.SCALER_STEP,
    "update": EventKind.UPDATE,
}


def _protocol_events(site: CallSite, seeded: list[tuple[str, str, tuple[int, str] | None]]) -> list[Event]:
    """The scaler calls an engine's method makes, as events of the call that runs it
    (``project/engine_calls.py``): ``runner.engine.optimizer_step(loss, model, optimizer)`` is
    ``runner.engine.scaler.step(optimizer)`` then ``runner.engine.scaler.update()`` here."""
    events = []
    for kind, scaler, argument in seeded:
        optimizer = None
        if argument is not None:
            passed = site.arg(argument[0], argument[1])
            optimizer = dotted(passed.value) if passed is not None else None
        events.append(Event(_PROTOCOL_KINDS[kind], site, scaler=scaler, optimizer=optimizer))
    return events


def _scaled_key(name: str, frame: Frame) -> str:
    """The key of ``scaled_vars`` for a name: a local is the function's own (``loss =
    scaler.scale(loss)`` in one function says nothing of another's ``loss``); a field
    (``self.loss``) is shared by the methods of the module."""
    return name if "." in name else f"{id(frame)}:{name}"


def _event_for(site: CallSite, facts: AmpFacts, scaled_vars: dict[str, str]) -> Event | None:
    method, receiver = site.method, site.receiver
    if facts.seeds is not None:
        at = (site.node.lineno, site.node.col_offset + 1)
        if at in facts.seeds.get("clips", ()):
            return Event(EventKind.CLIP, site)  # a call of a function that clips (project/seeds.py)
        unscale = facts.seeds.get("unscales", {}).get(at)
        if unscale is not None:  # a call of a helper that unscales the scaler it is handed
            return Event(EventKind.UNSCALE, site, scaler=unscale[0], optimizer=unscale[1])
    if site.qname in GRAD_SCALER_NAMES:
        return Event(EventKind.SCALER_NEW, site)
    if site.qname in CLIP_NAMES:
        return Event(EventKind.CLIP, site, norm_only=_is_norm_only(site, facts))
    if _unseen_clipper(site, facts):
        return Event(EventKind.CLIP, site)
    if method in _CLAMPS and receiver is not None and _GRADIENT.search(receiver):
        return Event(EventKind.CLIP, site)  # ``p.grad.data.clamp_(-c, c)``: a value clip written out
    if site.qname in AUTOGRAD_BACKWARD:
        tensors = site.arg(0, "tensors")
        scaler = _is_scale_call(tensors.value) if tensors else None
        if scaler is None and tensors is not None:
            scaler = scaled_vars.get(_scaled_key(dotted(tensors.value) or "", site.frame))
        if scaler is not None:
            return Event(EventKind.SCALED_BACKWARD, site, scaler=scaler)
        return Event(EventKind.BACKWARD, site)
    if delegated_backward(method, receiver, site.node):
        return Event(EventKind.DELEGATED_BACKWARD, site)
    if method == "backward" and type(site.node.func) is ast.Attribute:
        target = site.node.func.value
        scaler = _is_scale_call(target) or scaled_vars.get(_scaled_key(dotted(target) or "", site.frame))
        if scaler is not None:
            return Event(EventKind.SCALED_BACKWARD, site, scaler=scaler)
        if receiver is not None and ("accelerator" in receiver.lower() or receiver.endswith("fabric")):
            return None  # accelerate / Lightning Fabric objects scale inside backward()
        return Event(EventKind.BACKWARD, site)
    if receiver in facts.scalers:
        opt_arg = site.arg(0, "optimizer")
        optimizer = dotted(opt_arg.value) if opt_arg else None
        kind = {"step": EventKind.SCALER_STEP, "unscale_": EventKind.UNSCALE, "update": EventKind.UPDATE}.get(
            method or ""
        )
        if kind is not EventKind.UPDATE and not site.node.args and not site.node.keywords:
            # A GradScaler's step and unscale_ take the optimizer: ``s.step()`` is another object
            # under a name a scaler also has (``[s.step() for s in schedulers]`` beside
            # ``[s.update() for s in scalers]``).
            return None
        if kind is not None:
            return Event(kind, site, scaler=receiver, optimizer=optimizer if kind is not EventKind.UPDATE else None)
        return None
    if method == "step" and not site.node.args and not site.node.keywords and is_optimizer(receiver, facts):
        return Event(EventKind.OPTIMIZER_STEP, site, optimizer=receiver)
    if method == "zero_grad":
        return Event(EventKind.ZERO_GRAD, site, optimizer=receiver)
    return None


def downcast_dtype(site: CallSite, facts: AmpFacts) -> str | None:
    """float16/bfloat16 when the call is ``.half()``, ``.bfloat16()``, ``.to(<half>)``, ``.type(<half>)``
    or ``.convert_to_fp16()``."""
    call = site.node
    if (site.method == "half" or site.method == "convert_to_fp16") and not call.args and not call.keywords:
        return "float16"  # (``convert_to_fp16()``: the diffusion UNets' own conversion of their torso)
    if site.method == "bfloat16" and not call.args and not call.keywords:
        return "bfloat16"
    if site.method == "to":
        for arg in call_args(call):
            if arg.star or (arg.keyword is not None and arg.keyword != "dtype"):
                continue
            dtype = DTYPES.get(facts.qualify(arg.value) or "")
            if dtype in ("float16", "bfloat16"):
                return dtype
        return None
    if site.method == "type" and (call.args or call.keywords):
        arg = call_args(call)[0]
        name = facts.qualify(arg.value) or ""
        dtype = HALF_TENSOR_TYPES.get(name) or DTYPES.get(name)
        if dtype is None:
            text = string_value(arg.value) or ""
            dtype = HALF_TENSOR_TYPES.get(text)
        if dtype in ("float16", "bfloat16"):
            return dtype
    return None


# ``clip_grad_norm``, ``_clip_gradients``; ``grad_clip_fn``, ``grad_clipper`` (not ``get_grad_clip``)
# An in-place clamp of a parameter's gradient (``param.grad.data.clamp_(-clip, clip)``, the
# ``clip_gradient`` helper of many segmentation codebases) clips by value.
_CLAMPS = frozenset({"clamp_", "clip_"})
_GRADIENT = re.compile(r"\.grad(\.data)?$")
_CLIPPER_NAME = re.compile(r"(^|_)clip_?grad|^_*grad_?clip(_?fn|_?func|per)?$", re.I)


def _unseen_clipper(site: CallSite, facts: AmpFacts) -> bool:
    """A call of a gradient clipper the module does not define (``self.clip_grad_norm(params)``
    where the object comes from a config registry): its name says what it does. One the module
    defines is judged by what its body does (``project/seeds.py``); one handed a scaler may
    unscale first, and is left alone."""
    if site.qname is not None or site.spelled is None:
        return False
    name = site.spelled.rsplit(".", 1)[-1]
    if not _CLIPPER_NAME.search(name):
        return False
    if any(function.name == name for function, _frame in facts.functions):
        return False
    return not any((dotted(arg.value) or "") in facts.scalers for arg in call_args(site.node))


def _is_norm_only(site: CallSite, facts: AmpFacts) -> bool:
    """``clip_grad_norm_(params, inf)`` only measures; a norm divided by the scale is logging."""
    if "get_scale" in facts.text(site.statement):
        return True
    max_norm = site.arg(1, "max_norm") or site.arg(1, "clip_value")
    if max_norm is not None:
        value = max_norm.value
        if type(value) is ast.Call and dotted(value.func) == "float":
            arg = get_arg(value, 0, None)
            if arg is not None and (string_value(arg.value) or "").lower() in ("inf", "+inf"):
                return True
        name = dotted(value) or ""
        if name in ("math.inf", "torch.inf", "np.inf", "numpy.inf", "inf", "float_inf"):
            return True
    return False
