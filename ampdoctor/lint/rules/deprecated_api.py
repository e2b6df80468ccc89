"""AMP4xx: deprecated and migrated AMP APIs.

AMP401 covers ``torch.cuda.amp`` / ``torch.cpu.amp``: deprecated since torch 2.4 in favour of
``torch.amp`` with an explicit device. The data below is the whole migration table; the fix
rewrites the import or the attribute chain and adds the device argument at every call, so the
file keeps working with the same behaviour:

* ``autocast(enabled, dtype, cache_enabled)`` becomes ``autocast(device, dtype=, enabled=, ...)``:
  the positional order differs, so positional arguments are turned into keywords;
* ``GradScaler(init_scale, ...)`` becomes ``GradScaler(device, init_scale, ...)``;
* ``custom_fwd`` / ``custom_bwd`` take ``device_type=`` as a keyword.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from ...records import Value
from ..anchors import Anchors
from ..fixes import SourceLines
from ..model import AmpFacts, ImportRef
from ..syntax import children, dotted, iter_nodes
from . import FixPlan, LintRule, NodeEdit, Report, register
from .version_gates import Gated

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any

_DEPRECATED_MODULES = {"torch.cuda.amp": "cuda", "torch.cpu.amp": "cpu"}
_KINDS = {"autocast": "autocast", "GradScaler": "scaler", "custom_fwd": "custom", "custom_bwd": "custom"}
_AUTOCAST_POSITIONAL = ("enabled", "dtype", "cache_enabled")


class _Deprecated(Value):
    __slots__ = ("device", "name")
    device: str
    name: str

    def __init__(self, device: str, name: str) -> None:
        self._set(device, name)  # name: autocast, GradScaler, custom_fwd, custom_bwd

    @property
    def kind(self) -> str:
        return _KINDS[self.name]


def _deprecated(qname: str | None) -> _Deprecated | None:
    if not qname:
        return None
    module, _, name = qname.rpartition(".")
    device = _DEPRECATED_MODULES.get(module)
    if device is None or name not in _KINDS:
        return None
    return _Deprecated(device, name)


# ---- the device argument at a call -------------------------------------------------------


def _call_edits(lines: SourceLines, call: ast.Call, target: _Deprecated) -> list[NodeEdit] | None:
    """Edits that add the device argument to one call (None when it cannot be done safely)."""
    from ..textpos import argument_starts, insert_at  # only for a deprecated call: most files have none

    if any(type(a) is ast.Starred for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    found = argument_starts(lines, call)
    if found is None:
        return None
    inside, starts = found
    device = f'"{target.device}"'
    if target.kind == "custom":
        if not starts:
            return [insert_at(inside, f"device_type={device}")]
        if call.args:
            return None  # a keyword cannot go before a positional argument
        return [insert_at(starts[0], f"device_type={device}, ")]
    if not starts:
        return [insert_at(inside, device)]
    if target.kind != "autocast" or not call.args:
        return [insert_at(starts[0], f"{device}, ")]
    if len(call.args) > len(_AUTOCAST_POSITIONAL):
        return None
    # One insertion per point: the device goes in front of the first keyword-to-be.
    edits = [insert_at(start, f"{name}=") for start, name in zip(starts, _AUTOCAST_POSITIONAL[: len(call.args)])]
    edits[0] = insert_at(starts[0], f"{device}, {_AUTOCAST_POSITIONAL[0]}=")
    return edits


# ---- uses of imported names ---------------------------------------------------------------

# Names that a statement binds as plain strings in ast (they are not Name nodes): rebinding an
# imported name this way makes its uses unsafe to rewrite.
# (Match patterns and type parameters exist only on newer Pythons.)
_BINDING_FIELDS = {
    getattr(ast, kind): fields
    for kind, fields in (
        ("FunctionDef", ("name",)),
        ("AsyncFunctionDef", ("name",)),
        ("ClassDef", ("name",)),
        ("arg", ("arg",)),
        ("ExceptHandler", ("name",)),
        ("Global", ("names",)),
        ("Nonlocal", ("names",)),
        ("MatchAs", ("name",)),
        ("MatchStar", ("name",)),
        ("MatchMapping", ("rest",)),
        ("TypeVar", ("name",)),
        ("ParamSpec", ("name",)),
        ("TypeVarTuple", ("name",)),
    )
    if hasattr(ast, kind)
}


def _bound_names(node: ast.AST) -> Iterable[str]:
    for field in _BINDING_FIELDS.get(type(node), ()):
        value = getattr(node, field, None)
        if isinstance(value, str):
            yield value
        elif isinstance(value, list):
            yield from value


class _Uses:
    """Uses of some local names: as a callee, as a decorator, or anything else."""

    def __init__(self, names: set[str], module_aliases: set[str]) -> None:
        self.names = names
        self.module_aliases = module_aliases
        self.calls: list[tuple[ast.Call, str]] = []  # (call, attribute name used)
        self.decorators: list[tuple[ast.expr, str]] = []
        self.handled: set[int] = set()
        self.other = 0

    def scan(self, facts: AmpFacts, scope: ast.AST | None = None) -> None:
        """The uses in the module, or in the body of the function ``scope`` (its decorators,
        defaults and annotations are evaluated outside it)."""
        # Parents come before their children, so a handled callee is marked before it is seen.
        watched = self.names | self.module_aliases
        roots = None if scope is None or type(scope) is ast.Module else getattr(scope, "body", None)
        for node in _mentioning(facts, watched, roots):
            kind = type(node)
            if type(node) is ast.Call:
                self._call(node)
            elif type(node) is ast.Attribute:
                self._attribute(node)
            elif type(node) is ast.Name:
                self._name(node)
            elif kind in _BINDING_FIELDS:
                self.other += sum(1 for name in _bound_names(node) if name in watched)
            if type(node) is ast.FunctionDef or type(node) is ast.AsyncFunctionDef or type(node) is ast.ClassDef:
                self._decorators(node.decorator_list)

    def _target(self, expr: ast.expr) -> str | None:
        if type(expr) is ast.Name and expr.id in self.names:
            return expr.id
        if type(expr) is ast.Attribute and type(expr.value) is ast.Name and expr.value.id in self.module_aliases:
            return expr.attr
        return None

    def _call(self, node: ast.Call) -> None:
        name = self._target(node.func)
        if name is not None:
            self.calls.append((node, name))
            self._mark(node.func)

    def _decorators(self, decorators: list[ast.expr]) -> None:
        for expr in decorators:
            name = self._target(expr)
            if name is not None:
                self.decorators.append((expr, name))
                self._mark(expr)

    def _mark(self, expr: ast.expr) -> None:
        self.handled.add(id(expr))
        if type(expr) is ast.Attribute:
            self.handled.add(id(expr.value))

    def _name(self, node: ast.Name) -> None:
        if id(node) not in self.handled and (node.id in self.names or node.id in self.module_aliases):
            self.other += 1

    def _attribute(self, node: ast.Attribute) -> None:
        if id(node) in self.handled:
            return
        # ``cuda_amp.something`` used as a value (not called): a use we cannot rewrite.
        value = node.value
        if type(value) is ast.Name and value.id in self.module_aliases and id(value) not in self.handled:
            self.other += 1
            self.handled.add(id(value))


def _mentioning(facts: AmpFacts, names: set[str], roots: list[ast.stmt] | None = None) -> Iterable[ast.AST]:
    """The nodes of the module (or of the statements ``roots`` in it) in source order
    (``iter_nodes``, imports not entered), passing over every statement whose text (its
    decorators included) holds none of ``names``: nothing in it can use them, and a large module
    is mostly such statements."""
    source, lines = facts.source, facts.lines
    stack: list[ast.AST] = [facts.module] if roots is None else list(reversed(roots))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.stmt):
            span = lines.bounds(node)
            if span is not None:
                start, end = span
                decorators = getattr(node, "decorator_list", None)
                if decorators:
                    first = lines.bounds(decorators[0])
                    if first is not None:
                        start = min(start, first[0])
                if not any(source.find(name, start, end) >= 0 for name in names):
                    continue
        yield node
        if type(node) not in (ast.Import, ast.ImportFrom):
            stack.extend(reversed(children(node)))


@register
class DeprecatedAmpApi(LintRule):
    code = "AMP401"
    tokens = ("cuda.amp", "cpu.amp", "cuda import", "cpu import")
    anchors = Anchors(names=("torch.cuda.amp", "torch.cpu.amp"))

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        gated = Gated(facts, _KINDS)
        yield from self._imports(facts, gated)
        yield from self._star_imports(facts, gated)
        yield from self._attribute_chains(facts, gated)

    # ---- ``from torch.cuda.amp import *``: every name it binds is the deprecated one

    def _star_imports(self, facts: AmpFacts, gated: Gated) -> Iterable[Report]:
        for node in _module_level_imports(facts.module.body):
            if (
                node.level
                or node.module not in _DEPRECATED_MODULES
                or not any(alias.name == "*" for alias in node.names)
                or node in gated
            ):
                continue
            device = _DEPRECATED_MODULES[node.module]
            from ..textpos import import_from_module

            yield Report(
                self.code,
                import_from_module(facts.lines, node) or node,
                f'`{node.module}` is deprecated since torch 2.4: use `torch.amp` with device "{device}"',
                help=f'Import the names you use from `torch.amp` and pass "{device}" as the device',
            )

    # ---- ``from torch.cuda.amp import ...`` / ``from torch.cuda import amp`` / ``import torch.cuda.amp as x``

    def _imports(self, facts: AmpFacts, gated: Gated) -> Iterable[Report]:
        by_statement: dict[int, list[ImportRef]] = {}
        for ref in facts.import_refs:
            if not (
                _deprecated(ref.qname)
                or ref.qname in _DEPRECATED_MODULES
                or (ref.module or "").startswith(_DEPRECATED_PREFIXES)
            ):
                continue
            # Asked only of deprecated imports: the first question walks the module for its gates.
            if ref.fallback or ref.node in gated:
                continue  # ``except ImportError:`` fallback or version-gated import for old torch versions
            by_statement.setdefault(id(ref.node), []).append(ref)
        binders: dict[str, dict[int, int]] = {}
        if by_statement:
            from ..textpos import import_alias_name, import_from_module

            binders = _binders(facts, gated)
        for refs in by_statement.values():
            node = refs[0].node
            if type(node) is ast.ImportFrom:
                name = import_from_module(facts.lines, node)
                anchor: ast.AST = name or node
                old = refs[0].module
            else:
                name = import_alias_name(facts.lines, refs[0].alias)
                anchor = refs[0].alias if name is not None else node  # aliases have positions from 3.10
                old = refs[0].qname
            device = _device_of(refs[0])
            yield Report(
                self.code,
                anchor,
                f'`{old}` is deprecated since torch 2.4: use `torch.amp` with device "{device}"',
                help=f'Import from `torch.amp` and pass "{device}" as the device',
                fix=self._import_fix(facts, node, name, refs, device, gated, binders) if name is not None else None,
            )

    def _import_fix(
        self,
        facts: AmpFacts,
        node: ast.stmt,
        name: ast.Name,
        refs: list[ImportRef],
        device: str,
        gated: Gated,
        binders: dict[str, dict[int, int]],
    ) -> FixPlan | None:
        """Rename the module at the import (``name``: its text) and add the device at every use
        in its scope: the module, or the function the import statement is in."""
        names: set[str] = set()
        module_aliases: set[str] = set()
        if type(node) is ast.ImportFrom:
            module = refs[0].module
            if module in _DEPRECATED_MODULES:
                if not all(_deprecated(r.qname) for r in refs) or len(refs) != len(node.names):
                    return None
                rename = NodeEdit("replace", name, "torch.amp")
                names = {r.local for r in refs}
            elif module == "torch.cuda" or module == "torch.cpu":
                if len(refs) != len(node.names) or any(r.qname not in _DEPRECATED_MODULES for r in refs):
                    return None
                rename = NodeEdit("replace", name, "torch")
                module_aliases = {r.local for r in refs}
            else:
                return None
        else:
            if len(refs) != 1 or refs[0].qname not in _DEPRECATED_MODULES or refs[0].alias.asname is None:
                return None
            rename = NodeEdit("replace", name, "torch.amp")
            module_aliases = {refs[0].local}
        scope = gated.scope_of(node)
        if scope is None:
            return None  # in a class body: its uses are the class's attribute
        if any(binders.get(local, {}).get(id(scope), 0) > 1 for local in names | module_aliases):
            # Another import binds the name in the same scope or one inside it (a script pasted
            # twice, ``from torch.amp import autocast`` in a function of the module): which uses
            # are this import's is not the text's to say (rewriting every use once per import
            # added the device again and again).
            return None
        uses = _Uses(names, module_aliases)
        uses.scan(facts, scope)
        if uses.other:
            return None  # a use we cannot rewrite (``isinstance(x, GradScaler)``, ``cls = autocast``)
        if any(call in gated for call, _local in uses.calls):
            return None  # a use in a branch kept for old torch: rewriting it changes what that branch does
        edits = [rename]
        for call, local in uses.calls:
            original = _original_name(local, refs)
            if original not in _KINDS:
                return None
            call_edits = _call_edits(facts.lines, call, _Deprecated(device, original))
            if call_edits is None:
                return None
            edits.extend(call_edits)
        for decorator, local in uses.decorators:
            if _KINDS.get(_original_name(local, refs)) != "custom":
                return None
            edits.append(NodeEdit("insert_after", decorator, f'(device_type="{device}")'))
        return FixPlan("Rewrite to `torch.amp` with an explicit device", tuple(edits))

    # ---- ``torch.cuda.amp.autocast(...)`` spelled out -----------------------------------

    def _attribute_chains(self, facts: AmpFacts, gated: Gated) -> Iterable[Report]:
        calls_by_func = {id(site.node.func): site.node for site in facts.calls}
        decorators = {id(d) for function, _frame in facts.functions for d in function.decorator_list}
        bases = {id(base) for class_def, _ in facts.classes for base in class_def.bases}
        held = _held_references(facts)
        for node, qname in facts.references:
            target = _deprecated(qname)
            spelled = dotted(node)
            if target is None or spelled is None or node in gated:
                continue
            if (
                id(node) not in calls_by_func
                and id(node) not in decorators
                and id(node) not in bases
                and id(node) not in held
            ):
                continue  # a reference, not a use: ``func is torch.cuda.amp.autocast`` recognises the old name
            head = spelled.split(".", 1)[0]
            if facts.imports.get(head) != "torch":
                continue  # reached through an alias import: reported at the import
            yield Report(
                self.code,
                node,
                f"`torch.{target.device}.amp.{target.name}` is deprecated since torch 2.4: "
                f'use `torch.amp.{target.name}` with device "{target.device}"',
                help=f'Use `torch.amp.{target.name}` and pass "{target.device}" as the device',
                fix=self._chain_fix(facts, node, head, target, calls_by_func.get(id(node)), id(node) in decorators),
            )

    def _chain_fix(
        self,
        facts: AmpFacts,
        node: ast.expr,
        head: str,
        target: _Deprecated,
        call: ast.Call | None,
        decorator: bool,
    ) -> FixPlan | None:
        description = f'Use `torch.amp.{target.name}` with device "{target.device}"'
        if call is not None:
            edits = _call_edits(facts.lines, call, target)
            if edits is None:
                return None
            return FixPlan(description, (NodeEdit("replace", node, f"{head}.amp.{target.name}"), *edits))
        if decorator and target.kind == "custom":
            return FixPlan(
                description, (NodeEdit("replace", node, f'{head}.amp.{target.name}(device_type="{target.device}")'),)
            )
        return None


_DEPRECATED_PREFIXES = tuple(f"{m}." for m in _DEPRECATED_MODULES)


def _held_references(facts: AmpFacts) -> set[int]:
    """Expressions stored to be called later: an assigned value, either arm of an assigned
    ``a if c else b``, the callable given to ``functools.partial`` in an assignment. Not in an
    ``except`` handler: ``except ImportError: autocast = torch.cuda.amp.autocast`` serves old torch."""
    found: set[int] = set()
    for assignment in facts.assignments:
        value = assignment.value
        values = [value.body, value.orelse] if type(value) is ast.IfExp else [value]
        for item in values:
            if type(item) is ast.Call and facts.qualify(item.func) == "functools.partial" and item.args:
                item = item.args[0]
            if _deprecated(facts.qualify(item)):
                found.add(id(item))
    if found:
        handlers = [h for h in iter_nodes(facts.module) if type(h) is ast.ExceptHandler]
        inside = {id(node) for handler in handlers for node in iter_nodes(handler)}
        found -= inside
    return found


def _binders(facts: AmpFacts, gated: Gated) -> dict[str, dict[int, int]]:
    """Each local name the module's imports bind: how many import statements bind it inside
    each scope (by ``id``: the module, each function and class) that holds one, counted once per
    statement and scope, so that a question of one import is a lookup, not a walk of the others."""
    counts: dict[str, dict[int, int]] = {}
    seen: set[tuple[str, int]] = set()
    for ref in facts.import_refs:
        if (ref.local, id(ref.node)) in seen:
            continue
        seen.add((ref.local, id(ref.node)))
        per_scope = counts.setdefault(ref.local, {})
        for scope in gated.scopes(ref.node):
            per_scope[id(scope)] = per_scope.get(id(scope), 0) + 1
    return counts


def _device_of(ref: ImportRef) -> str:
    for module, device in _DEPRECATED_MODULES.items():
        if ref.qname.startswith(module) or (ref.module or "").startswith(module):
            return device
    if ref.module in ("torch.cuda", "torch.cpu"):
        return ref.module.split(".")[1]
    return "cuda"


def _original_name(local: str, refs: list[ImportRef]) -> str:
    for ref in refs:
        if ref.local == local:
            return ref.qname.rsplit(".", 1)[-1]
    return local


def _module_level_imports(body: list[Any]) -> Iterable[ast.ImportFrom]:  # statements, told by ``type``
    """``from ... import`` statements at module level (also in top-level ``if``/``try``): the only
    places a star import is allowed."""
    for statement in body:
        kind = type(statement)
        if kind is ast.ImportFrom:
            yield statement
        elif kind is ast.If:
            yield from _module_level_imports(statement.body)
            yield from _module_level_imports(statement.orelse)
        elif kind is ast.Try or kind is getattr(ast, "TryStar", None):
            yield from _module_level_imports(statement.body)
            for handler in statement.handlers:
                yield from _module_level_imports(handler.body)
            yield from _module_level_imports(statement.orelse)
