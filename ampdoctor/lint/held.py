"""Autocast held in names, and backward passes handed to a framework.

Trainers rarely write ``with torch.autocast(...)`` where they compute the loss. They choose the
context once and keep it:

* ``self.amp_autocast = partial(torch.autocast, device_type="cuda", dtype=amp_dtype)`` in
  ``__init__`` (``= suppress`` when AMP is off), then ``with self.amp_autocast():`` elsewhere;
* ``autocast = torch.cuda.amp.autocast if amp else suppress``, then ``with autocast():``;
* ``def train_one_epoch(..., amp_autocast=suppress)`` called with the real one.

``factories`` reads those bindings (by spelling, module-wide, like context objects) and
``held_region`` turns ``with NAME(...):`` into the Region it opens: on when every binding is
autocast, "maybe" when one of them is a null context or unknown. Where a name is bound only by
a conditional expression, the condition is the region's flag (see ``Region.flag``).

``delegated_backward`` recognises ``optimizer.backward(loss)``, ``model_engine.backward(loss)``,
``self.manual_backward(loss)`` and the like: the framework scales the loss inside, so they are
not plain tensor backward passes.
"""

from __future__ import annotations

import ast
import re

from ..records import Record
from .model import Region, autocast_region
from .syntax import dotted, get_arg
from .vocabulary import AUTOCAST_NAMES, Enabled

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable, Container

    from .model import AmpFacts, Frame

# Context managers that do nothing: the "AMP off" arm of a held autocast.
NULL_CONTEXTS = frozenset({"contextlib.suppress", "contextlib.nullcontext"})
_PARTIAL = frozenset({"functools.partial"})
# A parameter whose name says it holds an autocast context (``amp_autocast=suppress``).
_AUTOCAST_PARAMETER = re.compile(r"autocast", re.I)


class Factory(Record):
    """One thing a held name may stand for: an autocast callable with the arguments ``partial``
    bound (``ref`` is the expression naming it), or a null/unknown context (``ref`` None)."""

    __slots__ = ("ref", "args", "keywords")

    def __init__(
        self, ref: ast.expr | None, args: list[ast.expr] | None = None, keywords: list[ast.keyword] | None = None
    ) -> None:
        self.ref = ref
        self.args = [] if args is None else args
        self.keywords = [] if keywords is None else keywords

    @property
    def is_autocast(self) -> bool:
        return self.ref is not None


class Held(Record):
    """What a name may hold (``choices``) and the expression that chooses, when one does."""

    __slots__ = ("choices", "flag", "parameter")

    def __init__(self, choices: list[Factory], flag: ast.expr | None = None, parameter: bool = False) -> None:
        self.choices = choices
        self.flag = flag
        self.parameter = parameter  # a parameter whose caller passes the context


def _choices(
    expr: ast.expr, qualify: Callable[[ast.AST | None], str | None], autocast_names: Container[str | None]
) -> list[Factory] | None:
    """The factories an assigned value may be; None when it is no autocast-like value at all."""
    if type(expr) is ast.IfExp:
        arms = [_choices(expr.body, qualify, autocast_names), _choices(expr.orelse, qualify, autocast_names)]
        if not any(arm and any(f.is_autocast for f in arm) for arm in arms):
            return None
        # An arm the model cannot read is some other context: the region may be off.
        return [f for arm in arms for f in (arm if arm is not None else [Factory(None)])]
    if type(expr) is ast.Call:
        if qualify(expr.func) in _PARTIAL and expr.args and qualify(expr.args[0]) in autocast_names:
            return [Factory(expr.args[0], list(expr.args[1:]), list(expr.keywords))]
        return None
    name = qualify(expr)
    if name in autocast_names:
        return [Factory(expr)]
    if name in NULL_CONTEXTS:
        return [Factory(None)]
    return None


def factories(facts: AmpFacts, autocast_names: Container[str | None]) -> dict[str, Held]:
    """Spelling → what it holds, from assignments and from parameters' default values."""
    held: dict[str, Held] = {}

    def add(target: str, choices: list[Factory], flag: ast.expr | None, parameter: bool = False) -> None:
        existing = held.get(target)
        if existing is None:
            held[target] = Held(choices, flag, parameter)
        else:  # bound in several places (both arms of an ``if`` in ``__init__``)
            held[target] = Held(existing.choices + choices, None, existing.parameter or parameter)

    for assignment in facts.assignments:
        choices = _choices(assignment.value, facts.qualify, autocast_names)
        if choices is not None:
            add(assignment.target, choices, assignment.value.test if type(assignment.value) is ast.IfExp else None)
    for function, _frame in facts.functions:
        arguments = function.args
        if not arguments.defaults and not arguments.kw_defaults:
            continue
        positional = [*arguments.posonlyargs, *arguments.args]
        pairs = list(zip(positional[len(positional) - len(arguments.defaults) :], arguments.defaults))
        pairs += [(a, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None]
        for parameter, default in pairs:
            if _AUTOCAST_PARAMETER.search(parameter.arg) and facts.qualify(default) in NULL_CONTEXTS:
                # ``amp_autocast=suppress``: the caller passes the real context when AMP is on.
                add(parameter.arg, [Factory(None)], None, parameter=True)
    return held


def held_region(call: ast.Call, facts: AmpFacts, held: dict[str, Held]) -> Region | None:
    """The Region that ``with NAME(...):`` opens when NAME holds an autocast factory, else None."""
    spelling = dotted(call.func)
    entry = held.get(spelling) if spelling else None
    if entry is None:
        return None
    regions = []
    for factory in entry.choices:
        if factory.ref is not None:  # is_autocast
            # The call the factory makes: what ``partial`` bound, then what the ``with`` passes.
            # The call's keywords come first: they override what ``partial`` bound, as in Python.
            bound = ast.Call(
                func=factory.ref, args=[*factory.args, *call.args], keywords=[*call.keywords, *factory.keywords]
            )
            region = autocast_region(bound, facts.imports)
            if region is not None:
                regions.append(region)
    if not regions:
        if not entry.parameter:
            return None  # only ever a null context
        return Region(call, None, None, False, Enabled.MAYBE)  # the caller's context: some autocast
    first = regions[0]
    certain = len(regions) == len(entry.choices) and all(r.enabled is first.enabled for r in regions)
    enabled = first.enabled if certain or first.enabled is Enabled.OFF else Enabled.MAYBE
    return Region(call, first.device, first.dtype, first.dtype_given, enabled, flag=None if certain else entry.flag)


# ---- delegated backward --------------------------------------------------------------

# Receivers whose ``backward(loss)`` scales the loss itself: DeepSpeed engines (often named
# ``model`` or ``model_engine``), apex/fairseq-style optimizer wrappers (``fp16_optimizer``),
# accelerate, Fabric, Lightning strategies. Only the last word counts: ``model_output`` is a tensor.
_DELEGATE_RECEIVER = re.compile(
    r"^(\w+_)?(model|engine|deepspeed|accelerator|fabric|strategy|trainer|booster|optimizer|optimiser|optim|opt)$",
    re.I,
)


def delegated_backward(method: str | None, receiver: str | None, call: ast.Call) -> bool:
    """``X.backward(loss)`` where X is a framework object, or Lightning's ``self.manual_backward(loss)``."""
    if method == "manual_backward":
        return True
    if method != "backward" or not (call.args or call.keywords) or not receiver:
        return False
    return bool(_DELEGATE_RECEIVER.search(receiver.rsplit(".", 1)[-1]))


# ---- a device type held in a name ---------------------------------------------------------


def module_strings(facts: AmpFacts) -> dict[str, ast.expr]:
    """Plain names bound exactly once in the module (``DEVICE_TYPE = "cuda"``,
    ``device = torch.device("cuda" if torch.cuda.is_available() else "cpu")``), with the value
    each is bound to: ``constant_device`` reads a device from it."""
    counts: dict[str, int] = {}
    for assignment in facts.assignments:
        counts[assignment.target] = counts.get(assignment.target, 0) + 1
    return {
        a.target: a.value
        for a in facts.assignments
        if counts[a.target] == 1 and "." not in a.target and type(a.value) in (ast.Constant, ast.Call, ast.IfExp)
    }


def constant_device(call: ast.AST, frame: Frame | None, facts: AmpFacts, constants: dict[str, ast.expr]) -> str | None:
    """The device of ``torch.autocast(device_type=D)`` where D names (or is, or is ``str()``
    or ``.type`` of) a device value: a string, ``torch.device(...)`` of one, or the CUDA arm of
    ``... if torch.cuda.is_available() else "cpu"`` (the device the script trains on wherever a
    GPU exists). A name counts when it is bound once, at module level or in the region's own
    function, and no parameter of an enclosing function shadows it."""
    if type(call) is not ast.Call or facts.qualify(call.func) not in AUTOCAST_NAMES:
        return None
    argument = get_arg(call, 0, "device_type")
    if argument is None:
        return None
    expr = argument.value
    if type(expr) is ast.Call and type(expr.func) is ast.Name and expr.func.id == "str" and len(expr.args) == 1:
        expr = expr.args[0]  # str(device)
    elif type(expr) is ast.Attribute and expr.attr == "type":
        expr = expr.value  # device.type
    if type(expr) is not ast.Name:
        return _device_value(expr, facts)
    name = expr.id
    bound = constants.get(name)
    if bound is None:
        return None
    home = next((a.frame for a in facts.assignments if a.target == name), None)
    while frame is not None and frame is not home:
        if frame.parent is None:
            return None  # bound in another function
        arguments = getattr(frame.node, "args", None)
        if arguments is not None and name in {a.arg for a in ast.walk(arguments) if type(a) is ast.arg}:
            return None
        frame = frame.parent
    return _device_value(bound, facts)


def _device_value(expr: ast.expr, facts: AmpFacts) -> str | None:
    """``"cuda:0"`` → cuda; ``torch.device("cuda")``; ``X if torch.cuda.is_available() else Y`` → X's."""
    if type(expr) is ast.Constant and type(expr.value) is str:
        return expr.value.split(":", 1)[0] or None
    if type(expr) is ast.IfExp:
        if any(type(n) is ast.Call and facts.qualify(n.func) == "torch.cuda.is_available" for n in ast.walk(expr.test)):
            chosen = expr.body
            if type(chosen) is ast.Call and type(chosen.func) is ast.Attribute and chosen.func.attr == "get":
                default = get_arg(chosen, 1, "default")  # cfg.get("device", "cuda")
                chosen = default.value if default is not None else chosen
            return "cuda" if _device_value(chosen, facts) == "cuda" else None
        first, second = _device_value(expr.body, facts), _device_value(expr.orelse, facts)
        return first if first == second else None
    if type(expr) is ast.Call and facts.qualify(expr.func) == "torch.device" and expr.args:
        return _device_value(expr.args[0], facts)
    return None
