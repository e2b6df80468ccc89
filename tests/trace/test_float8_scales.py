"""AMP521: float8 scales that went wrong at run time (an operand holding inf or NaN, an amax
under torchao's floor, an input that is all zeros), and which layer the backward's casts belong
to (the op census's module, which follows the autograd node in the backward)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import trace_source

from ampdoctor.trace.observations import CastStats, Observations
from ampdoctor.trace.rulebase import Locator, Thresholds
from ampdoctor.trace.rules.float8_rules import float8_scale_anomaly

pytest.importorskip("torchao.float8", reason="torchao is not installed (the fp8 extra)")

TWO_TOWERS = """\
import torch
from torch import nn
from torchao.float8 import convert_to_float8_training

torch.manual_seed(0)


class TwoTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.numeric = nn.Sequential(nn.Linear(64, 128), nn.GELU())
        self.metadata = nn.Sequential(nn.Linear(32, 128), nn.GELU())
        self.head = nn.Linear(256, 16)

    def forward(self, numeric, metadata):
        return self.head(torch.cat([self.numeric(numeric), self.metadata(metadata)], dim=1))


model = TwoTower()
convert_to_float8_training(model, module_filter_fn=lambda module, fqn: fqn != "head")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(4):
    metadata = {metadata}
    loss = nn.functional.cross_entropy(model(torch.randn(64, 64), metadata), torch.randint(0, 16, (64,)))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""

MLP = """\
import torch
from torch import nn
from torchao.float8 import convert_to_float8_training

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 16))
{init}
convert_to_float8_training(model, module_filter_fn=lambda module, fqn: fqn != "4")
optimizer = torch.optim.SGD(model.parameters(), lr={lr})
for step in range(4):
    x = torch.randn(64, 64)
    {poison}
    loss = nn.functional.mse_loss(model(x), torch.randn(64, 16)) * {factor}
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def _mlp(init: str = "", lr: str = "1e-3", poison: str = "pass", factor: str = "1.0") -> str:
    return MLP.format(init=init, lr=lr, poison=poison, factor=factor)


def _trace(source: str, tmp_path):
    session, _ = trace_source(source, tmp_path)
    assert session.observations.instrument_errors == []
    return session


def _found(session, code: str = "AMP521") -> list:
    return [finding for finding in session.report().findings if finding.code == code]


def _line(source: str, start: str) -> int:
    return next(n for n, text in enumerate(source.splitlines(), 1) if text.strip().startswith(start))


def test_an_input_that_is_always_zero_is_named_at_its_layer(tmp_path):
    source = TWO_TOWERS.format(metadata="torch.zeros(64, 32)  # a column the data never fills")
    found = _found(_trace(source, tmp_path))
    assert [(f.extra["module"], f.extra["role"], f.extra["anomaly"]) for f in found] == [
        ("metadata.0", "input", "zero_amax")
    ]
    # At the forward statement that calls the layer's tower.
    assert found[0].location.line == _line(source, "return self.head(")
    assert "weight gets no gradient" in found[0].message


def test_a_filled_input_and_a_zero_in_some_batches_only_are_not_reported(tmp_path):
    healthy = _trace(TWO_TOWERS.format(metadata="torch.randn(64, 32)"), tmp_path)
    assert _found(healthy) == []
    # Zeros in one batch of the two recorded (a padded last batch): not a dead input.
    sometimes = _trace(
        TWO_TOWERS.format(metadata="torch.zeros(64, 32) if step == 0 else torch.randn(64, 32)"), tmp_path
    )
    assert _found(sometimes) == []
    stats = sometimes.observations.float8_casts[("metadata.0", "input")]
    assert 0 < stats.zero_casts < stats.casts


FORKED = """\
import torch
from torch import nn
from torchao.float8 import convert_to_float8_training

torch.manual_seed(0)


class Forked(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(64, 64)
        self.left = nn.Sequential(nn.Linear(64, 128), nn.GELU())
        self.right = nn.Sequential(nn.Linear(64, 128), nn.GELU())
        self.head = nn.Linear(256, 16)

    def forward(self, x):
        h = self.trunk(x)
        return self.head(torch.cat([self.left(h), self.right(h)], dim=1))


model = Forked()
convert_to_float8_training(model, module_filter_fn=lambda module, fqn: fqn != "head")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(4):
    loss = nn.functional.mse_loss(model(torch.randn(64, 64)), torch.randn(64, 16))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""
# The branches recomputed in the backward (activation checkpointing).
CHECKPOINTED = (
    "self.left(h), self.right(h)",
    "checkpoint(self.left, h, use_reentrant=False), checkpoint(self.right, h, use_reentrant=False)",
)
# The same layers trained in float8 by the weight-wrapping API (``quantize_`` with a float8
# training config): plain ``nn.Linear`` layers whose weights run torchao's float8 GEMMs.
WRAPPED = (
    'convert_to_float8_training(model, module_filter_fn=lambda module, fqn: fqn != "head")',
    "from torchao.prototype.moe_training.config import Float8TrainingOpConfig\n"
    "from torchao.quantization import quantize_\n"
    'quantize_(model, Float8TrainingOpConfig(float8_linear_recipe="tensorwise"), '
    'filter_fn=lambda module, fqn: isinstance(module, nn.Linear) and fqn != "head")',
)


@pytest.mark.parametrize(
    "checkpointed,wrapped",
    [(False, False), (True, False), (False, True), (True, True)],
    ids=["plain", "checkpointed", "weight-wrapper", "weight-wrapper-checkpointed"],
)
def test_the_casts_of_parallel_branches_belong_to_their_own_layers(tmp_path, checkpointed, wrapped):
    # Two branches fed by one trunk: when the gradient reaches both at the concatenation, the
    # module tracker holds both as running while the second's backward runs first.
    source = FORKED
    if checkpointed:
        source = "from torch.utils.checkpoint import checkpoint\n" + source.replace(*CHECKPOINTED)
    if wrapped:
        source = source.replace(*WRAPPED)
    session = _trace(source, tmp_path)
    casts = session.observations.float8_casts
    # Each layer casts its input and weight in the forward (once more where a checkpoint
    # recomputes it) and again in the backward, and its output gradient twice (for the input's
    # and the weight's gradient), per iteration: the two branches alike.
    steps = session.observations.op_steps
    forwards = 2 if checkpointed else 1
    for layer in ("left.0", "right.0"):
        assert {role: casts[(layer, role)].casts for role in ("input", "weight", "grad_output")} == {
            "input": (forwards + 1) * steps,
            "weight": (forwards + 1) * steps,
            "grad_output": 2 * steps,
        }
    assert {module for module, _role in casts} == {"trunk", "left.0", "right.0"}
    gemms = session.observations.float8_gemms
    per_layer = {
        layer: sum(n for (module, *_), n in gemms.items() if module == layer) for layer in ("left.0", "right.0")
    }
    assert per_layer == {"left.0": (forwards + 2) * steps, "right.0": (forwards + 2) * steps}


def test_an_inf_in_the_input_is_reported_once_at_the_first_layer_it_reached(tmp_path):
    session = _trace(_mlp(poison='x[3, 5] = float("inf")'), tmp_path)
    found = _found(session)
    assert [(f.extra["module"], f.extra["role"], f.extra["anomaly"]) for f in found] == [("0", "input", "nonfinite")]
    assert found[0].extra["later"] >= 1  # the NaN went on into layer 2 and the gradients
    assert "NaN or zero" in found[0].message and "rowwise" in found[0].help
    # The flushes of that cast are not an outlier's (AMP515): a finer scale would not help.
    assert _found(session, "AMP515") == []


def test_an_operand_under_the_amax_floor_is_reported_and_not_as_an_outlier(tmp_path):
    session = _trace(_mlp(factor="1e-24"), tmp_path)
    found = _found(session)
    assert [(f.extra["module"], f.extra["role"], f.extra["anomaly"]) for f in found] == [
        ("2", "grad_output", "floored")
    ]
    assert found[0].extra["share"] > 0.9
    assert _found(session, "AMP515") == []
    # Layer 0 then gets an output gradient of zeros: a consequence, not reported again.
    assert session.observations.float8_casts[("0", "grad_output")].zero_casts > 0


def test_zero_initialized_weights_and_the_zero_gradients_behind_them_are_healthy(tmp_path):
    # A zero-initialized output projection (as in adaLN-Zero or LoRA's B), and a learning rate that
    # starts at zero: the weight and the gradient of the layer before it stay zero for a while.
    init = "torch.nn.init.zeros_(model[2].weight)"
    session = _trace(_mlp(init=init, lr="0.0"), tmp_path)
    casts = session.observations.float8_casts
    assert casts[("2", "weight")].zero_casts == casts[("2", "weight")].casts
    assert casts[("0", "grad_output")].zero_casts == casts[("0", "grad_output")].casts
    assert _found(session) == []


def test_one_cast_of_zeros_is_not_enough_and_a_weight_of_zeros_is_not_reported():
    locator = Locator("train.py", {})
    one = Observations()
    one.float8_casts[("fc", "input")] = CastStats("float8_e4m3fn", "tensorwise", casts=1, zero_casts=1)
    assert list(float8_scale_anomaly(one, Thresholds(), locator)) == []
    weight = Observations()
    weight.float8_casts[("fc", "weight")] = CastStats("float8_e4m3fn", "tensorwise", casts=4, zero_casts=4)
    weight.float8_casts[("fc", "grad_output")] = CastStats("float8_e5m2", "tensorwise", casts=4, zero_casts=4)
    assert list(float8_scale_anomaly(weight, Thresholds(), locator)) == []
    dead = Observations()
    dead.float8_casts[("fc", "input")] = CastStats("float8_e4m3fn", "tensorwise", casts=4, zero_casts=4)
    assert [f.extra["anomaly"] for f in float8_scale_anomaly(dead, Thresholds(), locator)] == ["zero_amax"]


def test_a_few_values_under_the_floor_are_not_reported():
    locator = Locator("train.py", {})
    observations = Observations()
    observations.float8_casts[("fc", "grad_output")] = CastStats(
        "float8_e5m2", "tensorwise", casts=4, nonzero=65536, flushed=114, floored=114
    )
    assert list(float8_scale_anomaly(observations, Thresholds(), locator)) == []
    observations.float8_casts[("fc", "grad_output")].floored = observations.float8_casts[
        ("fc", "grad_output")
    ].flushed = 4000
    assert [f.extra["anomaly"] for f in float8_scale_anomaly(observations, Thresholds(), locator)] == ["floored"]


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "trace"


def test_the_two_tower_fixture_names_the_tower_that_multiplies_zeros(trace_cli):
    run = trace_cli(str(FIXTURES / "float8_two_tower_buggy.py"), "--steps", "5", "--fail-on", "warning")
    assert run.exit_code == 1, run.stderr
    runtime = [(f["code"], f["extra"].get("module"), f["extra"].get("anomaly")) for f in run.report["findings"]]
    assert runtime == [("AMP521", "item.0", "zero_amax")]
    source = (FIXTURES / "float8_two_tower_buggy.py").read_text().splitlines()
    assert source[run.report["findings"][0]["line"] - 1].strip().startswith("return self.score(")
    layers = {layer["module"]: layer["casts"] for layer in run.report["float8"]["layers"]}
    assert layers["item.0"]["input"]["zero_casts"] == layers["item.0"]["input"]["casts"] > 0
    assert layers["user.0"]["input"]["zero_casts"] == 0
