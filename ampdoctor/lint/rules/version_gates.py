"""Branches kept for old torch, which AMP401 (``deprecated_api.py``) leaves as they are.

Code that supports old torch keeps the deprecated spelling in a branch that only old torch
takes: ``torch.amp.GradScaler if _TORCH_GREATER_EQUAL_2_4 else torch.cuda.amp.GradScaler``,
``if hasattr(torch.amp, "GradScaler"): ... else: ...``, ``try: ... except AttributeError: ...``.
That is correct code; rewriting the old branch would drop old-torch support. ``Gated`` answers
whether a node lies in such a branch, and in which scope (module or function) it is.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Collection

from ..model import AmpFacts
from ..syntax import children, dotted

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any


class Gated:
    """``node in gated``: whether a node is inside a branch kept for old torch. Answered by
    walking down to the node only, from the module-level statement that holds it (found by its
    position), through the children whose span holds it: a walk of the whole module for its
    gates cost 0.1 s on a 460 KB module, and a walk from the module for each node asked about
    grew with the square of the module's size."""

    def __init__(self, facts: AmpFacts, names: Collection[str]) -> None:
        self.facts = facts
        self.names = names  # the names under ``torch.amp`` whose use marks the new API
        self._new_api: list[tuple[int, int]] | None = None
        self._starts: list[tuple[int, int]] | None = None

    def __contains__(self, node: ast.AST) -> bool:
        if self._new_api is None:
            self._new_api = _new_api_spans(self.facts, self.names)
        chain = self._chain(node)
        if chain is None:
            return False
        for parent, child in zip(chain, chain[1:]):
            if _gates(self.facts, parent, child, self._new_api):
                return True
        return False

    def scope_of(self, node: ast.AST) -> ast.AST | None:
        """The innermost function that holds ``node``, else the module; None where a class body
        is nearer (a name bound there is the class's attribute)."""
        chain = self._chain(node) or (self.facts.module,)
        for outer in reversed(chain[:-1]):
            if type(outer) is ast.FunctionDef or type(outer) is ast.AsyncFunctionDef:
                return outer
            if type(outer) is ast.ClassDef:
                return None
        return self.facts.module

    def scopes(self, node: ast.AST) -> list[ast.AST]:
        """The module and every function and class that hold ``node``."""
        chain = self._chain(node) or (self.facts.module, node)
        return [self.facts.module, *(outer for outer in chain[1:-1] if type(outer) in _SCOPES)]

    def _chain(self, node: ast.AST) -> tuple[ast.AST, ...] | None:
        """``_chain_to`` from the module, entered at the module-level statement whose span
        starts last at or before the node's (the whole walk where that one does not hold it)."""
        module = self.facts.module
        placed = _outer_span(node)
        if placed is not None and module.body:
            from bisect import bisect_right

            if self._starts is None:
                # (a statement always has a position; the stand-in keeps the list's order)
                self._starts = [(_outer_span(statement) or ((0, 0), (0, 0)))[0] for statement in module.body]
            index = bisect_right(self._starts, placed[0]) - 1
            if index >= 0:
                top = module.body[index]
                inner = (top,) if top is node else _chain_to(top, node)
                if inner is not None:
                    return (module, *inner)
        return _chain_to(module, node)


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_VERSION_TEST = re.compile(r"version|TORCH_(GREATER|LESS|GE|LT|VER)|_GE_|_LT_|hasattr\(\s*torch", re.I)
_AMP_WORD = re.compile(r"\bamp\b")
_FALLBACK_ERRORS = {"ImportError", "ModuleNotFoundError", "AttributeError", "Exception"}


def _gates(facts: AmpFacts, parent: ast.AST, child: ast.AST, new_api: list[tuple[int, int]]) -> bool:
    """Whether ``child`` is in an arm of ``parent`` kept for old torch: the other arm of a version
    test (or of ``a if c else b``) that uses the new API, or the body of an ``except`` that
    catches the failed import or attribute."""
    if isinstance(parent, ast.ExceptHandler):
        return _catches_fallback(parent) and any(child is statement for statement in parent.body)
    if not new_api or not isinstance(parent, (ast.If, ast.IfExp)):
        return False
    body = [parent.body] if isinstance(parent, ast.IfExp) else parent.body
    orelse = [parent.orelse] if isinstance(parent, ast.IfExp) else parent.orelse
    if any(child is part for part in orelse):
        other: list[Any] = body
    elif any(child is part for part in body):
        other = orelse
    else:
        return False  # the test itself
    # An arm is kept for old torch when the other arm uses the new API.
    return _holds(other, new_api) and _arms_gate(facts, parent)


def _arms_gate(facts: AmpFacts, node: ast.If | ast.IfExp) -> bool:
    return type(node) is ast.IfExp or bool(_VERSION_TEST.search(facts.text(node.test)))


def _chain_to(module: ast.AST, target: ast.AST) -> tuple[ast.AST, ...] | None:
    """The nodes from ``module`` (or any node) down to ``target`` (both included), or None when
    it is not there. Only children whose span holds the target's are entered (nodes without a
    position, such as ``ast.arguments``, are looked through)."""
    placed = _outer_span(target)
    stack: list[tuple[ast.AST, tuple[ast.AST, ...]]] = [(module, (module,))]
    while stack:
        node, path = stack.pop()
        for child in children(node):
            if child is target:
                return (*path, child)
            span = _outer_span(child) if placed is not None else None
            if span is None or placed is None or (span[0] <= placed[0] and placed[1] <= span[1]):
                stack.append((child, (*path, child)))
    return None


def _outer_span(node: ast.AST) -> tuple[tuple[int, int], tuple[int, int]] | None:
    line = getattr(node, "lineno", None)
    if line is None:
        return None
    start = (line, getattr(node, "col_offset", 0))
    decorators = getattr(node, "decorator_list", None)
    if decorators:
        first = decorators[0]
        start = min(start, (first.lineno, first.col_offset))
    return start, (getattr(node, "end_lineno", None) or line, getattr(node, "end_col_offset", None) or 0)


def _new_api_spans(facts: AmpFacts, names: Collection[str]) -> list[tuple[int, int]]:
    """Where the module names ``torch.amp``'s autocast or GradScaler (not the deprecated ones):
    the (line, column) of each such node, from the fact model's imports and resolved attribute
    chains; an ``if`` arm holds one when the position lies inside the arm's span (a node's span
    holds its children's)."""
    if not _AMP_WORD.search(facts.source):  # neither ``torch.amp`` nor ``from torch import amp``
        return []
    found = {
        (ref.node.lineno, ref.node.col_offset)
        for ref in facts.import_refs
        if type(ref.node) is ast.ImportFrom and ref.node.module == "torch.amp"
    }
    for node, qname in facts.references:
        if type(node) is ast.Attribute and qname.startswith("torch.amp."):
            # Every attribute of a chain starts where the chain does: ``torch.amp.GradScaler.x``
            # names GradScaler at the chain's position.
            if any(part in names for part in qname.split(".")[2:]):
                found.add((node.lineno, node.col_offset))
    return sorted(found)


def _holds(statements: list[Any], positions: list[tuple[int, int]]) -> bool:  # statements or expressions
    for statement in statements:
        start = (statement.lineno, statement.col_offset)
        end = (statement.end_lineno or statement.lineno, statement.end_col_offset or 0)
        if type(statement) in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef) and statement.decorator_list:
            first = statement.decorator_list[0]
            start = min(start, (first.lineno, first.col_offset))
        if any(start <= position < end for position in positions):
            return True
    return False


def _catches_fallback(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if type(handler.type) is ast.Tuple else [handler.type]
    return any((dotted(n) or "").rsplit(".", 1)[-1] in _FALLBACK_ERRORS for n in names)
