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

from dataclasses import dataclass
from typing import Iterable, Optional

import libcst as cst

from ..facts import AmpFacts, ImportRef, dotted, iter_nodes
from ..gate import Anchors
from . import FixPlan, LintRule, NodeEdit, Report, node_code, register

_DEPRECATED_MODULES = {"torch.cuda.amp": "cuda", "torch.cpu.amp": "cpu"}
_KINDS = {"autocast": "autocast", "GradScaler": "scaler", "custom_fwd": "custom", "custom_bwd": "custom"}
_AUTOCAST_POSITIONAL = ("enabled", "dtype", "cache_enabled")


@dataclass(frozen=True)
class _Deprecated:
    device: str
    name: str  # autocast, GradScaler, custom_fwd, custom_bwd

    @property
    def kind(self) -> str:
        return _KINDS[self.name]


def _deprecated(qname: Optional[str]) -> Optional[_Deprecated]:
    if not qname:
        return None
    module, _, name = qname.rpartition(".")
    device = _DEPRECATED_MODULES.get(module)
    if device is None or name not in _KINDS:
        return None
    return _Deprecated(device, name)


def _call_edits(call: cst.Call, target: _Deprecated) -> Optional[list[NodeEdit]]:
    """Edits that add the device argument to one call (None when it cannot be done safely)."""
    args = list(call.args)
    if any(a.star for a in args):
        return None
    device = f'"{target.device}"'
    if target.kind == "custom":
        if not args:
            return _empty_call(call, f"device_type={device}")
        if args[0].keyword is None:
            return None
        return [NodeEdit("insert_before", args[0], f"device_type={device}, ")]
    if not args:
        return _empty_call(call, device)
    edits = []
    positional = [a for a in args if a.keyword is None]
    if target.kind == "autocast":
        if len(positional) > len(_AUTOCAST_POSITIONAL):
            return None
        for index, arg in enumerate(positional):
            prefix = f"{device}, " if index == 0 and arg is args[0] else ""
            edits.append(NodeEdit("insert_before", arg, f"{prefix}{_AUTOCAST_POSITIONAL[index]}="))
        if not positional or positional[0] is not args[0]:
            edits.insert(0, NodeEdit("insert_before", args[0], f"{device}, "))
        return edits
    return [NodeEdit("insert_before", args[0], f"{device}, ")]


def _empty_call(call: cst.Call, text: str) -> list[NodeEdit]:
    # ``f()``: the call's text ends with ")"; replace the whole call with the argument added.
    return [NodeEdit("replace", call, f"{node_code(call.func)}({text})")]


class _Uses:
    """Uses of some local names: as a callee, as a decorator, or anything else."""

    def __init__(self, names: set[str], module_aliases: set[str]) -> None:
        self.names = names
        self.module_aliases = module_aliases
        self.calls: list[tuple[cst.Call, str]] = []  # (call, attribute name used)
        self.decorators: list[tuple[cst.Decorator, str]] = []
        self.handled: set[int] = set()
        self.other = 0

    def scan(self, module: cst.Module) -> None:
        # Parents come before their children, so a handled callee is marked before it is seen.
        for node in iter_nodes(module, prune=(cst.Import, cst.ImportFrom)):
            kind = type(node)
            if kind is cst.Call:
                self._call(node)
            elif kind is cst.Decorator:
                self._decorator(node)
            elif kind is cst.Arg and node.keyword is not None:
                self.handled.add(id(node.keyword))
            elif kind is cst.Attribute:
                self._attribute(node)
            elif kind is cst.Name:
                self._name(node)

    def _target(self, expr: cst.BaseExpression) -> Optional[str]:
        if isinstance(expr, cst.Name) and expr.value in self.names:
            return expr.value
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value in self.module_aliases:
            return expr.attr.value
        return None

    def _call(self, node: cst.Call) -> None:
        name = self._target(node.func)
        if name is not None:
            self.calls.append((node, name))
            self._mark(node.func)

    def _decorator(self, node: cst.Decorator) -> None:
        name = self._target(node.decorator)
        if name is not None:
            self.decorators.append((node, name))
            self._mark(node.decorator)

    def _mark(self, expr: cst.BaseExpression) -> None:
        self.handled.add(id(expr))
        if isinstance(expr, cst.Attribute):
            self.handled.add(id(expr.value))

    def _name(self, node: cst.Name) -> None:
        if id(node) not in self.handled and (node.value in self.names or node.value in self.module_aliases):
            self.other += 1

    def _attribute(self, node: cst.Attribute) -> None:
        self.handled.add(id(node.attr))  # ``x.autocast``: the attribute, not the name
        if id(node) in self.handled:
            return
        # ``cuda_amp.something`` used as a value (not called): a use we cannot rewrite.
        if isinstance(node.value, cst.Name) and node.value.value in self.module_aliases and id(node.value) not in self.handled:
            self.other += 1
            self.handled.add(id(node.value))


@register
class DeprecatedAmpApi(LintRule):
    code = "AMP401"
    tokens = ("cuda.amp", "cpu.amp", "cuda import", "cpu import")
    anchors = Anchors(names=("torch.cuda.amp", "torch.cpu.amp"))

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        yield from self._imports(facts)
        yield from self._attribute_chains(facts)

    # ---- ``from torch.cuda.amp import ...`` / ``from torch.cuda import amp`` / ``import torch.cuda.amp as x``

    def _imports(self, facts: AmpFacts) -> Iterable[Report]:
        by_statement: dict[int, list[ImportRef]] = {}
        for ref in facts.import_refs:
            if ref.fallback:
                continue  # ``except ImportError:`` fallback for old torch versions
            if _deprecated(ref.qname) or ref.qname in _DEPRECATED_MODULES or (
                ref.module or ""
            ).startswith(tuple(f"{m}." for m in _DEPRECATED_MODULES)):
                by_statement.setdefault(id(ref.node), []).append(ref)
        for refs in by_statement.values():
            node = refs[0].node
            anchor = node.module if isinstance(node, cst.ImportFrom) and node.module is not None else refs[0].alias
            old = refs[0].module if isinstance(node, cst.ImportFrom) else refs[0].qname
            device = _device_of(refs[0])
            yield Report(
                self.code,
                anchor,
                f"`{old}` is deprecated since torch 2.4: use `torch.amp` with device \"{device}\"",
                help=f'Import from `torch.amp` and pass "{device}" as the device',
                fix=self._import_fix(facts, node, refs, device),
            )

    def _import_fix(self, facts: AmpFacts, node: cst.CSTNode, refs: list[ImportRef], device: str) -> Optional[FixPlan]:
        edits: list[NodeEdit] = []
        names: set[str] = set()
        module_aliases: set[str] = set()
        if isinstance(node, cst.ImportFrom):
            module = refs[0].module
            if module in _DEPRECATED_MODULES:
                if not all(_deprecated(r.qname) for r in refs) or len(refs) != len(node.names):
                    return None
                edits.append(NodeEdit("replace", node.module, "torch.amp"))
                names = {r.local for r in refs}
            elif module == "torch.cuda" or module == "torch.cpu":
                if len(refs) != len(node.names) or any(r.qname not in _DEPRECATED_MODULES for r in refs):
                    return None
                edits.append(NodeEdit("replace", node.module, "torch"))
                module_aliases = {r.local for r in refs}
            else:
                return None
        else:
            if len(refs) != 1 or refs[0].qname not in _DEPRECATED_MODULES or refs[0].alias.asname is None:
                return None
            edits.append(NodeEdit("replace", refs[0].alias.name, "torch.amp"))
            module_aliases = {refs[0].local}
        uses = _Uses(names, module_aliases)
        uses.scan(facts.module)
        if uses.other:
            return None  # a use we cannot rewrite (``isinstance(x, GradScaler)``, ``cls = autocast``)
        for call, name in uses.calls:
            original = _original_name(name, refs)
            if original not in _KINDS:
                return None
            call_edits = _call_edits(call, _Deprecated(device, original))
            if call_edits is None:
                return None
            edits.extend(call_edits)
        for decorator, name in uses.decorators:
            if _KINDS.get(_original_name(name, refs)) != "custom":
                return None
            edits.append(NodeEdit("insert_after", decorator.decorator, f'(device_type="{device}")'))
        return FixPlan("Rewrite to `torch.amp` with an explicit device", tuple(edits))

    # ---- ``torch.cuda.amp.autocast(...)`` spelled out -----------------------------------

    def _attribute_chains(self, facts: AmpFacts) -> Iterable[Report]:
        calls_by_func = {id(site.node.func): site.node for site in facts.calls}
        decorators = _decorators_by_expr(facts)
        bases = {id(base.value) for class_def, _ in facts.classes for base in class_def.bases}
        for node, qname in facts.references:
            target = _deprecated(qname)
            spelled = dotted(node)
            if target is None or spelled is None:
                continue
            if id(node) not in calls_by_func and id(node) not in decorators and id(node) not in bases:
                continue  # a reference, not a use: ``func is torch.cuda.amp.autocast`` recognises the old name
            head = spelled.split(".", 1)[0]
            if facts.imports.get(head) != "torch":
                continue  # reached through an alias import: reported at the import
            yield Report(
                self.code,
                node,
                f"`torch.{target.device}.amp.{target.name}` is deprecated since torch 2.4: "
                f"use `torch.amp.{target.name}` with device \"{target.device}\"",
                help=f'Use `torch.amp.{target.name}` and pass "{target.device}" as the device',
                fix=self._chain_fix(node, head, target, calls_by_func.get(id(node)), decorators.get(id(node))),
            )

    def _chain_fix(
        self,
        node: cst.CSTNode,
        head: str,
        target: _Deprecated,
        call: Optional[cst.Call],
        decorator: Optional[cst.Decorator],
    ) -> Optional[FixPlan]:
        rename = NodeEdit("replace", node, f"{head}.amp.{target.name}")
        description = f"Use `torch.amp.{target.name}` with device \"{target.device}\""
        if call is not None:
            edits = _call_edits(call, target)
            if edits is None:
                return None
            if edits[0].kind == "replace" and edits[0].node is call:
                inner = edits[0].text.split("(", 1)[1]
                return FixPlan(description, (NodeEdit("replace", call, f"{head}.amp.{target.name}({inner}"),))
            return FixPlan(description, (rename, *edits))
        if decorator is not None and target.kind == "custom":
            return FixPlan(description, (NodeEdit("replace", node, f'{head}.amp.{target.name}(device_type="{target.device}")'),))
        return None


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


def _decorators_by_expr(facts: AmpFacts) -> dict[int, cst.Decorator]:
    found: dict[int, cst.Decorator] = {}
    for function, _frame in facts.functions:
        for decorator in function.decorators:
            found[id(decorator.decorator)] = decorator
    return found
