"""AMP601-AMP605, float8 training: each rule on the shape it reports and on the correct code beside
it (the rule pages hold one example of each side; these are the variants real code takes)."""

from __future__ import annotations

import pytest
from helpers import assert_kept_on_the_command_line, found_pairs

TRAIN = """\
import torch
from torch import nn
from torchao.float8 import convert_to_float8_training

VOCAB = 50257
{head}
model = nn.Sequential(nn.Linear(768, 3072), nn.GELU(), nn.Linear(3072, VOCAB))
convert_to_float8_training(model{filter})
model = torch.compile(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
for x, y in loader:
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
"""


def _train(head: str = "", filter: str = "") -> str:
    return TRAIN.format(head=head, filter=filter)


def test_a_whole_model_converted_without_a_filter_reports_the_head_and_the_odd_sized_layer():
    assert found_pairs(_train()) == [(7, "AMP602"), (8, "AMP601")]


def test_a_size_only_lambda_still_converts_the_head():
    source = _train(filter=", module_filter_fn=lambda m, fqn: m.in_features % 16 == 0 and m.out_features % 16 == 0")
    assert found_pairs(source) == [(8, "AMP601")]


def test_a_size_only_filter_with_builtins_still_converts_the_head():
    lam = "lambda m, fqn: isinstance(m, nn.Linear) and min(m.in_features, m.out_features) >= 128"
    assert found_pairs(_train(filter=f", module_filter_fn={lam}")) == [(8, "AMP601")]


def test_a_size_only_function_of_the_module_still_converts_the_head():
    head = "\n\ndef sized(module, fqn):\n    return module.weight.shape[0] % 16 == 0\n\n"
    assert found_pairs(_train(head, ", module_filter_fn=sized")) == [(13, "AMP601")]


@pytest.mark.parametrize(
    "head, filter",
    [
        # the name is read: the head may be left out (and the odd-sized layer with it)
        ("", ', module_filter_fn=lambda m, fqn: fqn != "2"'),
        (
            "\n\ndef keep(mod, fqn):\n    if fqn.endswith('lm_head'):\n        return False\n    return True\n\n",
            ", module_filter_fn=keep",
        ),
        # something else decides: a configuration's list of layers, another object
        ("", ", module_filter_fn=lambda m, fqn: m is not skipped"),
        ("", ", module_filter_fn=lambda m, fqn: m.out_features != cfg.vocab_size"),
        # a filter from elsewhere: what it keeps is unknown
        ("from filters import keep_in_float8\n", ", module_filter_fn=keep_in_float8"),
        ("", ", module_filter_fn=filters.for_recipe('rowwise')"),
    ],
)
def test_a_filter_that_may_leave_layers_out_is_trusted(head, filter):
    assert found_pairs(_train(head, filter)) == []


def test_blocks_converted_one_by_one_leave_the_head_out():
    source = """\
import torch
from torchao.float8 import convert_to_float8_training

model = GPT(config)
for block in model.transformer.h:
    convert_to_float8_training(block)
model = torch.compile(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
"""
    assert found_pairs(source) == []


def test_a_model_converted_but_trained_elsewhere_is_not_judged_here():
    source = """\
from torchao.float8 import convert_to_float8_training


def build(config):
    model = Transformer(config)
    convert_to_float8_training(model)
    return model
"""
    assert found_pairs(source) == []


def test_the_former_package_name_and_the_full_module_path_are_recognized():
    for imported in (
        "from float8_experimental.float8_linear_utils import convert_to_float8_training",
        "from torchao.float8.float8_linear_utils import convert_to_float8_training",
    ):
        source = _train().replace("from torchao.float8 import convert_to_float8_training", imported)
        assert (8, "AMP601") in found_pairs(source)


def test_another_function_of_that_name_is_not_torchao():
    source = _train().replace(
        "from torchao.float8 import convert_to_float8_training", "from mylib import convert_to_float8_training"
    )
    assert found_pairs(source) == []


@pytest.mark.parametrize("sizes", ["768, 3072", "in_features=1024, out_features=4096", "DIM, 64"])
def test_sizes_that_are_multiples_of_16_are_fine(sizes):
    source = f"""\
import torch
from torch import nn
from torchao.float8 import convert_to_float8_training

DIM = 512
layer = nn.Linear({sizes})
net = nn.Sequential(layer)
convert_to_float8_training(net)
net = torch.compile(net)
"""
    # (512 to 64 is small enough for AMP609, which test_float8_layers.py covers.)
    assert [pair for pair in found_pairs(source) if pair[1] != "AMP609"] == []


def test_odd_sizes_by_keyword_and_a_classifier_are_reported():
    source = """\
import torch
from torchao.float8 import convert_to_float8_training

backbone = torch.nn.Linear(in_features=1000, out_features=512)
classifier = torch.nn.Linear(512, 10)
net = torch.nn.Sequential(backbone, classifier)
convert_to_float8_training(net)
net = torch.compile(net)
"""
    assert found_pairs(source) == [(4, "AMP602"), (5, "AMP602")]


def test_odd_sizes_without_a_conversion_in_the_module_are_fine():
    source = "import torch\nhead = torch.nn.Linear(768, 50257)\n"
    assert found_pairs(source) == []


TE = """\
import torch
import transformer_engine.pytorch as te
from transformer_engine.common import recipe

fp8_recipe = recipe.DelayedScaling(margin=0)
for x, y in loader:
    with te.{region}:
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
{backward}
    optimizer.step()
"""


@pytest.mark.parametrize(
    "region",
    ["fp8_autocast(enabled=True, fp8_recipe=fp8_recipe)", "autocast(recipe=fp8_recipe)", "fp8_autocast(use_fp8)"],
)
def test_backward_inside_transformer_engines_region(region):
    source = TE.format(region=region, backward="        loss.backward()")
    assert found_pairs(source) == [(10, "AMP603")]


def test_a_scaled_backward_inside_the_region_is_reported_too():
    source = TE.format(region="autocast()", backward="        scaler.scale(loss).backward()")
    source = source.replace("    optimizer.step()", "    scaler.step(optimizer)\n    scaler.update()")
    assert found_pairs(source) == [(10, "AMP603")]


@pytest.mark.parametrize(
    "region, backward",
    [
        ("autocast(recipe=fp8_recipe)", "    loss.backward()"),  # after the region: right
        ("fp8_autocast(enabled=False)", "        loss.backward()"),  # the region is off
    ],
)
def test_backward_after_the_region_or_in_a_disabled_one_is_fine(region, backward):
    assert found_pairs(TE.format(region=region, backward=backward)) == []


def test_another_libraries_fp8_autocast_is_not_transformer_engines():
    source = TE.format(region="autocast()", backward="        loss.backward()").replace(
        "import transformer_engine.pytorch as te", "import transformer_engine.pytorch as _te\nimport mylib as te"
    )
    assert found_pairs(source) == []


FSDP = """\
from torch.distributed.fsdp import {wrapper}
from torchao.float8 import Float8LinearConfig, convert_to_float8_training

config = Float8LinearConfig({flag})
convert_to_float8_training(model, config=config, module_filter_fn=keep_in_float8)
{wrap}
"""


def test_float8_all_gather_under_fsdp1():
    source = FSDP.format(
        wrapper="FullyShardedDataParallel",
        flag="enable_fsdp_float8_all_gather=True",
        wrap="model = FullyShardedDataParallel(model)",
    )
    assert found_pairs(source) == [(4, "AMP604")]


def test_the_flag_set_as_an_attribute_under_fsdp1():
    source = FSDP.format(
        wrapper="FullyShardedDataParallel",
        flag="",
        wrap="config.enable_fsdp_float8_all_gather = True\nmodel = FullyShardedDataParallel(model)",
    )
    assert found_pairs(source) == [(6, "AMP604")]


@pytest.mark.parametrize(
    "wrapper, flag, wrap",
    [
        ("fully_shard", "enable_fsdp_float8_all_gather=True", "fully_shard(model)"),  # FSDP2: what it is for
        ("FullyShardedDataParallel", "enable_fsdp_float8_all_gather=False", "model = FullyShardedDataParallel(model)"),
        ("FullyShardedDataParallel", "", "model = FullyShardedDataParallel(model)"),
        # both APIs in one module (a choice between them): the flag may serve FSDP2
        (
            "FullyShardedDataParallel, fully_shard",
            "enable_fsdp_float8_all_gather=True",
            "model = fully_shard(model) if args.fsdp2 else FullyShardedDataParallel(model)",
        ),
    ],
)
def test_float8_all_gather_is_fine_under_fsdp2_or_off(wrapper, flag, wrap):
    assert found_pairs(FSDP.format(wrapper=wrapper, flag=flag, wrap=wrap)) == []


EAGER = """\
import torch
from torchao.float8 import convert_to_float8_training

model = Net().cuda()
convert_to_float8_training(model, module_filter_fn=keep_in_float8)
{compile}optimizer = torch.optim.AdamW(model.parameters())
for x, y in loader:
    loss = model(x, y)
    loss.backward()
    optimizer.step()
"""


def test_float8_trained_eagerly():
    assert found_pairs(EAGER.format(compile="")) == [(5, "AMP605")]


@pytest.mark.parametrize(
    "compile",
    [
        "model = torch.compile(model)\n",
        "model.compile()\n",
        "if args.compile:\n    model = torch.compile(model)\n",
        "model = maybe_compile(model)\n",
    ],
)
def test_float8_compiled_is_fine(compile):
    assert found_pairs(EAGER.format(compile=compile)) == []


def test_float8_converted_where_it_is_not_trained_is_not_judged():
    source = EAGER.format(compile="").replace("    loss.backward()\n", "")
    assert found_pairs(source) == []


@pytest.mark.parametrize(
    "source, codes",
    [
        (_train(), ["AMP601", "AMP602"]),
        (TE.format(region="autocast()", backward="        loss.backward()"), ["AMP603"]),
        (
            FSDP.format(
                wrapper="FullyShardedDataParallel",
                flag="enable_fsdp_float8_all_gather=True",
                wrap="model = FullyShardedDataParallel(model)",
            ),
            ["AMP604"],
        ),
        (EAGER.format(compile=""), ["AMP605"]),
    ],
)
def test_the_text_gate_keeps_what_the_rules_report(source, codes):
    assert_kept_on_the_command_line(source, codes)


def test_compile_named_only_in_a_docstring_or_comment_is_not_compiling():
    source = '"""Never compiled: see the notes."""\n' + EAGER.format(compile="# compile later\n")
    assert found_pairs(source) == [(6, "AMP605")]


@pytest.mark.parametrize("path", ["tests/test_float8.py", "test/float8/numerics.py", "prototype/train_test.py"])
def test_test_modules_exercise_the_apis_on_purpose(path):
    for source in (
        _train(),
        TE.format(region="autocast()", backward="        loss.backward()"),
        EAGER.format(compile=""),
    ):
        assert found_pairs(source, path) == []
        assert found_pairs(source, "train.py") != []


FSDP2 = """\
import torch
from torch.distributed.fsdp import fully_shard
from torchao.float8 import Float8LinearConfig, convert_to_float8_training, precompute_float8_dynamic_scale_for_fsdp

config = Float8LinearConfig(enable_fsdp_float8_all_gather=True)
convert_to_float8_training(model, config=config, module_filter_fn=keep_in_float8)
fully_shard(model)
model = torch.compile(model)
optimizer = torch.optim.AdamW(model.parameters())
for x, y in loader:
    model(x, y).backward()
    optimizer.step()
{after}"""


def test_float8_all_gather_under_fsdp2_without_the_precompute():
    assert found_pairs(FSDP2.format(after="")) == [(5, "AMP606")]


@pytest.mark.parametrize(
    "after",
    [
        "    precompute_float8_dynamic_scale_for_fsdp(model)\n",
        "optimizer.register_step_post_hook(lambda *a: precompute_float8_dynamic_scale_for_fsdp(model))\n",
        "hooks.append(precompute_float8_dynamic_scale_for_fsdp)\n",
    ],
)
def test_float8_all_gather_with_the_precompute_called_or_hooked(after):
    assert found_pairs(FSDP2.format(after=after)) == []


def test_float8_all_gather_where_the_optimizer_steps_elsewhere_is_not_judged():
    source = FSDP2.format(after="").split("optimizer = ")[0]
    assert found_pairs(source) == []


CHECKPOINTED = """\
import torch
import transformer_engine.pytorch as te
{imports}

class Model(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.blocks = torch.nn.ModuleList({block} for _ in range(4))

    def forward(self, x):
        for block in self.blocks:
            x = {checkpoint}(block, x)
        return x


def step(model, x, recipe):
    with te.fp8_autocast(fp8_recipe=recipe):
        y = model(x)
    y.sum().backward()
"""


def test_torch_checkpoint_around_transformer_engine_modules_in_an_fp8_run():
    source = CHECKPOINTED.format(
        imports="from torch.utils.checkpoint import checkpoint",
        block="te.TransformerLayer(hidden, 4 * hidden, 8)",
        checkpoint="checkpoint",
    )
    assert found_pairs(source) == [(12, "AMP607")]
    dotted = source.replace("from torch.utils.checkpoint import checkpoint", "import torch.utils.checkpoint")
    assert found_pairs(dotted.replace("= checkpoint(", "= torch.utils.checkpoint.checkpoint(")) == [(12, "AMP607")]


@pytest.mark.parametrize(
    "imports, block, checkpoint",
    [
        ("", "te.TransformerLayer(hidden, 4 * hidden, 8)", "te.checkpoint"),  # Transformer Engine's own
        ("", "te.TransformerLayer(hidden, 4 * hidden, 8)", "te.distributed.checkpoint"),
        # plain torch layers: nothing of theirs runs in FP8
        ("from torch.utils.checkpoint import checkpoint", "torch.nn.Linear(hidden, hidden)", "checkpoint"),
    ],
)
def test_transformer_engines_checkpoint_or_plain_layers_are_fine(imports, block, checkpoint):
    assert found_pairs(CHECKPOINTED.format(imports=imports, block=block, checkpoint=checkpoint)) == []


def test_torch_checkpoint_without_an_fp8_region_is_fine():
    source = CHECKPOINTED.format(
        imports="from torch.utils.checkpoint import checkpoint",
        block="te.TransformerLayer(hidden, 4 * hidden, 8)",
        checkpoint="checkpoint",
    ).replace("    with te.fp8_autocast(fp8_recipe=recipe):\n        y = model(x)\n", "    y = model(x)\n")
    assert found_pairs(source) == []


@pytest.mark.parametrize(
    "source, codes",
    [
        (FSDP2.format(after=""), ["AMP606"]),
        (
            CHECKPOINTED.format(
                imports="from torch.utils.checkpoint import checkpoint",
                block="te.TransformerLayer(hidden, 4 * hidden, 8)",
                checkpoint="checkpoint",
            ),
            ["AMP607"],
        ),
    ],
)
def test_the_text_gate_keeps_the_fsdp2_and_checkpoint_shapes(source, codes):
    assert_kept_on_the_command_line(source, codes)


CHECKPOINT = """\
import torch


def save(model, optimizer, path):
    state = {{k: v for k, v in model.state_dict().items() if {condition}}}
    torch.save({{"model": state, {optimizer}"step": 1}}, path)
"""


@pytest.mark.parametrize(
    "condition",
    [
        '"_extra_state" not in k',
        'not k.endswith("._extra_state")',
        'v is not None and "_extra_state" not in k',
    ],
)
def test_a_training_checkpoint_that_drops_the_fp8_state(condition):
    source = CHECKPOINT.format(condition=condition, optimizer='"optimizer": optimizer.state_dict(), ')
    assert found_pairs(source) == [(5, "AMP608")]
    assert_kept_on_the_command_line(source, ["AMP608"])


@pytest.mark.parametrize(
    "condition, optimizer",
    [
        ('"_extra_state" not in k', ""),  # an export of the weights: no optimizer, no resume
        ('"_extra_state" in k', '"optimizer": optimizer.state_dict(), '),  # keeps only the FP8 state
        ('not k.startswith("module.")', '"optimizer": optimizer.state_dict(), '),  # another filter
    ],
)
def test_exports_and_other_filters_are_fine(condition, optimizer):
    assert found_pairs(CHECKPOINT.format(condition=condition, optimizer=optimizer)) == []


def test_a_checkpoint_script_at_module_level_is_judged_once():
    source = """\
import torch

state = {k: v for k, v in model.state_dict().items() if "_extra_state" not in k}
torch.save({"model": state, "optimizer": optimizer.state_dict()}, "ckpt.pt")


def export(model):
    torch.save({k: v for k, v in model.state_dict().items() if "_extra_state" not in k}, "weights.pt")
"""
    assert found_pairs(source) == [(3, "AMP608")]


def test_an_odd_sized_linear_outside_the_converted_model_is_not_its_business():
    source = """\
import torch
from torch import nn
from torchao.float8 import convert_to_float8_training


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(4))
        self.head = nn.Linear(512, 10)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(512, 1000)


probe = nn.Linear(512, 7)  # a linear probe trained apart, in float32
model = Net().cuda()
convert_to_float8_training(model)
model = torch.compile(model)
"""
    # the head and the block's layer are the converted model's; the probe is not
    assert [pair for pair in found_pairs(source) if pair[1] == "AMP602"] == [(10, "AMP602"), (16, "AMP602")]


def test_a_model_built_in_another_module_gives_no_sizes_to_judge():
    source = """\
import torch
from torch import nn
from torchao.float8 import convert_to_float8_training

from models import GPT

head = nn.Linear(768, 50257)  # not the converted model's
model = GPT(config)
convert_to_float8_training(model)
model = torch.compile(model)
"""
    assert [pair for pair in found_pairs(source) if pair[1] == "AMP602"] == []


# -- MX training: torchao's quantize_ with an MX training config ----------------------------------

MX = """\
import torch
from torch import nn
from torchao.prototype.mx_formats import MXLinearConfig
from torchao.quantization import quantize_

{head}
model = nn.Sequential(nn.Linear(768, 3072), nn.GELU(), nn.Linear(3072, {out}))
quantize_(model, {config}{filter})
model = torch.compile(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
"""


def _mx(
    out: int = 50257, config: str = 'MXLinearConfig.from_recipe_name("mxfp8_cublas")', filter: str = "", head: str = ""
):
    return MX.format(out=out, config=config, filter=filter, head=head)


def test_an_mx_conversion_without_a_filter_reports_the_head_and_the_odd_sized_layer():
    from helpers import lint_text

    source = _mx()
    assert found_pairs(source) == [(7, "AMP602"), (8, "AMP601")]
    findings = {f.code: f for f in lint_text(source)}
    assert "MXFP8 training" in findings["AMP601"].message and "`filter_fn`" in findings["AMP601"].message
    assert "multiple of 32" in findings["AMP602"].message and "line 8" in findings["AMP602"].message
    assert_kept_on_the_command_line(source, ["AMP601", "AMP602"])


def test_mx_needs_multiples_of_32_where_float8_needs_16():
    # 3072 by 48: aligned for float8, not for MX blocks of 32.
    assert (7, "AMP602") in found_pairs(_mx(out=48))
    float8 = _mx(out=48).replace(
        'quantize_(model, MXLinearConfig.from_recipe_name("mxfp8_cublas"))', "convert_to_float8_training(model)"
    )
    float8 = float8.replace(
        "from torchao.quantization import quantize_", "from torchao.float8 import convert_to_float8_training"
    )
    assert (7, "AMP602") not in found_pairs(float8)


@pytest.mark.parametrize(
    "config, head",
    [
        ("mx_config", "mx_config = MXLinearConfig(block_size=32)\n"),  # a name bound once
        (
            "MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.MXFP8_RCEIL)",
            "from torchao.prototype.moe_training.config import MXFP8TrainingOpConfig, MXFP8TrainingRecipe\n",
        ),
        ("config=MXLinearConfig()", ""),
    ],
)
def test_mx_configs_are_recognised_however_they_are_passed(config, head):
    codes = {code for _, code in found_pairs(_mx(config=config, head=head))}
    assert codes == {"AMP601", "AMP602"}


@pytest.mark.parametrize(
    "config, filter, head",
    [
        # a filter that reads names or sizes: trusted, as for float8
        ("MXLinearConfig()", ", filter_fn=lambda mod, fqn: fqn != '2'", ""),
        ("MXLinearConfig()", ", lambda mod, fqn: mod.in_features % 32 == 0 and fqn != '2'", ""),
        # not an MX training config: quantize_ for inference is not training
        ("Int8WeightOnlyConfig()", "", "from torchao.quantization import Int8WeightOnlyConfig\n"),
        # a config bound twice: which one reaches the call is not known here
        ("mx_config", "", "mx_config = MXLinearConfig()\nmx_config = other_config()\n"),
    ],
)
def test_mx_conversions_that_may_be_fine_are_not_reported(config, filter, head):
    assert found_pairs(_mx(config=config, filter=filter, head=head)) == []


MX_TRAINING = "MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.MXFP8_RCEIL)"
MX_TRAINING_IMPORT = "from torchao.prototype.moe_training.config import MXFP8TrainingOpConfig, MXFP8TrainingRecipe\n"


@pytest.mark.parametrize(
    "filter",
    [
        "lambda module, fqn: fqn != '2'",
        "lambda module, fqn: 'lm_head' not in fqn",
        "lambda module, fqn: not fqn.startswith('2')",
        "lambda module, fqn: fqn not in ('2', 'lm_head')",
        "lambda module, fqn: fqn != '2' and fqn != 'head'",
    ],
)
def test_an_mx_training_filter_that_passes_the_model_itself_is_reported(filter):
    from helpers import lint_text

    # 3072 by 64 (multiples of 32): only the filter is wrong.
    source = _mx(out=64, config=MX_TRAINING, head=MX_TRAINING_IMPORT, filter=f", filter_fn={filter}")
    line = next(n for n, text in enumerate(source.splitlines(), 1) if text.startswith("quantize_("))
    assert found_pairs(source) == [(line, "AMP601")]
    (finding,) = lint_text(source)
    assert '`""`' in finding.message and "isinstance(module, nn.Linear)" in finding.help
    assert finding.location.column > 20  # at the filter, not the call


@pytest.mark.parametrize(
    "config, filter",
    [
        # the module's type tested first: the model itself does not pass
        (MX_TRAINING, "lambda module, fqn: isinstance(module, nn.Linear) and fqn != '2'"),
        # a name that the model's own ("") does not hold: quantize_ goes on to its children
        (MX_TRAINING, "lambda module, fqn: fqn.startswith('blocks.')"),
        (MX_TRAINING, "lambda module, fqn: any(target in fqn for target in TARGETS)"),
        # a name bound elsewhere: not worked out
        (MX_TRAINING, "lambda module, fqn: fqn not in SKIP"),
        # the older config converts each Linear the filter passes, not the whole module
        ("MXLinearConfig()", "lambda module, fqn: fqn != '2'"),
    ],
)
def test_mx_filters_that_do_not_pass_the_model_itself_are_not_reported(config, filter):
    source = _mx(out=64, config=config, head=MX_TRAINING_IMPORT, filter=f", filter_fn={filter}")
    assert found_pairs(source) == []


def test_a_model_built_by_a_factory_of_the_module_is_followed_to_its_layers():
    source = """\
import torch
from torch import nn
from torchao.float8 import convert_to_float8_training

VOCAB = 50257


def build_model():
    layers = nn.Sequential(nn.Linear(768, 3072), nn.GELU(), nn.Linear(3072, VOCAB))
    return layers.cuda()


model = build_model()
convert_to_float8_training(model, module_filter_fn=lambda m, fqn: m.in_features >= 768)
model = torch.compile(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
"""
    # The sizes-only filter keeps AMP602 quiet (it may test alignment); without it, the odd layer.
    assert found_pairs(source) == [(14, "AMP601")]
    unfiltered = source.replace(", module_filter_fn=lambda m, fqn: m.in_features >= 768", "")
    assert found_pairs(unfiltered) == [(9, "AMP602"), (14, "AMP601")]
    # A factory imported from elsewhere is not followed.
    imported = unfiltered.replace("def build_model():", "def other():").replace(
        "import torch\n", "import torch\nfrom models import build_model\n"
    )
    assert [code for _, code in found_pairs(imported)] == ["AMP601"]
