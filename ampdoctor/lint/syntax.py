"""Small helpers over ``ast`` nodes that the fact model, the gate and the rules share: dotted
names, literal values, call arguments, qualified names through an import table, and an
iterative walk over a node's children in source order."""

from __future__ import annotations

import ast
from collections import namedtuple
from collections.abc import Iterator

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import TypeGuard

FUNCTION_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef)
# ``try: ... except* ...`` (Python 3.11 and later); None before.
_TRY_STAR = getattr(ast, "TryStar", None)


def is_try(node: ast.AST) -> TypeGuard[ast.Try | ast.TryStar]:
    """Whether ``node`` is a ``try`` statement, ``except*`` included (by its exact type)."""
    kind = type(node)
    return kind is ast.Try or kind is _TRY_STAR


def parameter_names(node: ast.AST) -> list[str]:
    """The names a function's parameters bind, ``*args`` and ``**kwargs`` included, in order;
    none for anything that is not a function."""
    if not isinstance(node, FUNCTION_TYPES):
        return []
    a = node.args
    every = (*a.posonlyargs, *a.args, a.vararg, *a.kwonlyargs, a.kwarg)
    return [p.arg for p in every if p is not None]


def span(node: ast.AST) -> list[int]:
    """``[line, column, end_line, end_column]`` of a node, 1-based columns (ast's are 0-based)."""
    line = getattr(node, "lineno", 1)
    column = getattr(node, "col_offset", 0)
    end_line = getattr(node, "end_lineno", None) or line
    end_column = getattr(node, "end_col_offset", None)
    return [line, column + 1, end_line, (end_column if end_column is not None else column) + 1]


def dotted(expr: ast.AST | None) -> str | None:
    """``a.b.c`` for Name/Attribute chains, else None."""
    # The two commonest shapes first (``x``, ``self.x``): 78% of the calls when the 397 training
    # modules of the 31-repository tree are modelled and summarized.
    if type(expr) is ast.Name:
        return expr.id
    if type(expr) is not ast.Attribute:
        return None
    owner = expr.value
    if type(owner) is ast.Name:
        return f"{owner.id}.{expr.attr}"
    parts = []
    while type(expr) is ast.Attribute:
        parts.append(expr.attr)
        expr = expr.value
    if type(expr) is ast.Name:
        parts.append(expr.id)
        return ".".join(reversed(parts))
    return None


def string_value(expr: ast.AST | None) -> str | None:
    if type(expr) is ast.Constant and type(expr.value) is str:
        return expr.value
    return None


def is_float_literal(expr: ast.AST | None) -> bool:
    return type(expr) is ast.Constant and type(expr.value) is float


def number_value(expr: ast.AST | None) -> float | None:
    """The value of a numeric literal, with unary minus/plus and ``2**-24``-style powers."""
    if type(expr) is ast.Constant:
        number = expr.value
        if type(number) is int or type(number) is float:
            try:
                return float(number)
            except OverflowError:
                return None
        return None
    if type(expr) is ast.UnaryOp and type(expr.op) in (ast.USub, ast.UAdd):
        inner = number_value(expr.operand)
        if inner is None:
            return None
        return -inner if type(expr.op) is ast.USub else inner
    if type(expr) is ast.BinOp and type(expr.op) is ast.Pow:
        base, exp = number_value(expr.left), number_value(expr.right)
        if base is None or exp is None or abs(exp) > 1024:
            return None
        try:
            value = base**exp
        except (OverflowError, ZeroDivisionError, ValueError):
            return None
        return float(value) if not isinstance(value, complex) else None
    return None


class Arg(namedtuple("Arg", "value keyword star", defaults=(None, ""))):
    """One argument of a call, in the shape rules ask about.

    ``value``: the argument (``ast.expr``); ``keyword``: its keyword, or None; ``star``: "",
    "*" or "**".
    """

    __slots__ = ()


def call_args(call: ast.Call) -> list[Arg]:
    """Positional arguments in order (``*x`` with star "*"), then keywords (``**x``: star "**")."""
    args = [Arg(a.value, None, "*") if type(a) is ast.Starred else Arg(a) for a in call.args]
    args.extend(Arg(k.value, k.arg, "" if k.arg is not None else "**") for k in call.keywords)
    return args


def get_arg(call: ast.Call, position: int | None, keyword: str | None) -> Arg | None:
    """The argument passed at ``position`` (counting plain positional args) or by ``keyword``."""
    if position is not None:
        for index, arg in enumerate(call.args):
            if type(arg) is ast.Starred:
                break  # positions after ``*args`` are unknown
            if index == position:
                return Arg(arg)
    if keyword is not None:
        for kw in call.keywords:
            if kw.arg == keyword:
                return Arg(kw.value, keyword)
    return None


def qualify(expr: ast.AST | None, imports: dict[str, str]) -> str | None:
    name = dotted(expr)
    if name is None:
        return None
    return qualify_spelled(name, imports)


def qualify_spelled(name: str, imports: dict[str, str]) -> str | None:
    """``qualify`` of a dotted name already spelled out (``dotted``'s answer)."""
    head, _, rest = name.partition(".")
    base = imports.get(head)
    if base is None:
        return None
    return f"{base}.{rest}" if rest else base


# Fields that hold no code a rule looks at: expression contexts and operator singletons, and the
# fields that only ever hold names, numbers or flags (``Name.id``, ``alias.asname``,
# ``ImportFrom.level``, ``Global.names``): reading them found nothing, for a quarter of the time
# of a walk (838,000 nodes of 397 training modules: 0.43 s, 0.32 s without them).
_SKIPPED_FIELDS = frozenset(
    {"ctx", "op", "ops", "type_comment", "kind", "id", "attr", "arg", "asname", "module", "level", "conversion",
     "is_async", "simple"}
)  # fmt: skip
_SCALAR_NAMES = frozenset({"name", "names"})  # a string (a definition's, an alias's), or a list of them
_FIELDS: dict[type, tuple[str, ...]] = {}


def _child_fields(cls: type[ast.AST]) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = tuple(
            name
            for name in cls._fields
            if name not in _SKIPPED_FIELDS and not (name in _SCALAR_NAMES and cls not in (ast.Import, ast.ImportFrom))
        )
        if cls is ast.IfExp:
            names = ("body", "test", "orelse")  # source order
        _FIELDS[cls] = names
    return names


def children(node: ast.AST) -> list[ast.AST]:
    """The child nodes of ``node``, in source order."""
    if type(node) is ast.Dict:
        found: list[ast.AST] = []
        for key, item in zip(node.keys, node.values):
            if key is not None:
                found.append(key)
            found.append(item)
        return found
    found = []
    for name in _child_fields(type(node)):
        value = getattr(node, name, None)
        if isinstance(value, ast.AST):
            found.append(value)
        elif type(value) is list:
            found.extend(item for item in value if isinstance(item, ast.AST))
    return found


def children_except(node: ast.AST, skipped: tuple[type, ...]) -> list[ast.AST]:
    """``children(node)`` without the nodes whose type is one of ``skipped``, in one pass."""
    if type(node) is ast.Dict:
        return [child for child in children(node) if type(child) not in skipped]
    found: list[ast.AST] = []
    for name in _FIELDS.get(type(node)) or _child_fields(type(node)):
        value = getattr(node, name, None)
        if type(value) is list:
            for item in value:
                if type(item) not in skipped and isinstance(item, ast.AST):
                    found.append(item)
        elif value is not None and type(value) not in skipped and isinstance(value, ast.AST):
            found.append(value)
    return found


def iter_nodes(root: ast.AST, prune: tuple[type, ...] = ()) -> Iterator[ast.AST]:
    """Every node under ``root`` (included), in source order, without recursion.

    Nodes of the ``prune`` types are yielded but not entered.
    """
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        if not (prune and isinstance(node, prune)):
            stack.extend(reversed(children(node)))
