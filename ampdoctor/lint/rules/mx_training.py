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
    if type(expr) is ast.Name:
        values = [assignment.value for assignment in facts.assignments if assignment.target == expr.id]
        return len(values) == 1 and _names_mx_config(facts, values[0])
    return _names_mx_config(facts, expr)


def _names_mx_config(facts: AmpFacts, expr: ast.expr) -> bool:
    """``MXLinearConfig(...)``, ``MXLinearConfig.from_recipe_name(...)`` and the like."""
    for node in ast.walk(expr):
        if type(node) in (ast.Name, ast.Attribute) and facts.qualify(node) in _MX_CONFIGS:
            return True
    return False
