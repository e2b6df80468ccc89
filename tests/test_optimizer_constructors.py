"""Which calls build an optimizer (``passes.is_optimizer_constructor``): the callee's last name,
after the imports are followed, is an optimizer class; a dotted callee whose last name is not a
class is none, whatever its first name stands for."""

from __future__ import annotations

import ast

import pytest

from ampdoctor.lint.engine import parse_source
from ampdoctor.lint.facts import build_facts
from ampdoctor.lint.passes import is_optimizer_constructor

HEADER = "import torch\nimport torch.optim as optim\nfrom torch.optim import AdamW as Fast, SGD\nimport apex\n"


def _builds(call: str) -> bool:
    source = HEADER + f"thing = {call}\n"
    module = parse_source(source)
    facts = build_facts(module, source)
    node = module.body[-1].value
    assert isinstance(node, ast.Call)
    return is_optimizer_constructor(node, facts)


@pytest.mark.parametrize(
    "call",
    [
        "torch.optim.AdamW(model.parameters())",
        "optim.SGD(params, lr=0.1)",
        "Fast(params)",  # an alias of an optimizer class
        "SGD(params)",
        "torch.optim.Lion(params)",  # any class of torch.optim
        "apex.optimizers.FusedAdam(params)",
        "bnb.optim.AdamW8bit(params)",
    ],
)
def test_optimizer_classes_build_optimizers(call):
    assert _builds(call)


@pytest.mark.parametrize(
    "call",
    [
        "self.make_optimizer(params)",  # a method: lower case, whatever ``self`` is
        "optim.lr_scheduler.StepLR(opt, 10)",  # a scheduler also has .step()
        "torch.optim.swa_utils.AveragedModel(model)",
        "torch.optim.adamw(params)",  # lower case: the functional form, no object
        "torch.nn.Linear(3, 4)",
        "build(params)",
        "factory()(params)",
    ],
)
def test_other_calls_build_none(call):
    assert not _builds(call)
