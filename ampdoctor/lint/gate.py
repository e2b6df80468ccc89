"""Rule anchors: what a module must reference for a rule to be able to fire.

A rule declares its anchors (``Anchors``): resolved names (``torch.autocast``,
``torch.cuda.amp``), called methods (``x.scale(...)``, ``m.half()``), float16 cast targets,
and literal facts (a number beyond float16's range used as a fill value...). This module
evaluates them exactly on a parsed module (``summarize``/``keeps``): that is the reference
semantics (``Anchors`` itself is in anchors.py, which the rules import without this module). The engine evaluates them on the file's bytes instead, before any
parse (textscan.py); the tests check that the text answer is a superset of this one, so that
skipping a file never loses a finding.
"""

from __future__ import annotations

import ast
import collections
import warnings
from collections.abc import Iterable, Iterator

from ..records import Record
from .anchors import Anchors
from .syntax import dotted
from .vocabulary import FILL_CALLS, FLOAT16_MAX, FLOAT16_SMALLEST

__all__ = ["FILL_CALLS", "Anchors", "ModuleSummary", "keeps", "summarize", "summarize_tree"]


class ModuleSummary(Record):
    """What a module references: resolved names, called methods, cast targets, literal flags."""

    __slots__ = ("names", "methods", "casts", "method_casts", "literals", "_prefixes")

    def __init__(
        self,
        names: frozenset[str],
        methods: frozenset[str],
        casts: frozenset[str] = frozenset(),
        method_casts: frozenset[str] = frozenset(),
        literals: frozenset[str] = frozenset(),
    ) -> None:
        self.names = names
        self.methods = methods
        self.casts = casts
        self.method_casts = method_casts
        self.literals = literals
        self._prefixes: frozenset[str] | None = None  # computed on first use

    def has_any(self, anchors: Anchors) -> bool:
        if not self.literals.issuperset(anchors.requires) or not self.methods.issuperset(anchors.requires_methods):
            return False
        if not all(self._references(name) for name in anchors.requires_names):
            return False
        if not (anchors.names or anchors.methods or anchors.casts or anchors.method_casts):
            return True
        if anchors.methods and not self.methods.isdisjoint(anchors.methods):
            return True
        if anchors.casts and not self.casts.isdisjoint(anchors.casts):
            return True
        if anchors.method_casts and not self.method_casts.isdisjoint(anchors.method_casts):
            return True
        return any(self._references(anchor) for anchor in anchors.names)

    def _references(self, anchor: str) -> bool:
        if self._prefixes is None:
            # Every name and each of its dotted prefixes: ``a.b.c`` gives ``a``, ``a.b``, ``a.b.c``.
            found = set()
            for name in self.names:
                end = name.find(".")
                while end != -1:
                    found.add(name[:end])
                    end = name.find(".", end + 1)
                found.add(name)
            self._prefixes = frozenset(found)
        return anchor in self._prefixes


def summarize(source: str) -> ModuleSummary | None:
    """Resolved names and called methods of a module, or None when ``ast`` cannot parse it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return summarize_tree(tree)


# Fields that never hold a node a summary looks at: contexts, operators, names as strings.
_SKIPPED = frozenset(
    {
        "ctx",
        "op",
        "ops",
        "type_comment",
        "kind",
        "id",
        "attr",
        "arg",
        "name",
        "names",
        "module",
        "level",
        "asname",
        "kwd_attrs",
        "conversion",
        "lineno",
        "col_offset",
        "end_lineno",
        "end_col_offset",
    }
)
_NODE_FIELDS: dict[type, tuple[str, ...]] = {}


def walk(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node, breadth first like ``ast.walk`` (outer imports win), without its generators."""
    fields_of = _NODE_FIELDS
    queue = collections.deque([tree])
    pop, push, extend = queue.popleft, queue.append, queue.extend
    while queue:
        node = pop()
        if node is None:  # ``{**x}`` leaves a None among a dict's keys
            continue
        yield node
        cls = type(node)
        names = fields_of.get(cls)
        if names is None:
            names = fields_of[cls] = tuple(f for f in cls._fields if f not in _SKIPPED)
        for name in names:
            value = getattr(node, name, None)
            if type(value) is list:
                extend(value)
            elif isinstance(value, ast.AST):
                push(value)


def summarize_tree(tree: ast.Module) -> ModuleSummary:
    """Resolved names, called methods, cast targets and literal facts of a parsed module."""
    imports: dict[str, str] = {}
    chains: list[str] = []
    cast_chains: list[str] = []
    method_cast_chains: list[str] = []  # the subset that are targets of .to() / .type()
    methods: set[str] = set()
    literals: set[str] = set()
    type_strings: list[str] = []  # already qualified: strings are not resolved through imports
    for node in walk(tree):
        if type(node) is ast.Attribute:
            chain = dotted(node)
            if chain is not None:
                chains.append(chain)
        elif type(node) is ast.Name:
            chains.append(node.id)
        elif type(node) is ast.Call:
            func = node.func
            dtypes = [c for c in (dotted(k.value) for k in node.keywords if k.arg == "dtype") if c]
            cast_chains.extend(dtypes)
            if type(func) is ast.Attribute:
                methods.add(func.attr)
                if not (node.args or node.keywords):
                    methods.add(func.attr + "()")  # ``m.half()``: a conversion, not ``f.half(*args)``
                if func.attr in ("to", "type"):
                    positional = [c for c in map(dotted, node.args) if c]
                    cast_chains.extend(positional)
                    method_cast_chains.extend(positional + dtypes)
                if func.attr == "type":
                    # ``.type("torch.HalfTensor")``: a tensor type named by a string.
                    for value in [*node.args, *(k.value for k in node.keywords)]:
                        if type(value) is ast.Constant and type(value.value) is str:
                            type_strings.append(value.value)
            _call_literals(node, literals)
        elif type(node) is ast.BinOp:
            _binop_literals(node, literals)
        elif type(node) is ast.Assign and any(type(t) is ast.Subscript for t in node.targets):
            # ``logits[mask] = -1e10``: a fill written as an index assignment
            _classify((node.value,), literals, big="big-fill", tiny=None)
        elif type(node) is ast.Import:
            for alias in node.names:
                if alias.asname:
                    imports.setdefault(alias.asname, alias.name)
                else:
                    head = alias.name.split(".", 1)[0]
                    imports.setdefault(head, head)
                chains.append(alias.name)
        elif type(node) is ast.ImportFrom and node.module and not node.level:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                imports.setdefault(alias.asname or alias.name, full)
                chains.append(full)
    # ``autocast = torch.autocast`` style aliases resolve through the chain on the right.
    return ModuleSummary(
        _resolve(chains, imports),
        frozenset(methods),
        _resolve(cast_chains, imports) | frozenset(type_strings),
        _resolve(method_cast_chains, imports) | frozenset(type_strings),
        frozenset(literals),
    )


def _literal_value(node: ast.expr) -> float | None:
    """The value of ``1e9``, ``-1e9``, ``2**-25``; None for anything else or non-finite values."""
    value: float | complex | None = None
    if type(node) is ast.Constant:
        number = node.value
        if type(number) is int or type(number) is float:
            try:
                value = float(number)
            except OverflowError:  # an integer beyond float range: certainly not float16
                value = float("inf") if number > 0 else float("-inf")
    elif type(node) is ast.UnaryOp and type(node.op) in (ast.USub, ast.UAdd):
        inner = _literal_value(node.operand)
        value = None if inner is None else (-inner if type(node.op) is ast.USub else inner)
    elif type(node) is ast.BinOp and type(node.op) is ast.Pow:
        base, exponent = _literal_value(node.left), _literal_value(node.right)
        if base is not None and exponent is not None and abs(exponent) < 1024:
            try:
                value = base**exponent
            except (OverflowError, ZeroDivisionError):
                value = None
    if value is None or isinstance(value, complex) or value != value or abs(value) == float("inf"):
        return None
    return value


def _classify(values: Iterable[ast.expr], found: set[str], big: str | None, tiny: str | None) -> None:
    """Add the ``big`` / ``tiny`` flag names for the literals among ``values``."""
    for node in values:
        value = _literal_value(node)
        if value is None:
            continue
        magnitude = abs(value)
        if big and magnitude > FLOAT16_MAX:
            found.add(big)
        if tiny and 0 < magnitude < FLOAT16_SMALLEST:
            found.add(tiny)


def _call_literals(node: ast.Call, found: set[str]) -> None:
    func = node.func
    name = func.attr if type(func) is ast.Attribute else func.id if type(func) is ast.Name else None
    if name in FILL_CALLS:
        _classify([*node.args, *(k.value for k in node.keywords)], found, big="big-fill", tiny=None)
    _classify([k.value for k in node.keywords if k.arg == "eps"], found, big=None, tiny="tiny-eps")


def _binop_literals(node: ast.BinOp, found: set[str]) -> None:
    op = type(node.op)
    if op in (ast.Add, ast.Sub):
        _classify((node.left, node.right), found, big="big-arith", tiny="tiny-arith")
    elif op is ast.Div:
        _classify((node.right,), found, big=None, tiny="tiny-arith")


def _resolve(chains: list[str], imports: dict[str, str]) -> frozenset[str]:
    names = set()
    for chain in chains:
        head, _, rest = chain.partition(".")
        base = imports.get(head)
        if base is not None:
            names.add(f"{base}.{rest}" if rest else base)
        else:
            names.add(chain)  # imported names appear here fully qualified already
    return frozenset(names)


def keeps(module: str | ast.Module, anchors: Iterable[Anchors | tuple[Anchors, ...] | None]) -> bool:
    """Whether some rule could fire on the module (source text or tree): True when in doubt.

    ``anchors``: each rule's anchors (``LintRule.anchors``): one set, alternatives (any may
    hold), or None (no condition).
    """
    anchors = list(anchors)
    if not anchors or any(a is None for a in anchors):
        return True
    summary = summarize(module) if isinstance(module, str) else summarize_tree(module)
    if summary is None:
        return True  # let the full parser report the syntax error
    alternatives = [alt for a in anchors if a is not None for alt in (a if isinstance(a, tuple) else (a,))]
    return any(summary.has_any(a) for a in alternatives)
