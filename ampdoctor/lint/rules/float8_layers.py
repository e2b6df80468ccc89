"""AMP609-AMP610: float8 applied to layers where it gains nothing.

torchao converts every ``nn.Linear`` it is given, however small; its own size heuristic
(``_auto_filter_for_recipe``, from GEMM benchmarks on H100) leaves out the layers for which the
float8 casts cost more than the faster GEMM saves. Transformer Engine's FP8 region changes only
Transformer Engine's own modules: plain ``torch.nn`` layers inside it run as they would outside.
Both rules follow the model only where this module builds it (``float8_training.model_calls``),
and neither package is imported here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from ..anchors import Anchors
from ..model import AmpFacts, CallSite
from ..syntax import dotted
from . import LintRule, Report, register
from .float8_training import (
    ALIGNMENT,
    LINEAR,
    conversion_filter,
    conversions,
    converted_calls,
    is_te_module,
    is_test_module,
    model_calls,
    te_region,
)
from .linear_sizes import int_constants, linear_sizes

# torchao's tensorwise heuristic: a weight of N (out_features) x K (in_features) with
# K <= 4096 and N <= 1024 is slower in float8 than in bfloat16. Its rowwise heuristic leaves out
# a wider set (N <= 2048, K <= 1024, or both N <= 4096 and K <= 2048), so a layer this small is
# slower under either recipe.
_SMALL_K = 4096
_SMALL_N = 1024
_LISTED = 3  # layers named in a message; the rest are counted
# Packages a model's code calls that never hand back a Transformer Engine layer.
_BUILD_PACKAGES = frozenset(
    {"torch", "math", "numpy", "einops", "functools", "itertools", "operator", "typing", "collections", "warnings"}
)


@register
class Float8SmallLinear(LintRule):
    code = "AMP609"
    tokens = ("convert_to_float8_training",)
    anchors = Anchors(names=("torchao", "float8_experimental"))

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        constants: dict[str, int] | None = None
        for site in conversions(facts):
            found = conversion_filter(facts, site)
            # A filter that tests sizes or names may leave the small layers out already.
            if not found.known or found.sizes or found.names or found.other:
                continue
            if constants is None:
                constants = int_constants(facts)
            converted = converted_calls(facts, [site])
            small = []
            for linear in facts.calls_named("Linear"):
                if linear.qname not in LINEAR or id(linear.node) not in converted:
                    continue
                k, n = linear_sizes(linear, constants)
                if k is None or n is None or k % ALIGNMENT or n % ALIGNMENT:
                    continue  # a size not known here, or not aligned (AMP602's finding)
                if k <= _SMALL_K and n <= _SMALL_N:
                    small.append((linear.node.lineno, k, n))
            if small:
                yield self._report(site, small)

    def _report(self, site: CallSite, small: list[tuple[int, int, int]]) -> Report:
        named = ", ".join(f"line {line}: {k} to {n}" for line, k, n in small[:_LISTED])
        more = f" and {len(small) - _LISTED} more" if len(small) > _LISTED else ""
        layers, are, they = ("layer", "is", "it runs") if len(small) == 1 else ("layers", "are", "they run")
        return Report(
            self.code,
            site.node,
            f"{len(small)} `nn.Linear` {layers} converted to float8 training here ({named}{more}) {are} too small "
            f"for float8 to pay off: with in_features <= {_SMALL_K} and out_features <= {_SMALL_N}, casting the "
            f"operands to float8 costs more than the faster GEMM saves, and {they} slower than in bfloat16",
            help="Leave small layers out with a `module_filter_fn` that tests `in_features` and `out_features` "
            "(torchao's `_auto_filter_for_recipe(recipe, filter_fqns)` applies its own size heuristic), or "
            "train this model in bfloat16",
            statement=site.statement,
        )


@register
class Fp8AutocastWithoutTeModules(LintRule):
    code = "AMP610"
    tokens = ("autocast",)
    anchors = Anchors(names=("transformer_engine",))

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if is_test_module(facts.path):
            return
        if any(is_te_module(site.qname) for site in facts.calls):
            return  # the module builds Transformer Engine layers: the region has work to do
        reported: set[int] = set()
        plain: dict[str, ast.Call | None] = {}  # per name called in a region: its first plain Linear
        for site in facts.calls:
            if type(site.node.func) is not ast.Name:
                continue
            region = te_region(facts, site)
            if region is None or id(region) in reported:
                continue
            name = site.node.func.id
            if name not in plain:
                plain[name] = None if _handed_over(facts, name) else _plain_linear(facts, name)
            linear = plain[name]
            if linear is None:
                continue
            reported.add(id(region))
            yield Report(
                self.code,
                region,
                f"`{dotted(region.func)}` runs `{name}`, a model this module builds from plain "
                f"`torch.nn` layers (`nn.Linear` on line {linear.lineno}): Transformer Engine's FP8 applies "
                "only to its own modules, so nothing in the region runs in FP8",
                help="Build the layers from `transformer_engine.pytorch` (`te.Linear`, `te.LayerNormLinear`, "
                "`te.TransformerLayer`), or convert the `torch.nn` model with torchao's "
                "`convert_to_float8_training` instead",
                statement=region,
            )


def _handed_over(facts: AmpFacts, name: str) -> bool:
    """Whether the model is passed to a call that is not torch's: Accelerate's ``convert_model``
    and ``prepare`` swap ``nn.Linear`` for ``te.Linear`` in place, and so may any helper."""
    for site in facts.calls:
        if site.qname is not None and site.qname.startswith("torch."):
            continue
        values = [*site.node.args, *(keyword.value for keyword in site.node.keywords)]
        if any(type(value) is ast.Name and value.id == name for value in values):
            return True
    return False


def _plain_linear(facts: AmpFacts, name: str) -> ast.Call | None:
    """The first ``nn.Linear`` of the model bound to ``name``, when this module builds it and
    every call made to build it is torch's, a builtin's or this module's own: anything imported
    from elsewhere may return a Transformer Engine layer."""
    calls = model_calls(facts, [name])
    first = None
    for call in calls:
        qname = facts.qualify(call.func)
        if qname is not None and qname.partition(".")[0] not in _BUILD_PACKAGES:
            return None
        if qname in LINEAR and first is None:
            first = call
    return first
