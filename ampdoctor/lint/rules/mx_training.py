"""MX training conversions: torchao's ``quantize_(model, config)`` with an MX training config.

torchao trains ``nn.Linear`` layers in MXFP8 when ``quantize_`` is given ``MXLinearConfig``
(``torchao.prototype.mx_formats``) or, in later releases, ``MXFP8TrainingOpConfig``
(``torchao.prototype.moe_training``); ``filter_fn(module, fqn)`` picks the layers, as
``module_filter_fn`` does for float8. MX formats scale blocks of 32 values along a GEMM's inner
dimension: in_features in the forward, out_features for the input gradient. The float8 rules
that follow a conversion to its layers (AMP601, AMP602) read these calls too
(``float8_training.py``). torchao is not imported here.
"""

from __future__ import annotations

import ast

from ..model import AmpFacts, CallSite

QUANTIZE = frozenset({"torchao.quantization.quantize_", "torchao.quantization.quant_api.quantize_"})
_MX_CONFIGS = frozenset(
    {
        "torchao.prototype.mx_formats.MXLinearConfig",
        "torchao.prototype.mx_formats.config.MXLinearConfig",
        "torchao.prototype.moe_training.MXFP8TrainingOpConfig",
        "torchao.prototype.moe_training.config.MXFP8TrainingOpConfig",
    }
)
# MX formats share one scale per block of this many values.
MX_BLOCK = 32


def mx_conversions(facts: AmpFacts) -> list[CallSite]:
    """The module's ``quantize_`` calls whose config is an MX training config (written in the
    call, or a name this module binds once to one)."""
    found = []
    for site in facts.calls_named("quantize_"):
        if site.qname not in QUANTIZE:
            continue
        config = site.arg(1, "config")
        if config is not None and _is_mx_config(facts, config.value):
            found.append(site)
    return found


def is_mx(site: CallSite) -> bool:
    return site.qname in QUANTIZE


def _is_mx_config(facts: AmpFacts, expr: ast.expr) -> bool:
    value = _bound_once(facts, expr)
    return value is not None and _names_mx_config(facts, value)


def _bound_once(facts: AmpFacts, expr: ast.expr) -> ast.expr | None:
    """``expr``, or for a name the one value this module binds it to (None if bound otherwise)."""
    if type(expr) is ast.Name:
        values = [assignment.value for assignment in facts.assignments if assignment.target == expr.id]
        return values[0] if len(values) == 1 else None
    return expr


def _names_mx_config(facts: AmpFacts, expr: ast.expr) -> bool:
    """``MXLinearConfig(...)``, ``MXLinearConfig.from_recipe_name(...)`` and the like."""
    for node in ast.walk(expr):
        if type(node) in (ast.Name, ast.Attribute) and facts.qualify(node) in _MX_CONFIGS:
            return True
    return False


# The training configs whose ``quantize_`` handler converts every layer inside the module the
# filter passed (torchao's ``_moe_training_transform`` swaps all its parameters).
_WHOLE_MODULE_CONFIGS = frozenset(
    {
        "torchao.prototype.moe_training.MXFP8TrainingOpConfig",
        "torchao.prototype.moe_training.config.MXFP8TrainingOpConfig",
    }
)


def passes_the_model(facts: AmpFacts, site: CallSite, filter_fn: ast.expr | None) -> bool:
    """Whether ``quantize_``'s ``filter_fn`` surely returns True for the model itself: quantize_
    asks it first about the module it was given, with the name ``""``, and a training config
    then converts every layer inside that module, whatever the filter says of them. Known for
    a lambda whose body decides it from the name alone (``fqn != "output"``,
    ``"head" not in fqn``); anything that reads the module (``isinstance``) is not judged."""
    config = site.arg(1, "config")
    value = _bound_once(facts, config.value) if config is not None else None
    if value is None or not any(
        type(node) in (ast.Name, ast.Attribute) and facts.qualify(node) in _WHOLE_MODULE_CONFIGS
        for node in ast.walk(value)
    ):
        return False
    if type(filter_fn) is not ast.Lambda:
        return False
    params = [a.arg for a in (*filter_fn.args.posonlyargs, *filter_fn.args.args)]
    return len(params) == 2 and _at_root(filter_fn.body, params[1]) is True


def _at_root(expr: ast.expr, fqn: str) -> object:
    """The value of ``expr`` with the parameter ``fqn`` bound to ``""``: a str, a bool, a tuple
    of strs, or ``_UNKNOWN``."""
    if isinstance(expr, ast.Constant) and type(expr.value) in (str, bool):
        return expr.value
    if isinstance(expr, ast.Name):
        return "" if expr.id == fqn else _UNKNOWN
    if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
        items = [_at_root(e, fqn) for e in expr.elts]
        return tuple(items) if all(type(i) is str for i in items) else _UNKNOWN
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        value = _at_root(expr.operand, fqn)
        return not value if type(value) in (bool, str) else _UNKNOWN
    if isinstance(expr, ast.BoolOp):
        values = [_at_root(v, fqn) for v in expr.values]
        known = [bool(v) for v in values if type(v) in (bool, str)]
        if isinstance(expr.op, ast.And):
            return False if False in known else True if len(known) == len(values) else _UNKNOWN
        return True if True in known else False if len(known) == len(values) else _UNKNOWN
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1:
        return _compare(expr.ops[0], _at_root(expr.left, fqn), _at_root(expr.comparators[0], fqn))
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr in ("startswith", "endswith")
    ):
        subject = _at_root(expr.func.value, fqn)
        arg = _at_root(expr.args[0], fqn) if len(expr.args) == 1 else _UNKNOWN
        if type(subject) is str and type(arg) in (str, tuple):
            return bool(getattr(subject, expr.func.attr)(arg))
    return _UNKNOWN


def _compare(op: ast.cmpop, left: object, right: object) -> object:
    if left is _UNKNOWN or right is _UNKNOWN:
        return _UNKNOWN
    if type(op) is ast.Eq:
        return left == right
    if type(op) is ast.NotEq:
        return left != right
    if type(op) in (ast.In, ast.NotIn) and type(left) is str and type(right) in (str, tuple):
        found = left in right  # type: ignore[operator]
        return found if type(op) is ast.In else not found
    return _UNKNOWN


_UNKNOWN = object()
