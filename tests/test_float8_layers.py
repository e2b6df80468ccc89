"""AMP609-AMP610, float8 on layers where it gains nothing: each rule on the shape it reports and on
the correct code beside it."""

from __future__ import annotations

import pytest
from helpers import assert_kept_on_the_command_line, found_pairs

SMALL = """\
import torch
from torch import nn
from torchao.float8 import convert_to_float8_training

HIDDEN = 1024
{head}
model = nn.Sequential({layers})
convert_to_float8_training(model{filter})
model = torch.compile(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
"""


def _small(layers: str, head: str = "", filter: str = ", module_filter_fn=lambda m, fqn: fqn != 'head'") -> str:
    # A filter that reads the layer's name would silence AMP609; the default one names a layer
    # only through the fqn, so the tests below pass no filter unless they test one.
    return SMALL.format(layers=layers, head=head, filter=filter)


def _codes(source: str, code: str = "AMP609") -> list[tuple[int, str]]:
    return [pair for pair in found_pairs(source) if pair[1] == code]


def test_a_model_of_small_layers_converted_whole_is_reported_once_at_the_conversion():
    source = _small("nn.Linear(512, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, 512)", filter="")
    assert _codes(source) == [(8, "AMP609")]
    assert_kept_on_the_command_line(source, ["AMP609"])


def test_the_message_names_the_small_layers_and_counts_the_rest():
    from helpers import lint_text

    layers = ", ".join("nn.Linear(256, 256)" for _ in range(5))
    findings = [f for f in lint_text(_small(layers, filter="")) if f.code == "AMP609"]
    assert len(findings) == 1
    message = findings[0].message
    assert message.startswith("5 `nn.Linear` layers") and "256 to 256" in message and "and 2 more" in message


def test_one_small_layer_is_named_in_the_singular():
    from helpers import lint_text

    findings = [f for f in lint_text(_small("nn.Linear(512, 512)", filter="")) if f.code == "AMP609"]
    assert findings[0].message.startswith(
        "1 `nn.Linear` layer converted to float8 training here (line 7: 512 to 512) is"
    )
    assert "and it runs slower" in findings[0].message


@pytest.mark.parametrize(
    "layers",
    [
        "nn.Linear(4096, 16384), nn.GELU(), nn.Linear(16384, 4096)",  # large: float8 pays off
        "nn.Linear(8192, 1024)",  # K above 4096
        "nn.Linear(1024, 2048)",  # N above 1024
        "nn.Linear(config.n_embd, 4 * config.n_embd)",  # sizes not known here
        "nn.Linear(500, 1000)",  # unaligned: AMP602's finding, not this one
    ],
)
def test_large_unknown_or_unaligned_layers_are_not_reported(layers):
    assert _codes(_small(layers, filter="")) == []


@pytest.mark.parametrize(
    "filter",
    [
        ", module_filter_fn=lambda m, fqn: m.in_features > 4096 or m.out_features > 1024",
        ", module_filter_fn=lambda m, fqn: fqn.startswith('blocks')",
        ", module_filter_fn=_auto_filter_for_recipe('tensorwise', ['output'])",
    ],
)
def test_a_filter_that_reads_sizes_or_names_or_comes_from_torchao_is_trusted(filter):
    head = "from torchao.float8 import _auto_filter_for_recipe\n"
    assert _codes(_small("nn.Linear(512, 512), nn.Linear(512, 512)", head, filter)) == []


def test_a_class_model_is_followed_to_its_layers():
    source = """\
import torch
from torch import nn
from torchao.float8 import convert_to_float8_training


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(768, 1024)
        self.down = nn.Linear(1024, 768)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


model = Mlp().cuda()
convert_to_float8_training(model)
model = torch.compile(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
"""
    assert _codes(source) == [(17, "AMP609")]


def test_a_probe_beside_the_converted_model_is_not_its_layer():
    source = """\
import torch
from torch import nn
from torchao.float8 import convert_to_float8_training

model = Transformer(config)
probe = nn.Linear(512, 512)
convert_to_float8_training(model)
model = torch.compile(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
"""
    assert _codes(source) == []


def test_a_test_module_converting_a_toy_model_is_not_reported():
    source = _small("nn.Linear(512, 512)", filter="")
    assert [pair for pair in found_pairs(source, path="tests/test_float8.py") if pair[1] == "AMP609"] == []


# -- AMP610: a Transformer Engine region around plain torch.nn layers --------------------------

REGION = """\
import torch
import transformer_engine.pytorch as te
from torch import nn
{head}
model = {model}
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
for x, y in loader:
    with te.fp8_autocast({args}):
        loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
"""


def _region(model: str, head: str = "", args: str = "enabled=True") -> str:
    return REGION.format(model=model, head=head, args=args)


def test_a_plain_sequential_in_the_region_is_reported_at_the_region():
    source = _region("nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).cuda()")
    assert _codes(source, "AMP610") == [(8, "AMP610")]
    assert_kept_on_the_command_line(source, ["AMP610"])


def test_the_newer_autocast_name_and_a_class_model_are_recognised():
    head = """

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(1024, 1024)
        self.norm = nn.LayerNorm(1024)

    def forward(self, x):
        return self.norm(self.fc(x))

"""
    source = _region("Net()", head).replace("te.fp8_autocast(enabled=True)", "te.autocast(recipe=recipe)")
    assert _codes(source, "AMP610") == [(19, "AMP610")]


@pytest.mark.parametrize(
    "model, head",
    [
        ("nn.Sequential(te.Linear(1024, 4096), nn.GELU(), te.Linear(4096, 1024))", ""),  # TE layers
        ("nn.Sequential(nn.Linear(1024, 1024), te.LayerNormLinear(1024, 1024))", ""),  # one is enough
        ("build_model(config)", "from models import build_model\n"),  # built elsewhere
        ("nn.Sequential(make_linear(1024, 1024))", "from layers import make_linear\n"),  # an imported factory
        ("GPT(config)", "from model import GPT\n"),  # a class of another module
        ("nn.Sequential(nn.GELU())", ""),  # no GEMM to run in FP8 at all
    ],
)
def test_models_that_may_hold_te_layers_are_not_reported(model, head):
    assert _codes(_region(model, head), "AMP610") == []


@pytest.mark.parametrize(
    "handover",
    [
        "from accelerate.utils.transformer_engine import convert_model\nconvert_model(model)\n",
        "model = accelerator.prepare(model)\n",
        "swap_linears(model)\n",
    ],
)
def test_a_model_handed_to_code_that_may_swap_its_layers_is_not_reported(handover):
    source = _region("nn.Sequential(nn.Linear(1024, 1024))").replace(
        "optimizer = torch", handover + "optimizer = torch"
    )
    assert _codes(source, "AMP610") == []


def test_a_module_that_builds_te_layers_elsewhere_in_it_is_not_reported():
    source = _region("nn.Sequential(nn.Linear(1024, 1024))") + "\nhead = te.Linear(1024, 1024)\n"
    assert _codes(source, "AMP610") == []


def test_a_region_turned_off_by_a_literal_is_not_reported():
    source = _region("nn.Sequential(nn.Linear(1024, 1024))", args="enabled=False")
    assert _codes(source, "AMP610") == []


def test_a_te_test_module_is_not_reported():
    source = _region("nn.Sequential(nn.Linear(1024, 1024))")
    assert [p for p in found_pairs(source, path="tests/test_fp8.py") if p[1] == "AMP610"] == []


def test_a_plain_model_from_a_factory_of_the_module_is_reported():
    head = """

def build():
    return nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024))

"""
    source = _region("build().cuda()", head)
    line = next(n for n, text in enumerate(source.splitlines(), 1) if "fp8_autocast" in text)
    assert _codes(source, "AMP610") == [(line, "AMP610")]
