"""Summary parts for checkpoints that are not written as a plain mapping (AMP211 across
functions and modules):

* *record classes*: a ``@dataclass`` or ``NamedTuple`` class whose fields a checkpoint is built
  from (``Snapshot(model.state_dict(), optimizer.state_dict(), epoch)``), with each field's name
  and whether it has a default;
* *snapshot saves*: a ``torch.save`` of such an object (as it is, through ``asdict(...)`` or
  ``._asdict()``, or through a name bound once to it) in code that trains with a scaler, with
  what each argument of the construction holds;
* *collectors*: a function that returns the ``state_dict()`` of an object's attributes that are
  ``torch.optim.Optimizer`` instances and nothing else (``vars(self)`` filtered by
  ``isinstance``), and the calls to such a function that a checkpoint mapping holds;
* *scaler attributes*: a class that builds a GradScaler into ``self.x`` and scales or steps
  with it (an optimizer wrapper).

All plain data, as the rest of the summary (see ``summary.py``).
"""

from __future__ import annotations

import ast
import re

from ..model import AmpFacts, CallSite, Frame
from ..passes import is_optimizer
from ..syntax import call_args, dotted, iter_nodes, span
from ..vocabulary import GRAD_SCALER_NAMES

_SCALER_TEXT = re.compile(r"scaler", re.IGNORECASE)
_BOOKKEEPING = re.compile(
    r"(^|_)(epoch|epochs|step|steps|iter|iters|iteration|global_step|loss|best\w*|acc\w*|metric\w*|score|lr|"
    r"args|config|cfg|hparams|path|name|arch|version|seed)$",
    re.IGNORECASE,
)
_DATACLASS = frozenset({"dataclass", "dataclasses.dataclass"})
_NAMED_TUPLE = frozenset({"NamedTuple", "typing.NamedTuple", "typing_extensions.NamedTuple"})
_ASDICT = frozenset({"asdict", "dataclasses.asdict"})
_OPTIMIZER_BASE = "torch.optim.Optimizer"
_COPY = frozenset({"deepcopy", "copy.deepcopy", "copy", "copy.copy"})


# ---------------------------------------------------------------------------------------
# Record classes
# ---------------------------------------------------------------------------------------


def record_class(facts: AmpFacts, node: ast.ClassDef) -> dict | None:
    """``{"fields": [[name, has_default], ...], "scaler": bool}`` for a dataclass (with no base
    class) or a ``NamedTuple`` class; None for any other class. ``has_default`` is ``"const"``
    for a literal default and ``"other"`` for anything else (``field(default_factory=...)``)."""
    qualified = [facts.qualify(b) or dotted(b) for b in node.bases]
    decorated = any(
        (facts.qualify(d.func if isinstance(d, ast.Call) else d) or dotted(d.func if isinstance(d, ast.Call) else d))
        in _DATACLASS
        for d in node.decorator_list
    )
    named_tuple = len(qualified) == 1 and qualified[0] in _NAMED_TUPLE
    if not (named_tuple or (decorated and not node.bases)) or node.keywords:
        return None
    fields = []
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if "ClassVar" in facts.text(stmt.annotation) or "InitVar" in facts.text(stmt.annotation):
                return None
            default = None
            if stmt.value is not None:
                default = "const" if isinstance(stmt.value, ast.Constant) else "other"
            fields.append([stmt.target.id, default])
    if not fields:
        return None
    return {"fields": fields, "scaler": bool(_SCALER_TEXT.search(facts.text(node)))}


def scaler_attribute(facts: AmpFacts, class_name: str) -> dict | None:
    """Where a method of ``class_name`` builds a GradScaler into ``self.x``, when the class also
    scales or steps with ``self.x``: ``{"name": "self.x", "at": position}``."""
    for assignment in facts.assignments:
        if assignment.frame.class_name != class_name or not assignment.target.startswith("self."):
            continue
        value = assignment.value
        if type(value) is not ast.Call or facts.qualify(value.func) not in GRAD_SCALER_NAMES:
            continue
        used = any(
            site.receiver == assignment.target and site.method in ("scale", "step")
            for frame in facts.frames
            if frame.class_name == class_name
            for site in frame.calls
        )
        if used:
            return {"name": assignment.target, "at": span(value)}
    return None


# ---------------------------------------------------------------------------------------
# Snapshot saves
# ---------------------------------------------------------------------------------------


def value_kind(facts: AmpFacts, value: ast.expr) -> str:
    """What one value of a checkpoint holds: ``"scaler"`` (its text mentions a scaler),
    ``"optim"`` (an optimizer's ``state_dict()``), ``"plain"`` (a literal, bookkeeping, another
    object's ``state_dict()``) or ``"opaque"`` (anything that may carry state built elsewhere)."""
    if _SCALER_TEXT.search(facts.text(value)):
        return "scaler"
    if isinstance(value, ast.Call) and (facts.qualify(value.func) or dotted(value.func)) in _COPY and value.args:
        value = value.args[0]
    if isinstance(value, ast.Constant):
        return "plain"
    if isinstance(value, (ast.Name, ast.Attribute)):
        return "plain" if _BOOKKEEPING.search((dotted(value) or "").rsplit(".", 1)[-1]) else "opaque"
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and not value.args:
        receiver = dotted(value.func.value)
        if value.func.attr == "state_dict" and receiver:
            return "optim" if is_optimizer(receiver, facts) or "optim" in receiver.lower() else "plain"
        if value.func.attr == "item":
            return "plain"
    if isinstance(value, (ast.BinOp, ast.UnaryOp, ast.JoinedStr)):
        leaves = [n for n in iter_nodes(value) if isinstance(n, (ast.Name, ast.Attribute, ast.Call))]
        return (
            "plain"
            if all(not isinstance(n, ast.Call) and value_kind(facts, n) == "plain" for n in leaves)
            else "opaque"
        )
    return "opaque"


def snapshot_saves(facts: AmpFacts, by_target, reach) -> list[dict]:
    """Every ``torch.save`` of a record-class object built in the saving frame, where the frame
    trains with a scaler (``reach(frame)``: where that scaler is made, or None)."""
    found = []
    for save in facts.calls_to("torch.save"):
        arg = save.arg(0, "obj")
        if arg is None or arg.star:
            continue
        built = _construction(facts, save, arg.value, by_target)
        if built is None:
            continue
        at = reach(save.frame)
        if at is None:
            continue
        built.update({"at": span(save.node), "reach": at})
        found.append(built)
    return found


def _construction(facts: AmpFacts, save: CallSite, expr: ast.expr, by_target, named: bool = False) -> dict | None:
    if isinstance(expr, ast.Call):
        func = facts.qualify(expr.func) or dotted(expr.func) or ""
        if func in _ASDICT and len(expr.args) == 1 and not expr.keywords:
            return _construction(facts, save, expr.args[0], by_target, named)
        if isinstance(expr.func, ast.Attribute) and expr.func.attr == "_asdict" and not expr.args:
            return _construction(facts, save, expr.func.value, by_target, named)
        last = func.rsplit(".", 1)[-1]
        if func.startswith("torch.") or not last[:1].isupper():
            return None
        args: list[dict] = []
        for index, item in enumerate(call_args(expr)):
            if item.star:
                return None
            args.append({"kw": item.keyword} if item.keyword else {"pos": index})
            args[-1]["kind"] = value_kind(facts, item.value)
        return {"class": dotted(expr.func), "args": args}
    if named or type(expr) is not ast.Name:
        return None
    name = expr.id
    frame = save.frame
    bound = by_target(frame, name)
    if len(bound) != 1 or bound[0].order >= save.order:
        return None
    if not _untouched(facts, frame, name, bound[0].order, save):
        return None
    return _construction(facts, save, bound[0].value, by_target, named=True)


def _untouched(facts: AmpFacts, frame: Frame, name: str, built: int, save: CallSite) -> bool:
    """No field of ``name`` set, no method of it called (but ``_asdict``), and it is handed to
    no other call, between its binding and the save."""
    prefix = name + "."
    if any(a.frame is frame and a.target.startswith(prefix) for a in facts.assignments):
        return False
    for site in frame.calls:
        if site is save or site.order <= built:
            continue
        if site.receiver == name and site.method != "_asdict":
            return False
        func = facts.qualify(site.node.func) or dotted(site.node.func) or ""
        if func not in _ASDICT and any(dotted(a.value) == name for a in call_args(site.node)):
            return False
    return True


# ---------------------------------------------------------------------------------------
# Collectors of optimizer states
# ---------------------------------------------------------------------------------------


def collector(
    facts: AmpFacts, function: ast.FunctionDef | ast.AsyncFunctionDef, bounds: tuple[int, int] | None = None
) -> int | None:
    """The index of the parameter whose attributes ``function`` collects, when its one
    ``return`` is ``{k: v.state_dict() for k, v in vars(p).items() if isinstance(v, Optimizer)}``
    (or the list of them over ``.values()``, or over ``p.__dict__``) with ``torch.optim.Optimizer``
    as the only type admitted."""
    if bounds is None and ("isinstance" not in facts.source or "state_dict" not in facts.source):
        return None  # the shape below names both (a caller that gives bounds has looked)
    start, end = bounds or facts.lines.bounds(function) or (0, 0)  # the function's text, where it lies
    if facts.source.find("isinstance", start, end) < 0 or facts.source.find("state_dict", start, end) < 0:
        return None
    returns = [n for n in iter_nodes(function) if isinstance(n, ast.Return)]
    if len(returns) != 1 or not isinstance(returns[0].value, (ast.DictComp, ast.ListComp)):
        return None
    comp = returns[0].value
    if len(comp.generators) != 1:
        return None
    generator = comp.generators[0]
    item = comp.value if isinstance(comp, ast.DictComp) else comp.elt
    target = generator.target
    if isinstance(target, ast.Tuple) and len(target.elts) == 2:
        target = target.elts[1]
    if not isinstance(target, ast.Name) or not _is_state_dict_of(item, target.id):
        return None
    owner = _attributes_of(generator.iter)
    params = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    if owner not in params:
        return None
    if not any(_admits_only_optimizers(facts, test, target.id) for test in generator.ifs):
        return None
    return params.index(owner)


def _is_state_dict_of(expr: ast.expr, name: str) -> bool:
    return (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr == "state_dict"
        and dotted(expr.func.value) == name
        and not expr.args
    )


def _attributes_of(expr: ast.expr) -> str | None:
    """``p`` for ``vars(p).items()``, ``vars(p).values()``, ``p.__dict__.items()``."""
    if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and not expr.args):
        return None
    if expr.func.attr not in ("items", "values"):
        return None
    inner = expr.func.value
    if isinstance(inner, ast.Call) and dotted(inner.func) == "vars" and len(inner.args) == 1:
        return dotted(inner.args[0])
    if isinstance(inner, ast.Attribute) and inner.attr == "__dict__":
        return dotted(inner.value)
    return None


def _admits_only_optimizers(facts: AmpFacts, test: ast.expr, name: str) -> bool:
    if not (isinstance(test, ast.Call) and dotted(test.func) == "isinstance" and len(test.args) == 2):
        return False
    if dotted(test.args[0]) != name:
        return False
    kinds = test.args[1].elts if isinstance(test.args[1], ast.Tuple) else [test.args[1]]
    return all(facts.qualify(kind) == _OPTIMIZER_BASE for kind in kinds)


def collected(facts: AmpFacts, frame: Frame, mapping: ast.expr, order: int, by_target) -> dict | None:
    """The calls a checkpoint mapping takes optimizer states from that may be collectors
    (``self.optimizer_states()``, ``optimizer_states(self)``, or a name bound once to such a
    call), and what the mapping holds when their values are counted as the optimizers' states:
    ``{"calls": [...], "kinds": [...], "states": [receivers of state_dict() in the frame]}``."""
    if not isinstance(mapping, ast.Dict) or any(key is None for key in mapping.keys):
        return None
    calls = []
    kinds = []
    for value in mapping.values:
        call = value
        if type(value) is ast.Name:
            bound = by_target(frame, value.id)
            if len(bound) == 1 and bound[0].order < order:
                call = bound[0].value
        spelled = _collect_call(call)
        if spelled is not None:
            calls.append(spelled)
            kinds.append("collected")
        else:
            kinds.append(value_kind(facts, value))
    if not calls:
        return None
    states = sorted({s.receiver for s in frame.calls if s.method == "state_dict" and s.receiver})
    return {"calls": calls, "kinds": kinds, "states": states}


def _collect_call(expr: ast.expr) -> dict | None:
    """``self.m()`` or ``f(self)``: a call that may collect ``self``'s optimizers."""
    if not isinstance(expr, ast.Call) or expr.keywords:
        return None
    spelled = dotted(expr.func)
    if spelled is None:
        return None
    if not expr.args and spelled.startswith("self.") and spelled.count(".") == 1:
        return {"callee": spelled, "args": []}
    if len(expr.args) == 1 and dotted(expr.args[0]) == "self" and "." not in spelled:
        return {"callee": spelled, "args": [{"pos": 0, "name": "self"}]}
    return None


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
