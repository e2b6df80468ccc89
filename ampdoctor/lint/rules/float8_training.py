"""AMP6xx: float8 training set up in a way that loses accuracy, fails on the GPU or gains nothing.

torchao's ``convert_to_float8_training`` swaps a model's ``nn.Linear`` layers for float8 ones
(every one of them unless ``module_filter_fn`` says otherwise); Transformer Engine runs its own
modules in FP8 inside ``te.autocast`` (``te.fp8_autocast`` before it). Both are matched by their
qualified names: neither package is imported here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator

from ..anchors import Anchors
from ..model import AmpFacts, CallSite
from ..syntax import FUNCTION_TYPES, dotted
from . import LintRule, Report, register
from .linear_sizes import int_constants, linear_sizes
from .mx_training import MX_BLOCK, is_mx, mx_conversions, passes_the_model

# The packages whose ``convert_to_float8_training`` swaps Linear layers for float8 ones
# (float8_experimental is torchao.float8's former name).
_CONVERTERS = ("torchao.", "float8_experimental.")
_CONVERT = "convert_to_float8_training"
# Transformer Engine's FP8 region: ``autocast`` (2.x) and the ``fp8_autocast`` it deprecates.
_TE_REGIONS = frozenset(
    {
        "transformer_engine.pytorch.autocast",
        "transformer_engine.pytorch.fp8_autocast",
        "transformer_engine.pytorch.quantization.autocast",
        "transformer_engine.pytorch.quantization.fp8_autocast",
        "transformer_engine.pytorch.fp8.fp8_autocast",
    }
)
LINEAR = frozenset({"torch.nn.Linear", "torch.nn.modules.linear.Linear"})
_FSDP1 = frozenset(
    {
        "torch.distributed.fsdp.FullyShardedDataParallel",
        "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
    }
)
# FSDP2's entry point, under its public and earlier homes.
_FSDP2 = frozenset(
    {
        "torch.distributed.fsdp.fully_shard",
        "torch.distributed.fsdp._fully_shard.fully_shard",
        "torch.distributed._composable.fsdp.fully_shard",
        "torch.distributed._composable.fsdp.fully_shard.fully_shard",
    }
)
_ALL_GATHER_FLAG = "enable_fsdp_float8_all_gather"
# float8 GEMMs (``torch._scaled_mm``) need both sizes of a weight to be multiples of this.
ALIGNMENT = 16
# What a size-only filter reads of the module it is given.
_SIZE_ATTRIBUTES = frozenset({"in_features", "out_features", "weight", "shape", "bias", "size"})
# Names a filter may use without saying anything about which layer it is.
_NEUTRAL_NAMES = frozenset(
    {"isinstance", "hasattr", "getattr", "len", "min", "max", "abs", "int", "all", "any", "torch", "nn"}
)

_CONVERSION = Anchors(names=("torchao", "float8_experimental"))


def is_test_module(path: str) -> bool:
    """A test module (in a ``test``/``tests`` folder, ``test_*.py``, ``*_test.py``): it converts
    toy models and runs FP8 regions to exercise the libraries on purpose, not to train."""
    parts = path.replace("\\", "/").split("/")
    stem = parts[-1][:-3] if parts[-1].endswith(".py") else parts[-1]
    return any(part in ("test", "tests") for part in parts[:-1]) or stem.startswith("test_") or stem.endswith("_test")


def conversions(facts: AmpFacts) -> list[CallSite]:
    """The module's calls of a float8 training conversion (none in a test module)."""
    if is_test_module(facts.path):
        return []
    return [
        site
        for site in facts.calls_named(_CONVERT)
        if site.qname is not None and site.qname.endswith("." + _CONVERT) and site.qname.startswith(_CONVERTERS)
    ]


class Filter:
    """What a conversion's ``module_filter_fn`` is known to look at. ``known``: its body was found
    (a lambda, or a function of this module named by the argument); without it, nothing is
    assumed. ``names``: it reads the layer's name (its second parameter); ``sizes``: it reads
    the layer's sizes; ``other``: it reads anything else (a config, another module's layer)."""

    __slots__ = ("known", "names", "sizes", "other")

    def __init__(self, known: bool, names: bool = False, sizes: bool = False, other: bool = False) -> None:
        self.known = known
        self.names = names
        self.sizes = sizes
        self.other = other


_NO_FILTER = Filter(True)


def conversion_filter(facts: AmpFacts, site: CallSite) -> Filter:
    """The filter passed to a conversion call (``_NO_FILTER`` when none is): float8's
    ``module_filter_fn``, or ``quantize_``'s ``filter_fn`` for an MX conversion."""
    arg = site.arg(2, "filter_fn") if is_mx(site) else site.arg(None, "module_filter_fn")
    if arg is None:
        return _NO_FILTER
    value = arg.value
    if type(value) is ast.Constant and value.value is None:
        return _NO_FILTER
    if type(value) is ast.Lambda:
        return _reads(value.args, [value.body])
    name = dotted(value)
    if name is None or "." in name:
        return Filter(False)
    for function, _frame in facts.functions:
        if function.name == name:
            return _reads(function.args, function.body)
    return Filter(False)


def _reads(arguments: ast.arguments, body: list[ast.stmt] | list[ast.expr]) -> Filter:
    params = [a.arg for a in (*arguments.posonlyargs, *arguments.args)]
    if len(params) < 2:
        return Filter(False)  # not a (module, name) filter: nothing is known of what it keeps
    module, fqn = params[0], params[1]
    names = sizes = other = False
    for statement in body:
        for node in ast.walk(statement):
            if type(node) is ast.Name:
                if node.id == fqn:
                    names = True
                elif node.id != module and node.id not in _NEUTRAL_NAMES and node.id not in params:
                    other = True
            elif type(node) is ast.Attribute and dotted(node.value) == module:
                if node.attr in _SIZE_ATTRIBUTES:
                    sizes = True
                else:
                    other = True
            elif type(node) in FUNCTION_TYPES or type(node) is ast.Lambda:
                other = True  # a helper of its own: not read further
    return Filter(True, names, sizes, other)


def _trained(facts: AmpFacts, model: str) -> bool:
    """Whether the module builds an optimizer (or anything) over ``model.parameters()``."""
    return any(site.receiver == model for site in facts.calls_named("parameters"))


def _all_conversions(facts: AmpFacts) -> list[CallSite]:
    """float8 conversions and MX ones (none in a test module)."""
    return [*conversions(facts), *mx_conversions(facts)] if not is_test_module(facts.path) else []


def _format(site: CallSite) -> tuple[str, int, str]:
    """(the format's name, the size both weight dimensions must divide by, the filter's name)."""
    return ("MXFP8", MX_BLOCK, "filter_fn") if is_mx(site) else ("float8", ALIGNMENT, "module_filter_fn")


@register
class Float8OutputHead(LintRule):
    code = "AMP601"
    tokens = (_CONVERT, "quantize_")
    anchors = _CONVERSION

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        for site in _all_conversions(facts):
            model = site.arg(0, "module")
            spelled = dotted(model.value) if model is not None else None
            if spelled is None or not _trained(facts, spelled):
                continue  # a block or a sub-module converted on its own: its head is not in it
            found = conversion_filter(facts, site)
            name, alignment, keyword = _format(site)
            given = site.arg(2, "filter_fn") if is_mx(site) else None
            if given is not None and passes_the_model(facts, site, given.value):
                yield Report(
                    self.code,
                    given.value,
                    f"the `filter_fn` returns True for `{spelled}` itself: `quantize_` asks it first about the "
                    'module it is given (its name is `""`), and the MXFP8 training config then converts every '
                    "layer inside, the output head this filter meant to keep out included",
                    help="Test the module's type first: `lambda module, fqn: isinstance(module, nn.Linear) and ...`",
                    statement=site.statement,
                )
                continue
            if not found.known or found.names or found.other:
                continue
            if found is _NO_FILTER:
                why = f"without a `{keyword}`, every `nn.Linear` is converted"
            else:
                why = f"the `{keyword}` never looks at the layer's name"
            yield Report(
                self.code,
                site.node,
                f"`{spelled}` is converted to {name} training and {why}: the output head (`lm_head`, "
                f"the classifier) runs its GEMMs in {name} too, where the loss is most sensitive to "
                "rounding (a loss gap or divergence against bfloat16)",
                help=f"Pass a `{keyword}(module, fqn)` that returns False for the output layer's name "
                f"(and for layers whose sizes are not multiples of {alignment})",
                statement=site.statement,
            )


@register
class Float8UnalignedLinear(LintRule):
    code = "AMP602"
    tokens = (_CONVERT, "quantize_")
    anchors = _CONVERSION

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        sites = _all_conversions(facts)
        if not sites:
            return
        for site in sites:
            found = conversion_filter(facts, site)
            # A filter that tests sizes keeps such layers out; one that picks layers by name may.
            if not found.known or found.sizes or found.names or found.other:
                return
        constants = int_constants(facts)
        reported: set[int] = set()
        for site in sites:
            name, alignment, keyword = _format(site)
            converted = converted_calls(facts, [site])
            for linear in self._linears(facts):
                if id(linear.node) not in converted or id(linear.node) in reported:
                    continue  # not in a model this call converts (a probe, another model)
                sizes = [
                    f"{size_name}={size}"
                    for size_name, size in zip(("in_features", "out_features"), linear_sizes(linear, constants))
                    if size is not None and size % alignment
                ]
                if not sizes:
                    continue
                reported.add(id(linear.node))
                yield Report(
                    self.code,
                    linear.node,
                    f"`nn.Linear` with {' and '.join(sizes)}, not a multiple of {alignment}, is converted to "
                    f"{name} training (line {site.node.lineno}): {_WHY_ALIGNED[name]}",
                    help=f"Pad the size to a multiple of {alignment} (a vocabulary or a class count), or leave "
                    f"the layer out with a `{keyword}` that tests `in_features` and `out_features`",
                    statement=linear.statement,
                )

    @staticmethod
    def _linears(facts: AmpFacts) -> Iterator[CallSite]:
        for site in facts.calls_named("Linear"):
            if site.qname in LINEAR:
                yield site


_WHY_ALIGNED = {
    "float8": f"float8 GEMMs on the GPU need both sizes of the weight divisible by {ALIGNMENT}, so the layer "
    "fails at its first forward",
    "MXFP8": f"MX formats scale blocks of {MX_BLOCK} values along each GEMM's inner dimension (in_features "
    f"forward, out_features for the input gradient), so both sizes must be multiples of {MX_BLOCK}",
}


# Module methods that return the module itself: ``Net().cuda()`` is the ``Net``.
_RETURNS_MODULE = frozenset({"to", "cuda", "cpu", "bfloat16", "half", "float", "train", "requires_grad_"})
_CONTAINERS = frozenset({"torch.nn.Sequential", "torch.nn.ModuleList", "torch.nn.ModuleDict"})


def converted_calls(facts: AmpFacts, sites: list[CallSite]) -> set[int]:
    """The calls (by node id) that build a model these conversion calls convert (``model_calls``)."""
    names = []
    for site in sites:
        model = site.arg(0, "module")
        spelled = dotted(model.value) if model is not None else None
        if spelled is not None:
            names.append(spelled)
    return {id(call) for call in model_calls(facts, names)}


def model_calls(facts: AmpFacts, names: Iterable[str]) -> list[ast.Call]:
    """The calls made to build the models bound to ``names``, where this module builds them: a
    name's value is a class of this module (its methods, and the classes of this module they
    build, in turn), an ``nn.Sequential(...)``/``nn.Linear(...)`` (its arguments, and the names
    bound to a layer or a class it holds), or a call of a module-level function of this module
    (what it returns, in turn). A model built elsewhere contributes nothing."""
    classes = {node.name: node for node, _bases in facts.classes}
    factories = {node.name: node for node in facts.module.body if isinstance(node, FUNCTION_TYPES)}
    seen_factories: set[str] = set()
    values: dict[str, list[ast.expr]] = {}
    for assignment in facts.assignments:
        values.setdefault(assignment.target, []).append(assignment.value)
    roots: list[ast.AST] = []
    seen_classes: set[str] = set()
    pending = []
    for bound in names:
        pending.extend(values.get(bound, []))
    seen_names: set[str] = set()
    seen_calls: set[int] = set()
    while pending:
        value = pending.pop()
        if id(value) in seen_calls:
            continue
        seen_calls.add(id(value))
        while type(value) is ast.Call and type(value.func) is ast.Attribute and value.func.attr in _RETURNS_MODULE:
            value = value.func.value
        if type(value) is ast.Name:
            if value.id not in seen_names:
                seen_names.add(value.id)
                pending.extend(values.get(value.id, []))
            continue
        if type(value) is not ast.Call:
            continue
        name = dotted(value.func)
        if name in classes and name not in seen_classes:
            seen_classes.add(name)
            roots.append(classes[name])
            pending.extend(_built_classes(classes[name], classes))
        elif name is not None and name in factories and name not in seen_factories:
            seen_factories.add(name)  # ``model = build_model()``: what the factory returns
            pending.extend(
                node.value
                for node in _own_nodes(factories[name])
                if type(node) is ast.Return and node.value is not None
            )
        elif facts.qualify(value.func) in _CONTAINERS or facts.qualify(value.func) in LINEAR:
            roots.append(value)
            # What the container holds: names bound to layers, and this module's classes.
            pending.extend(
                node for node in ast.walk(value) if node is not value and isinstance(node, (ast.Name, ast.Call))
            )
    return [node for root in roots for node in ast.walk(root) if type(node) is ast.Call]


def _built_classes(node: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> list[ast.expr]:
    """The calls of this module's classes made in a class's body (``Block(dim)`` in a model)."""
    return [
        call
        for call in ast.walk(node)
        if type(call) is ast.Call and type(call.func) is ast.Name and call.func.id in classes
    ]


def te_region(facts: AmpFacts, site: CallSite) -> ast.Call | None:
    """The enabled Transformer Engine FP8 region (the ``with`` item's call) a call runs in."""
    for ref in site.withs:
        expr = ref.expr
        if ref.decorator or type(expr) is not ast.Call:
            continue
        if facts.qualify(expr.func) in _TE_REGIONS and _region_enabled(expr):
            return expr
    return None


def _region_enabled(call: ast.Call) -> bool:
    """Whether a Transformer Engine region may be on (only a literal ``enabled=False`` says no)."""
    for keyword in call.keywords:
        if keyword.arg == "enabled":
            return not (type(keyword.value) is ast.Constant and keyword.value.value is False)
    if call.args:
        first = call.args[0]
        return not (type(first) is ast.Constant and first.value is False)
    return True


@register
class BackwardInFp8Autocast(LintRule):
    code = "AMP603"
    tokens = ("autocast",)
    needs = (rb"backward",)
    anchors = Anchors(names=("transformer_engine",))

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if is_test_module(facts.path):
            return
        for site in facts.calls:
            if site.method != "backward" and site.qname != "torch.autograd.backward":
                continue
            region = te_region(facts, site)
            if region is None:
                continue
            yield Report(
                self.code,
                site.node,
                f"`backward()` runs inside Transformer Engine's FP8 region (`{dotted(region.func)}` on line "
                f"{region.lineno}): the region reduces the amax history and updates the scaling factors "
                "when it exits, so the backward pass runs before they are ready",
                help="Close the region after the forward pass and the loss; call backward outside it "
                "(it still runs in FP8: the forward decides that)",
                statement=site.statement,
            )


def _flag_set(facts: AmpFacts) -> ast.AST | None:
    """Where float8 all-gather is turned on: ``enable_fsdp_float8_all_gather=True`` in a call, or
    assigned True to an attribute of that name."""
    for site in facts.calls:
        for keyword in site.node.keywords:
            if keyword.arg == _ALL_GATHER_FLAG and type(keyword.value) is ast.Constant and keyword.value.value is True:
                return keyword.value
    for assignment in facts.assignments:
        if assignment.target.rsplit(".", 1)[-1] == _ALL_GATHER_FLAG:
            value = assignment.value
            if type(value) is ast.Constant and value.value is True:
                return value
    return None


@register
class Float8AllGatherWithFsdp1(LintRule):
    code = "AMP604"
    tokens = (_ALL_GATHER_FLAG,)
    needs = (rb"FullyShardedDataParallel",)
    anchors = Anchors(names=("torch.distributed.fsdp",))

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if is_test_module(facts.path):
            return
        flag = _flag_set(facts)
        if flag is None:
            return
        fsdp1 = [site for site in facts.calls if site.qname in _FSDP1]
        if not fsdp1 or any(site.qname in _FSDP2 for site in facts.calls):
            return  # FSDP2 (``fully_shard``) is what float8 all-gather is made for
        yield Report(
            self.code,
            flag,
            f"`{_ALL_GATHER_FLAG}=True` with FSDP1 (`FullyShardedDataParallel` on line {fsdp1[0].node.lineno}): "
            "torchao all-gathers float8 weights only through FSDP2's `fully_shard`, and FSDP1's flat "
            "parameters do not carry the float8 weight wrapper that the flag relies on",
            help="Shard with `torch.distributed.fsdp.fully_shard` (FSDP2), or leave the flag off under FSDP1",
        )


@register
class Float8WithoutCompile(LintRule):
    code = "AMP605"
    tokens = (_CONVERT,)
    needs = (rb"backward",)
    anchors = _CONVERSION

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        sites = conversions(facts)
        if not sites or not any(site.method == "backward" for site in facts.calls):
            return  # trained elsewhere, where it may be compiled
        if _mentions_compile(facts.module):
            return  # ``torch.compile``, ``model.compile()``, a ``--compile`` flag: compiled somewhere
        for site in sites:
            yield Report(
                self.code,
                site.node,
                "the model is converted to float8 training but never compiled: torchao's float8 "
                "casts and scaling run as separate eager kernels, which cost more than the float8 "
                "GEMMs save (no speed-up, often a slow-down against bfloat16)",
                help="Compile the converted model (`model = torch.compile(model)`) before training",
                statement=site.statement,
            )


def _mentions_compile(module: ast.Module) -> bool:
    """Whether the code names ``compile`` anywhere: a name, an attribute, a keyword or parameter, a
    string (an option ``"--compile"``); docstrings and other bare strings do not count."""
    bare = {id(node.value) for node in ast.walk(module) if type(node) is ast.Expr and type(node.value) is ast.Constant}
    for node in ast.walk(module):
        if type(node) is ast.Name:
            text = node.id
        elif type(node) is ast.Attribute:
            text = node.attr
        elif type(node) is ast.keyword or type(node) is ast.arg:
            text = node.arg or ""
        elif type(node) is ast.Constant and type(node.value) is str and id(node) not in bare:
            text = node.value
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            text = node.name
        else:
            continue
        if "compile" in text:
            return True
    return False


_PRECOMPUTE = "precompute_float8_dynamic_scale_for_fsdp"


@register
class Float8ScalesNotPrecomputed(LintRule):
    code = "AMP606"
    tokens = (_ALL_GATHER_FLAG,)
    needs = (rb"fully_shard",)
    anchors = Anchors(names=("torch.distributed",))

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if is_test_module(facts.path):
            return
        flag = _flag_set(facts)
        if flag is None or not any(site.qname in _FSDP2 for site in facts.calls):
            return
        if not any(site.method == "step" and not site.node.args and not site.node.keywords for site in facts.calls):
            return  # the optimizer steps elsewhere, where the scales may be precomputed
        if _named(facts.module, _PRECOMPUTE):
            return  # called, or handed to a hook (``register_step_post_hook``)
        yield Report(
            self.code,
            flag,
            f"`{_ALL_GATHER_FLAG}=True` under FSDP2, but `{_PRECOMPUTE}` is never called: each float8 "
            "weight then computes its own scale with a separate all-reduce at every forward, instead "
            "of one all-reduce for all of them after the optimizer step",
            help=f"Call `{_PRECOMPUTE}(model)` right after each `optimizer.step()`",
        )


def _named(module: ast.Module, name: str) -> bool:
    """Whether the code uses ``name`` (a name or an attribute; an import alone does not count)."""
    for node in ast.walk(module):
        if (type(node) is ast.Name and node.id == name) or (type(node) is ast.Attribute and node.attr == name):
            return True
    return False


# torch's activation checkpointing, which Transformer Engine's own replaces for its modules.
_TORCH_CHECKPOINT = frozenset({"torch.utils.checkpoint.checkpoint", "torch.utils.checkpoint.checkpoint_sequential"})


@register
class TorchCheckpointWithFp8(LintRule):
    code = "AMP607"
    tokens = ("checkpoint",)
    needs = (rb"autocast",)
    anchors = Anchors(names=("transformer_engine",), requires_names=("torch.utils.checkpoint",))

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if is_test_module(facts.path):
            return
        if not any(
            ref.expr is not None and type(ref.expr) is ast.Call and facts.qualify(ref.expr.func) in _TE_REGIONS
            for site in facts.calls
            for ref in site.withs
        ) and not any(site.qname in _TE_REGIONS for site in facts.calls):
            return
        if not any(is_te_module(site.qname) for site in facts.calls):
            return  # the checkpointed code has no Transformer Engine module of this file's making
        for site in facts.calls:
            if site.qname in _TORCH_CHECKPOINT:
                yield Report(
                    self.code,
                    site.node,
                    f"`{site.qname}` recomputes Transformer Engine modules in the backward pass, outside "
                    "the FP8 region: the recomputed forward runs without the forward's FP8 recipe and "
                    "scaling factors, so the activations it rebuilds are not the ones the forward used",
                    help="Use `transformer_engine.pytorch.checkpoint` (`te.checkpoint`), which re-enters the "
                    "forward's FP8 region for the recomputation",
                    statement=site.statement,
                )


def is_te_module(qname: str | None) -> bool:
    """A Transformer Engine module class (``te.Linear``, ``te.TransformerLayer`` ...)."""
    if qname is None or not qname.startswith("transformer_engine.pytorch."):
        return False
    return qname.rsplit(".", 1)[-1][:1].isupper()


_EXTRA_STATE = "_extra_state"


@register
class Fp8StateDropped(LintRule):
    code = "AMP608"
    tokens = (_EXTRA_STATE,)
    needs = (rb"save", rb"state_dict")
    anchors = Anchors(names=("torch.save",), requires_methods=("state_dict",))

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        if is_test_module(facts.path):
            return
        from ..passes import is_optimizer

        for frame in facts.frames:
            if not any(site.qname == "torch.save" for site in frame.calls) or not any(
                site.method == "state_dict" and is_optimizer(site.receiver, facts) for site in frame.calls
            ):
                continue  # not a training checkpoint: an export may drop what the other side cannot load
            for node in _own_nodes(frame.node):
                if _drops_extra_state(node):
                    yield Report(
                        self.code,
                        node,
                        "the checkpoint leaves out the `_extra_state` entries: Transformer Engine keeps each "
                        "FP8 module's scaling state there (scales, amax history), so a run resumed from it "
                        "starts FP8 from blank scales and its first steps overflow or underflow",
                        help="Save the state dict whole; filter `_extra_state` only when exporting to code "
                        "that cannot load it",
                    )
                    break


def _own_nodes(root: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's (or the module's) own code, without the functions and classes
    defined in it (their own frames)."""
    stack = list(ast.iter_child_nodes(root))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _drops_extra_state(node: ast.AST) -> bool:
    """A comprehension whose condition keeps keys without ``_extra_state`` (``"_extra_state" not
    in k``, ``not k.endswith("_extra_state")``)."""
    if type(node) not in (ast.DictComp, ast.ListComp, ast.SetComp, ast.GeneratorExp):
        return False
    for generator in node.generators:  # type: ignore[attr-defined]
        for condition in generator.ifs:
            if _excludes(condition):
                return True
    return False


def _excludes(condition: ast.expr) -> bool:
    if type(condition) is ast.BoolOp and type(condition.op) is ast.And:
        return any(_excludes(value) for value in condition.values)
    if type(condition) is ast.Compare and len(condition.ops) == 1 and type(condition.ops[0]) is ast.NotIn:
        left = condition.left
        return type(left) is ast.Constant and isinstance(left.value, str) and _EXTRA_STATE in left.value
    if type(condition) is ast.UnaryOp and type(condition.op) is ast.Not and type(condition.operand) is ast.Call:
        call = condition.operand
        return (
            type(call.func) is ast.Attribute
            and call.func.attr in ("endswith", "__contains__")
            and any(type(a) is ast.Constant and isinstance(a.value, str) and _EXTRA_STATE in a.value for a in call.args)
        )
    return False
