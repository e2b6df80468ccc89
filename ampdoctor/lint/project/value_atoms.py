"""The vocabulary of abstract values (``values.py``): the atoms a value is made of, how a
value is lowered to its taint, and what the evaluation knows of names, calls and classes.

Every expression a cross-module rule asks about gets an *abstract value*: a set of atoms, each
a short string, joined (set union) wherever a name is bound more than once (branches, loops,
rebinding). An atom says where part of the value may come from:

``S@L:C``  a GradScaler made here (line:column of its construction), or its state;
           ``S@~`` a scaler of unseen origin (a parameter or field used as one), ``S@-`` one
           built with ``enabled=False``
``O``      an optimizer, or its ``state_dict()``
``P3``     the function's fourth parameter (``P*``/``P**``: ``*args``/``**kwargs``)
``C5``     what the function's sixth recorded call returns (a call that may land in the project)
``Fname``  ``self.name``: a field of the method's class (and its bases)
``Gname``  a name bound at module level
``T2``     the tuple display ``tuples[2]`` (its elements are values of their own)
``I1|C5``  element 1 of what ``C5`` is (``a, b = f()``)
``Xname``  ``obj.name`` on an object that is not ``self``: taint only (see below)
``Qi|name`` field ``name`` of what parameter ``i`` is bound to; ``Zname|Class`` of an object of
           the class a parameter's annotation names, ``KClass`` that object itself;
           ``Dname#atom`` field ``name`` of the object another atom is (``self.engine.scaler``)
``A@dtype@state@device`` an autocast context (``A@-@off@-``: a null one)
``H``      ``self`` itself (``vars(self)``, ``self.state_dict()`` of an unseen method)
``M``      ``self.state_dict()`` of a plain ``torch.nn.Module`` subclass: its parameters and
           buffers (``self`` itself where a subclass decides what its state holds)
``U``      anything at all (``**spread`` into a value the analysis cannot split)

A value has two channels. *Taint* asks "may it hold the scaler's state?" and follows a value
everywhere, through any call, attribute or arithmetic; *content* (``O``, the optimizer's state,
which a checkpoint must hold to be one) is positive evidence and passes only through what keeps
it whole: names, containers, ``state_dict()``, copies. A lower-case variant of a symbolic atom
(``p3``, ``c5``, ``fname``, ``gname``, ``s@L:C``) carries the taint channel only: ``optimizer.param_groups``
is not the optimizer's state, but ``scaler._scale`` is still the scaler's.

Nothing here is resolved: ``P``, ``C``, ``F``, ``G``, ``X`` and ``H`` atoms name what the link
step (``flow.py``) resolves against the project, for each call site. The summary is built from
the module's tree in one walk per function, in the lint worker that parsed it.
"""

from __future__ import annotations

import ast
import builtins
import re

from ..held import NULL_CONTEXTS
from ..model import AmpFacts, autocast_region
from ..rules.scaler_queries import scaler_enabled
from ..syntax import children_except, dotted
from ..vocabulary import AUTOCAST_NAMES, GRAD_SCALER_NAMES, STATE_METHODS
from .tokens import CHECKPOINT_WORDS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypedDict

    class CallFlow(TypedDict, total=False):
        """A call that may land in the project: its callee as spelled, where it is, its
        arguments' values (``[position or keyword, atoms]``), whether it spreads ``*``/``**``,
        and what it is worth when it lands nowhere the project shows (``fallback``)."""

        callee: str
        at: list[int]
        args: list[list[Any]]
        star: bool
        fallback: list[str]
        names: dict[str, str]  # string literals spelled like a name, by position or keyword
        recv: list[str]  # the object a method is called on (not the function's own ``self``)
        func: list[str]  # an object called as a function (``self.clip_grad_norm(...)``)

    class FunctionFlow(TypedDict, total=False):
        """One function's values (see the module docstring): its returns, ``torch.save``s, the
        calls that may land in the project, its stores into ``self`` fields, module globals and
        other objects' fields, library calls handed a scaler, and the scalers it trains with."""

        ret: list[str]
        saves: list[list[Any]]
        calls: list[CallFlow]
        stores: dict[str, list[str]]
        gstores: dict[str, list[str]]
        xstores: dict[str, list[str]]
        escapes: list[list[Any]]
        scalers: list[str]
        tuples: list[list[list[str]]]
        npos: int
        dynamic: list[list[Any]]  # [where, field atoms]: a call of a callable a field holds
        named: list[list[Any]]  # [where, "=name" or "P<i>"]: ``getattr(obj, name)(...)``
        withs: list[list[Any]]
        plain: bool  # it steps an optimizer itself without a scaler (``mark_steps``)
        scaled: bool  # it runs a scaled backward (``mark_steps``)
        # As the lint pass's workers send it (``packed_calls.py``): each of ``calls`` pickled
        # (unpickled in its place when read), and each call's callee, whether it has a receiver,
        # and its line.
        packed_calls: list[bytes | CallFlow]
        call_heads: list[tuple[str, bool, int]]


Atoms = frozenset  # of str
EMPTY: frozenset[str] = frozenset()
_UNKNOWN: frozenset[str] = frozenset({"U"})
_OPTIMIZER: frozenset[str] = frozenset({"O"})

# Content channel → taint channel.
_LOWER = {"P": "p", "C": "c", "F": "f", "G": "g", "Q": "q", "Z": "z", "K": "k", "S": "s", "D": "d"}

# Calls that return (a copy of, a view of, a container of) their arguments: both channels pass.
_PASS_THROUGH = frozenset(
    {
        "dict", "list", "tuple", "set", "frozenset", "sorted", "reversed", "iter", "next",
        "copy.copy", "copy.deepcopy", "deepcopy", "collections.OrderedDict", "OrderedDict",
        "dataclasses.asdict", "asdict", "dataclasses.astuple", "astuple", "dataclasses.replace",
        "types.SimpleNamespace", "SimpleNamespace", "collections.ChainMap", "ChainMap",
    }
)  # fmt: skip
# Methods that return their receiver's contents (or part of them).
_PASS_METHODS = frozenset(
    {"items", "values", "keys", "copy", "get", "pop", "popitem", "_asdict", "__getitem__", "setdefault", "to_dict"}
)
# A local's name that speaks of a checkpoint: the object it holds, called as a function, may
# write one (``checkpoint_saver(metric, epoch, model, optimizer)``).
# (spelled in lower case, as the judge's ``CHECKPOINT_TEXT`` asks of the name it follows)
_CHECKPOINTER = re.compile(CHECKPOINT_WORDS.decode())
# ``torch.nn.Module`` methods that return the module itself (``model = Net().to(device)``): the
# object keeps its fields (a tensor's copy on another device is the same value too).
_RETURNS_SELF = frozenset({"to", "cuda", "cpu", "float", "double", "half", "bfloat16", "requires_grad_", "to_empty"})
# Methods that put their arguments into their receiver.
_MUTATORS = frozenset({"update", "setdefault", "append", "extend", "insert", "add", "__setitem__"})
# A GradScaler's methods that return plain numbers or flags (``scaler.get_scale()`` for logging).
_SCALER_PLAIN = frozenset(
    {
        "get_scale", "is_enabled", "get_growth_factor", "get_backoff_factor", "get_growth_interval",
        "scale", "step", "update", "unscale_", "load_state_dict", "set_growth_factor",
        "set_backoff_factor", "set_growth_interval",
    }
)  # fmt: skip
# Builtins whose results carry nothing of their arguments' state (a number, a string, a flag).
_PLAIN_BUILTINS = frozenset(dir(builtins)) - {"dict", "list", "tuple", "set", "frozenset", "sorted", "reversed",
                                              "iter", "next", "vars", "getattr", "super", "map", "filter", "zip",
                                              "enumerate", "max", "min"}  # fmt: skip
# Builtins that return some of their arguments (``getattr(obj, name)``, ``max(a, b)``): taint passes.
_BUILTIN_NAMES = frozenset(dir(builtins)) | {"__file__", "__name__", "__doc__", "__spec__", "__path__"}
_PARTIAL = frozenset({"functools.partial"})
_TAINT_BUILTINS = frozenset({"getattr", "map", "filter", "zip", "enumerate", "max", "min"})
_LIBRARY_ROOTS = ("torch", "numpy", "np", "math", "os", "sys", "json", "time", "logging", "re", "random", "shutil")
_OPTIMIZER_TYPES = frozenset({"torch.optim.Optimizer", "torch.optim.optimizer.Optimizer"})


def lower(atoms: frozenset[str]) -> frozenset[str]:
    """The taint channel of a value: content atoms dropped, symbolic ones made taint-only."""
    if not atoms:
        return atoms
    out = set()
    lowered = _LOWERED
    for atom in atoms:
        low = lowered.get(atom)
        if low is None:
            head = atom[0]
            if head == "O" or head == "A":
                continue
            if len(lowered) >= _LOWERED_MOST:
                lowered.clear()  # a long-lived process (the editor's server) sees ever new atoms
            channel = _LOWER.get(head)
            low = lowered[atom] = channel + atom[1:] if channel is not None else atom
        out.add(low)
    return frozenset(out)


def numbered(head: str, index: int) -> str:
    """The atom ``head`` + ``index`` (``C3``: the fourth call of a function; ``P0``: its first
    parameter), the same string each time it is asked for."""
    made = _NUMBERED.setdefault(head, [])
    while len(made) <= index:
        made.append(f"{head}{len(made)}")
    return made[index]


_NUMBERED: dict[str, list[str]] = {}


# Each atom's taint-only spelling, made once per process: the summaries then hold one string
# per spelling (``c0`` stood 5,741 times in the 31-repository tree's), which pickling sends once
# per module.
_LOWERED: dict[str, str] = {}
_LOWERED_MOST = 1 << 16  # (the 31-repository tree's summaries hold 54,000 distinct strings in all)


class _Params:
    __slots__ = ("index", "first", "vararg", "kwarg", "positional", "classes", "optional")

    def __init__(self, node: ast.FunctionDef | ast.AsyncFunctionDef | None, method: bool) -> None:
        self.index: dict[str, str] = {}
        self.classes: dict[str, str] = {}
        self.optional: set[str] = set()  # the parameters that default to None
        self.first: str | None = None
        self.vararg = self.kwarg = None
        self.positional = 0
        if node is None:
            return
        args = node.args
        self.positional = len(args.posonlyargs) + len(args.args)
        named = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
        for i, name in enumerate(named):
            self.index[name] = numbered("P", i)
        positional = [*args.posonlyargs, *args.args]
        defaults = [*([None] * (len(positional) - len(args.defaults))), *args.defaults, *args.kw_defaults]
        for arg, default in zip((*positional, *args.kwonlyargs), defaults):
            if type(default) is ast.Constant and default.value is None:
                self.optional.add(arg.arg)
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs):
            spelled = _annotated_class(arg.annotation)
            if spelled is not None:
                self.classes[arg.arg] = spelled
        if args.vararg is not None:
            self.vararg = args.vararg.arg
            self.index[self.vararg] = "P*"
        if args.kwarg is not None:
            self.kwarg = args.kwarg.arg
            self.index[self.kwarg] = "P**"
        if method and named:
            self.first = named[0]


def _module_level_names(module: ast.Module) -> set[str]:
    """The names stored anywhere in the module's statements other than its functions and classes
    (those of functions defined inside an ``if`` too). Walked on ``children_except`` rather than
    ``ast.walk``: on the 623 modules the 31-repository tree summarizes, 0.05 -> 0.024 s."""
    names: set[str] = set()
    stack: list[ast.AST] = [stmt for stmt in module.body if type(stmt) not in _DEFINITIONS]
    while stack:
        node = stack.pop()
        for child in children_except(node, _CONSTANTS):
            if type(child) is ast.Name:
                if type(child.ctx) is ast.Store:
                    names.add(child.id)
            else:
                stack.append(child)
    return names


_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_CONSTANTS = (ast.Constant,)


def _scaler_constructions(facts: AmpFacts) -> dict[str, str]:
    """Spelled name → the atom of the GradScaler bound to it in this module (its first one)."""
    made: dict[str, str] = {}
    if "GradScaler" not in facts.source:
        # Every constructor ``_scaler_atom`` knows is spelled ``...GradScaler`` (on the 623 modules
        # the 31-repository tree summarizes, asking of every assignment took 0.045 s).
        return made
    for assignment in facts.assignments:
        value = assignment.value
        if type(value) is ast.IfExp:
            value = next((arm for arm in (value.body, value.orelse) if type(arm) is ast.Call), value)
        if type(value) is ast.Call and assignment.target not in made:
            atom = _scaler_atom(facts, value)
            if atom is not None:
                made[assignment.target] = atom
    return made


def _scaler_atom(facts: AmpFacts, call: ast.Call) -> str | None:
    qname = facts.qualify(call.func)
    if qname not in GRAD_SCALER_NAMES:
        return None
    if scaler_enabled(call, qname or "") is False:
        return "S@-"
    return f"S@{call.lineno}:{call.col_offset + 1}"


_NOT_CLASSES = frozenset({"Any", "Optional", "Union", "Callable", "Dict", "List", "Tuple", "Type", "Sequence",
                          "Mapping", "Iterable", "Iterator", "Tensor", "Module", "Path", "Namespace", "DictConfig"})  # fmt: skip


def _annotated_class(annotation: ast.expr | None) -> str | None:
    """The class a parameter's annotation names (``Trainer``, ``"Trainer"``, ``Optional[Trainer]``,
    ``Trainer | None``), when it names one that may be the project's."""
    if annotation is None:
        return None
    if type(annotation) is ast.Constant and type(annotation.value) is str:
        text = annotation.value.strip()
        return (
            text
            if text.replace(".", "").replace("_", "").isalnum()
            and text.rsplit(".", 1)[-1][:1].isupper()
            and text.rsplit(".", 1)[-1] not in _NOT_CLASSES
            else None
        )
    if type(annotation) is ast.Subscript and dotted(annotation.value) in ("Optional", "typing.Optional"):
        return _annotated_class(annotation.slice)
    if type(annotation) is ast.BinOp and type(annotation.op) is ast.BitOr:
        left, right = annotation.left, annotation.right
        if type(right) is ast.Constant and right.value is None:
            return _annotated_class(left)
        if type(left) is ast.Constant and left.value is None:
            return _annotated_class(right)
        return None
    spelled = dotted(annotation)
    if spelled is None or spelled.startswith(("torch.", "nn.", "np.", "typing.")):
        return None
    last = spelled.rsplit(".", 1)[-1]
    return spelled if last[:1].isupper() and last not in _NOT_CLASSES and not last.isupper() else None


def _autocast_atom(facts: AmpFacts, call: ast.Call, qname: str | None) -> str | None:
    """``A@dtype@state`` for a call that makes an autocast context (or a factory of one, bound
    by ``partial``), ``A@-@off`` for a null context: what a ``with`` of it opens."""
    if qname in NULL_CONTEXTS:
        return "A@-@off@-"
    if qname in _PARTIAL and call.args and facts.qualify(call.args[0]) in AUTOCAST_NAMES:
        inner = ast.Call(func=call.args[0], args=list(call.args[1:]), keywords=list(call.keywords))
        region = autocast_region(inner, facts.imports)
    elif qname in AUTOCAST_NAMES:
        region = autocast_region(call, facts.imports)
    else:
        return None
    if region is None:
        return None
    return f"A@{region.effective_dtype or '-'}@{region.enabled.value}@{region.device or '-'}"


def record_class(facts: AmpFacts, node: ast.ClassDef) -> bool:
    """A ``@dataclass`` (with no base class) or a ``NamedTuple`` class: an object of it holds
    what it is built from, and a callee handed one can fill in its fields."""
    bases = [facts.qualify(b) or dotted(b) for b in node.bases]
    if len(bases) == 1 and bases[0] in ("NamedTuple", "typing.NamedTuple", "typing_extensions.NamedTuple"):
        return True
    return not node.bases and any(
        (facts.qualify(d.func if isinstance(d, ast.Call) else d) or dotted(d.func if isinstance(d, ast.Call) else d))
        in ("dataclass", "dataclasses.dataclass")
        for d in node.decorator_list
    )


def _holds_containers(bound: list[tuple[str, object, ast.expr]], records: set[str]) -> bool:
    """Whether a name is bound to a mapping, a list or set, or an object of one of the module's
    dataclasses or named tuples (``records``): something a callee can put state into. (Not any
    object: a model handed to ``train(model, scaler)`` does not keep the scaler.)"""
    for kind, _detail, expr in bound:
        if kind != "=":
            continue
        if type(expr) in (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp):
            return True
        if type(expr) is ast.Call:
            spelled = dotted(expr.func) or ""
            last = spelled.rsplit(".", 1)[-1]
            if last in ("dict", "list", "OrderedDict", "defaultdict", "asdict") or last in records:
                return True
    return False


def _holds_scaler(value: frozenset[str]) -> bool:
    return any(atom.startswith("S@") or atom == "H" for atom in value)


def _is_static(node: ast.AST) -> bool:
    return any(dotted(d) in ("staticmethod",) for d in getattr(node, "decorator_list", ()))


def _root_name(expr: ast.expr) -> str | None:
    while type(expr) in (ast.Attribute, ast.Subscript):
        expr = expr.value  # type: ignore[attr-defined]
    return expr.id if type(expr) is ast.Name else None


# ---- receivers -------------------------------------------------------------------------------
# ``walk``: the ``values._FunctionWalk`` asking (its ``env`` and ``params``).


def _is_local_object(owner: ast.expr, walk: Any) -> bool:
    """Whether a method's receiver is a local, a parameter or ``self``-rooted (its qualified
    name through the imports is then a coincidence of spelling, not a library's function)."""
    root = _root_name(owner)
    return root is not None and (root in walk.env or root in walk.params.index)


def _is_project_receiver(owner: ast.expr, value: frozenset[str], walk: Any, method: str) -> bool:
    """A method called on ``self`` (or one of its fields), or on an object made by a call that
    may build a project class or bound at module level: it may be a method of a project class.
    On a parameter: a method of one of its fields (``runner.engine.backward_loss(...)``, whose
    class the link step looks for), or one that may write a checkpoint (``checkpointer.save``,
    whose class is what the function's callers pass)."""
    root = _root_name(owner)
    if root is None:
        return False
    if root == walk.params.first:
        return True
    if root in walk.params.index and (type(owner) is ast.Attribute or _CHECKPOINT_METHOD.search(method)):
        return True
    return any(atom[0] == "C" or atom[0] == "G" for atom in value)


_CHECKPOINT_METHOD = re.compile(r"save|ckpt|checkpoint|snapshot|persist|dump")


def named_method(func: Any, params: dict[str, str]) -> str | None:
    """The method name of ``getattr(obj, name)``: ``=on_batch_end`` for a literal name, the
    parameter's atom (``P1``, from ``params``: name to atom) for a name the function is handed;
    None for any other callee."""
    if not (
        type(func) is ast.Call
        and type(func.func) is ast.Name
        and func.func.id == "getattr"
        and len(func.args) == 2
        and not func.keywords
    ):
        return None
    name = func.args[1]
    if type(name) is ast.Constant and type(name.value) is str and name.value.isidentifier():
        return "=" + name.value
    if type(name) is ast.Name:
        return params.get(name.id)
    return None


def identifier_arguments(call: ast.Call) -> dict[str, str]:
    """The arguments of ``call`` that are string literals spelled like a name, by position
    (``"0"``) or keyword: a callee may dispatch on one (``getattr(callback, event)(self)``)."""
    found = {}
    for position, arg in enumerate(call.args):
        if type(arg) is ast.Starred:
            break
        if type(arg) is ast.Constant and type(arg.value) is str and arg.value.isidentifier():
            found[str(position)] = arg.value
    for keyword in call.keywords:
        value = keyword.value
        if keyword.arg is not None and type(value) is ast.Constant and type(value.value) is str:
            if value.value.isidentifier():
                found[keyword.arg] = value.value
    return found


# What ``torch.nn.Module`` is called where a class names it as its base.
_MODULE_BASES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})


def plain_module(facts: AmpFacts, node: ast.ClassDef) -> bool:
    """Whether the class derives from ``torch.nn.Module`` alone and keeps its ``state_dict``
    (no ``state_dict`` or ``get_extra_state`` of its own, no mixin that may bring one): its
    ``state_dict()`` holds only its parameters and buffers."""
    if len(node.bases) != 1 or node.keywords or facts.qualify(node.bases[0]) not in _MODULE_BASES:
        return False
    text = facts.text(node)
    if "state_dict_hook" in text or "state_dict_pre_hook" in text:
        return False  # a hook may put anything into it
    return not any(
        isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in STATE_METHODS for item in node.body
    )
