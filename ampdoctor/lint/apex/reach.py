"""Where the GradScaler that replaces ``amp.initialize`` lives, and whether every user reaches it.

apex keeps its loss scaler in a hidden global: ``amp.scale_loss`` and ``amp.state_dict()`` work
from any function. A ``torch.amp.GradScaler`` is an ordinary object, so the migration must put
it where every function that scales a loss, steps an amp optimizer or saves the scaler's state
can reach it, without a ``global`` statement inside a function:

- ``amp.initialize`` at module level: a module global, read (never rebound) by the functions;
- in a method: ``self.scaler``, and every user is a method of the same class;
- in a plain function: a local; each other function that uses it is a module-level function
  that function alone calls, after the ``amp.initialize``, and it receives the scaler as a new
  keyword-only parameter (``scaler=scaler`` at each call).

And every optimizer step must become ``scaler.step(...)``: a step of an amp optimizer reached
under another spelling (``self.GAN.D_opt.step()`` for ``self.D_opt``), or no step in the module
at all, would step gradients still multiplied by the loss scale; and a module that already trains with
a torch GradScaler beside apex (a trainer with both paths) would get a second one. Each is a
blocker: the module is left as it is, and the finding says why.
"""

from __future__ import annotations

import ast

from ..syntax import FUNCTION_TYPES, parameter_names

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from ..model import AmpFacts, CallSite, Frame

_USES = frozenset({"apex.amp.scale_loss", "apex.amp.state_dict", "apex.amp.load_state_dict"})
_SCALER_METHODS = ("scale", "unscale_", "step", "update")


class Reach:
    """``blocker``: why the scaler cannot be placed (None when it can); ``threads``: the
    module-level functions that receive it as a parameter; ``method``: it is ``self.scaler``."""

    def __init__(self, blocker: str | None = None, threads: tuple[str, ...] = (), method: bool = False) -> None:
        self.blocker = blocker
        self.threads = threads
        self.method = method


def scaler_reach(facts: AmpFacts) -> Reach:
    inits = [s for s in facts.calls if s.qname == "apex.amp.initialize"]
    if not inits:
        return Reach()
    homes = {id(_function(s.frame)) for s in inits}
    if len(homes) > 1:
        return Reach("amp.initialize is called in several functions; one GradScaler cannot replace them all")
    home = _function(inits[0].frame)
    native = _native_scaler(facts)
    if native is not None:
        return Reach(native)
    optimizers = _optimizer_spellings(inits)
    steps, blocker = _steps(facts, optimizers)
    if blocker is not None:
        return Reach(blocker)
    uses = [s for s in facts.calls if s.qname in _USES]
    if not steps and any(s.qname == "apex.amp.scale_loss" for s in uses):
        return Reach(
            "no optimizer that amp.initialize returned is stepped in this module: the scaler's step "
            "would be missing where it is (scaled gradients would be stepped): migrate by hand"
        )
    users = [*uses, *steps]
    if home.node is facts.module:
        return Reach()
    if home.class_name is not None and _is_method(home.node):
        for site in users:
            owner = _function(site.frame)
            while owner.class_name is None and owner.parent is not None:
                owner = owner.parent  # a function nested in a method sees its ``self``
            if owner.class_name != home.class_name or not _is_method(owner.node):
                return Reach(_outside(site, f"the class `{home.class_name}` whose method calls amp.initialize"))
        return Reach(method=True)
    return _threaded(facts, home, inits, users)


def _threaded(facts: AmpFacts, home: Frame, inits: list[CallSite], users: list[CallSite]) -> Reach:
    """The scaler is a local of ``home``: each other user must be a module-level function that
    only ``home`` calls, by name, after the ``amp.initialize``."""
    # (The model types a frame's node as ``ast.AST``: ``home``'s node is a function; a user's
    # frame may be the module's, which has no name.)
    home_name = getattr(home.node, "name", "?")
    start = min(s.statement.lineno for s in inits)
    threads: list[str] = []
    for site in users:
        owner = _function(site.frame)
        name = getattr(owner.node, "name", "?")
        if owner is home or name in threads:
            continue
        module_level = owner.parent is not None and owner.parent.parent is None and owner.class_name is None
        if not module_level:
            return Reach(_outside(site, f"`{home_name}`, which calls amp.initialize"))
        if {"scaler", "grad_scaler"} & set(parameter_names(owner.node)):
            return Reach(_outside(site, f"`{home_name}` (`{name}` already has a parameter for a scaler)"))
        calls = [s for s in facts.calls_named(name) if type(s.node.func) is ast.Name]
        refs = [n for n in ast.walk(facts.module) if type(n) is ast.Name and n.id == name]
        if not calls or len(refs) != len(calls):
            return Reach(_outside(site, f"`{home_name}`: `{name}` is used other than called by name"))
        for call in calls:
            if _function(call.frame) is not home or call.statement.lineno <= start:
                return Reach(_outside(site, f"`{home_name}`: `{name}` is called where the scaler does not exist yet"))
        threads.append(name)
    return Reach(threads=tuple(threads))


def _native_scaler(facts: AmpFacts) -> str | None:
    """A module that already trains with a torch GradScaler beside apex (a trainer with both
    paths): a second scaler, or one under the same name, would break the native path."""
    from ..vocabulary import EventKind

    found = [(e.scaler or "a GradScaler", e.call.node.lineno) for e in facts.events(EventKind.SCALER_NEW)]
    # A scaler the module does not build itself (a base class's ``self.scaler``), known by use.
    found += [
        (site.receiver, site.node.lineno)
        for site in facts.calls
        if site.method in _SCALER_METHODS
        and site.receiver is not None
        and "scaler" in site.receiver.rsplit(".", 1)[-1].lower()
    ]
    if not found:
        return None
    name, line = min(found, key=lambda item: item[1])
    return (
        f"the module already trains with a torch.amp GradScaler (`{name}`, line {line}) beside apex: "
        "the apex path belongs on that scaler; merge it by hand"
    )


def _outside(site: CallSite, where: str) -> str:
    what = site.qname[len("apex.") :] if site.qname else f"{site.receiver}.step()"
    return (
        f"`{what}` on line {site.node.lineno} runs outside {where}: the GradScaler would not reach it "
        "there without a global; pass a GradScaler to it by hand"
    )


def _steps(facts: AmpFacts, optimizers: set[str]) -> tuple[list[CallSite], str | None]:
    """The ``o.step()`` calls of amp's optimizers; a blocker when one is spelled otherwise."""
    last = {spelling.rsplit(".", 1)[-1]: spelling for spelling in optimizers}
    found = []
    for site in facts.calls:
        if site.method != "step" or site.receiver is None or site.node.args or site.node.keywords:
            continue
        receiver = site.receiver
        base = receiver.split("[", 1)[0]
        if receiver in optimizers or base in optimizers:
            found.append(site)
        elif "." in base and base.rsplit(".", 1)[-1] in last:
            return [], (
                f"`{receiver}.step()` on line {site.node.lineno} steps an optimizer that amp.initialize "
                f"returned as `{last[base.rsplit('.', 1)[-1]]}`, under another name: the migration cannot "
                "turn it into `scaler.step(...)`, and stepped as it is its gradients would still carry the "
                "loss scale"
            )
    return found, None


def _optimizer_spellings(inits: list[CallSite]) -> set[str]:
    spellings: set[str] = set()
    for site in inits:
        node = site.node
        positional = [a for a in node.args if not isinstance(a, ast.Starred)]
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        given = positional[1] if len(positional) > 1 else keywords.get("optimizers")
        if given is not None:
            spellings |= {ast.unparse(e) for e in _items(given)}
            statement = site.statement
            if type(statement) is ast.Assign and len(statement.targets) == 1:
                parts = _items(statement.targets[0])
                if len(parts) == 2:
                    spellings |= {ast.unparse(e) for e in _items(parts[1])}
    return spellings


def _items(node: ast.expr) -> list[ast.expr]:
    return list(node.elts) if isinstance(node, (ast.List, ast.Tuple)) else [node]


def _function(frame: Frame) -> Frame:
    """The frame of the function (or module) a call's frame belongs to, through lambdas and
    comprehensions: a nested ``def`` is its own function."""
    while frame.parent is not None and not isinstance(frame.node, FUNCTION_TYPES):
        frame = frame.parent
    return frame


def _is_method(node: ast.AST) -> bool:
    names = parameter_names(node)
    return bool(names) and names[0] == "self"
