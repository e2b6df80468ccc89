"""The summary parts of AMP303 across functions: a helper that returns a model it made float16
(``load_model()`` ending in ``model.convert_to_fp16(); return model, diffusion``), and a caller
that builds an optimizer over the parameters of what such a call returned. The check is
``half_returned.py``."""

from __future__ import annotations

import ast

from ..model import AmpFacts, Frame
from ..passes import downcast_dtype, is_optimizer_constructor
from ..rules.float16_range import HALF_METHODS, model_of_params
from ..syntax import dotted
from ..syntax import span as position

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from .shapes import HalfReturn, TrainsReturned

_FLOAT_METHODS = ("float", "to", "type")


def _statements(function: ast.AST) -> list[ast.stmt]:
    """The function's own statements, nested blocks included, nested functions and classes not."""
    out: list[ast.stmt] = []
    todo = list(getattr(function, "body", []))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        out.append(node)
        for name in ("body", "orelse", "finalbody", "handlers"):
            todo.extend(getattr(node, name, []) or [])
    return out


def returned_half(facts: AmpFacts, function: ast.AST, frame: Frame) -> HalfReturn | None:
    """``{"at", "index", "name"}``: a local converted to float16 in place (``m.half()``,
    ``m.convert_to_fp16()``) or rebound to a float16 copy, then returned (``index``: its place in
    a returned tuple), with no conversion back to float32 in the function."""
    converted: dict[str, list[int]] = {}
    for site in frame.calls:
        if site.method not in HALF_METHODS or downcast_dtype(site, facts) != "float16":
            continue
        statement = site.statement
        name = None
        if isinstance(statement, ast.Expr) and statement.value is site.node:
            name = site.receiver
        elif isinstance(statement, ast.Assign) and statement.value is site.node and len(statement.targets) == 1:
            name = dotted(statement.targets[0])
        if name and "." not in name:
            converted.setdefault(name, position(site.node))
    if not converted:
        return None
    for site in frame.calls:
        if site.receiver in converted and site.method in _FLOAT_METHODS and downcast_dtype(site, facts) is None:
            if site.method == "float" or "float32" in ast.dump(site.node):
                converted.pop(site.receiver, None)  # made float32 again
    for statement in _statements(function):
        if not isinstance(statement, ast.Return) or statement.value is None:
            continue
        value = statement.value
        elements = value.elts if isinstance(value, ast.Tuple) else [value]
        for index, element in enumerate(elements):
            name = dotted(element)
            if name in converted and converted[name][0] <= statement.lineno:
                return {
                    "at": converted[name],
                    "index": index if isinstance(value, ast.Tuple) else None,
                    "name": name,
                }
    return None


def trains_returned(facts: AmpFacts, function: ast.AST, frame: Frame) -> list[TrainsReturned]:
    """``{"callee", "index", "at", "model"}`` per optimizer built over ``M.parameters()`` where
    the last binding of ``M`` before it is a call's result (``M = f(...)``; ``M, d = f(...)``:
    ``index`` 0)."""
    optimizers = [site for site in frame.calls if is_optimizer_constructor(site.node, facts)]
    if not optimizers:
        return []
    bindings: dict[str, list[tuple[int, str | None, int | None]]] = {}
    for statement in _statements(function):
        if not isinstance(statement, ast.Assign):
            continue
        callee = dotted(statement.value.func) if isinstance(statement.value, ast.Call) else None
        for target in statement.targets:
            if isinstance(target, ast.Name):
                bindings.setdefault(target.id, []).append((statement.lineno, callee, None))
            elif isinstance(target, (ast.Tuple, ast.List)):
                for index, element in enumerate(target.elts):
                    if isinstance(element, ast.Name):
                        bindings.setdefault(element.id, []).append((statement.lineno, callee, index))
    out: list[TrainsReturned] = []
    for site in optimizers:
        params = site.arg(0, "params")
        model = model_of_params(params.value) if params is not None else None
        if model is None or model not in bindings:
            continue
        before = [b for b in bindings[model] if b[0] < site.node.lineno]
        if not before:
            continue
        _line, callee, place = max(before, key=lambda b: b[0])
        if callee is None:
            continue
        if any(s.receiver == model and s.method == "float" for s in frame.calls if s.order < site.order):
            continue
        out.append({"callee": callee, "index": place, "at": position(site.node), "model": model})
    return out
