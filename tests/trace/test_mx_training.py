"""MXFP8 training with torchao under the tracer (mx_watch.py): each layer's MX casts counted by
operand, what a feature's outliers flush within their blocks (AMP515), sizes the blocks do not
divide (AMP516), a head trained in MXFP8 (AMP517), a GPU without MXFP8 GEMMs (AMP519), NaN
scales and zero inputs (AMP521), layers that lose their bias (AMP522), and a run that stays
bit-identical. torchao's emulated recipe runs on the CPU."""

from __future__ import annotations

import contextlib
import io

import pytest
from helpers import trace_source

from ampdoctor.trace.mx_watch import _role

pytest.importorskip("torchao.prototype.moe_training.config", reason="torchao is not installed (the fp8 extra)")
torch = pytest.importorskip("torch")

SCRIPT = """\
import torch
from torch import nn
from torchao.prototype.moe_training.config import MXFP8TrainingOpConfig, MXFP8TrainingRecipe
from torchao.quantization import quantize_

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
quantize_(model, MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.MXFP8_EMULATED_RCEIL){keep})
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
losses = []
for step in range(4):
    x = torch.randn(128, 64)
    {outlier}
    loss = nn.functional.mse_loss(model(x), torch.randn(128, 64))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
print("losses", losses)
"""


def _script(outlier: str = "pass", keep: str = "") -> str:
    return SCRIPT.format(outlier=outlier, keep=keep)


def _trace(source: str, tmp_path):
    session, printed = trace_source(source, tmp_path)
    assert session.observations.instrument_errors == []
    return session, printed


def _codes(session) -> dict[str, list]:
    found: dict[str, list] = {}
    for finding in session.report().findings:
        found.setdefault(finding.code, []).append(finding)
    return found


def test_each_mx_layers_casts_are_counted_by_operand_and_the_converted_head_is_named(tmp_path):
    session, _ = _trace(_script(), tmp_path)
    casts = session.observations.float8_casts
    assert set(casts) == {(layer, role) for layer in ("0", "2") for role in ("input", "weight", "grad_output")}
    assert {stats.granularity for stats in casts.values()} == {"block32"}
    assert {stats.dtype for stats in casts.values()} == {"float8_e4m3fn"}
    steps = session.observations.op_steps
    # The forward casts the input and the weight once; the backward the output gradient and the
    # weight again (the transposed casts torchao makes with its own kernel are not counted).
    assert {role: casts[("0", role)].casts for role in ("input", "weight", "grad_output")} == {
        "input": steps,
        "weight": 2 * steps,
        "grad_output": steps,
    }
    assert all(stats.flushed_share < 0.001 for stats in casts.values())  # a block's range is e4m3's
    found = _codes(session)
    assert not {"AMP515", "AMP521"} & set(found)
    # No filter: the output head runs in MXFP8 (what lint's AMP601 suspects).
    assert [f.extra["module"] for f in found["AMP517"]] == ["2"]
    assert "`filter_fn`" in found["AMP517"][0].help and "MXFP8" in found["AMP517"][0].message
    layers = {layer["module"]: layer for layer in session.report().to_dict()["float8"]["layers"]}
    assert set(layers) == {"0", "2"}


def test_a_healthy_mx_run_that_keeps_its_head_out_reports_nothing(tmp_path):
    keep = ', filter_fn=lambda module, fqn: isinstance(module, nn.Linear) and fqn != "2"'
    # (the converted layer without a bias, which torchao's MX linear would leave out: AMP522)
    source = _script(keep=keep).replace("nn.Linear(64, 256)", "nn.Linear(64, 256, bias=False)")
    session, _ = _trace(source, tmp_path)
    assert {layer for layer, _role in session.observations.float8_casts} == {"0"}
    assert [f for f in session.report().findings if f.severity.label != "info"] == []


def test_a_filter_that_passes_the_model_itself_converts_the_head_and_the_run_says_so(tmp_path):
    # quantize_ asks the filter about the model first (fqn ""): passed, the MX training config
    # converts every layer inside it, the head the filter meant to keep out included.
    session, _ = _trace(_script(keep=', filter_fn=lambda module, fqn: fqn != "2"'), tmp_path)
    assert {layer for layer, _role in session.observations.float8_casts} == {"0", "2"}
    assert [f.extra["module"] for f in _codes(session)["AMP517"]] == ["2"]


def test_an_outlier_feature_flushes_the_rest_of_its_blocks_and_is_named_at_its_layer(tmp_path):
    session, _ = _trace(_script(outlier="x[:, 0] = 1e6  # a raw feature"), tmp_path)
    found = _codes(session)["AMP515"]
    assert [(f.extra["module"], f.extra["role"], f.extra["granularity"]) for f in found] == [("0", "input", "block32")]
    # The block holding the feature: 31 of each row's 64 values, about half.
    assert 0.4 < found[0].extra["share"] < 0.55
    assert "filter_fn" in found[0].help and "rowwise" not in found[0].help


def test_the_traced_mx_run_is_bit_identical_and_the_wrappers_are_removed(tmp_path):
    from torchao.prototype.moe_training.mxfp8_linear import mx_mm
    from torchao.prototype.mx_formats.mx_tensor import MXTensor

    originals = (mx_mm.__dict__["forward"], mx_mm.__dict__["backward"], MXTensor.__dict__["to_mx"])
    source = _script(outlier="x[:, 0] = 1e6")
    _, traced = _trace(source, tmp_path)
    plain = io.StringIO()
    with contextlib.redirect_stdout(plain):
        exec(compile(source, "plain.py", "exec"), {"__name__": "__main__"})
    assert traced.splitlines()[-1] == plain.getvalue().splitlines()[-1]
    assert (mx_mm.__dict__["forward"], mx_mm.__dict__["backward"], MXTensor.__dict__["to_mx"]) == originals


def test_an_operand_is_told_by_its_storage_or_by_its_transpose():
    weight = torch.randn(8, 4)
    inputs = torch.randn(2, 3, 4)
    grad = torch.randn(6, 8)
    operands = {"grad_output": grad, "weight": weight, "input": inputs}
    assert _role(inputs.reshape(-1, 4), operands) == "input"  # a view: the same storage
    assert _role(weight.t().contiguous(), operands) == "weight"  # a transposed copy
    assert _role(inputs.reshape(-1, 4).t().contiguous(), operands) == "input"
    assert _role(grad.t().contiguous(), operands) == "grad_output"
    assert _role(grad.clone(), operands) == "grad_output"  # a contiguous copy of a strided gradient
    assert _role(torch.randn(4, 8), operands) is None  # the weight's shape, not its values: not counted


def test_an_mx_layer_whose_input_is_always_zero_is_named(tmp_path):
    session, _ = _trace(_script(outlier="x = torch.zeros(128, 64)  # a batch never filled"), tmp_path)
    found = {f.extra["module"]: f for f in session.report().findings if f.code == "AMP521"}
    assert found["0"].extra["anomaly"] == "zero_amax"
    assert "ceiling" not in found["0"].message  # an MX block's scale has none
    # (Layer 2's input is zero as well where torchao's MX linear leaves out the bias: AMP522.)
    assert set(found) <= {"0", "2"}


def test_the_layers_that_ran_without_their_bias_are_named(tmp_path):
    # torchao's MX linear leaves out the bias: the converted layers that have one lose it; a
    # layer built without one, and the head kept out of the conversion, are fine.
    keep = ', filter_fn=lambda module, fqn: isinstance(module, nn.Linear) and fqn != "4"'
    source = _script(keep=keep).replace(
        "nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))",
        "nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256, bias=False), nn.GELU(), nn.Linear(256, 64))",
    )
    session, _ = _trace(source, tmp_path)
    assert session.observations.mx_bias_dropped == ["0"]
    found = [f for f in session.report().findings if f.code == "AMP522"]
    assert [(f.extra["layers"], f.severity.label) for f in found] == [(["0"], "error")]
    assert "bias=False" in found[0].help


def test_a_bias_is_found_under_the_output_that_adds_it():
    from ampdoctor.trace.mx_watch import _in_graph

    layer = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    assert _in_graph(layer(x).grad_fn, layer.bias)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the bias cast first: one node further down
        assert _in_graph(layer(x).grad_fn, layer.bias)
    assert not _in_graph(torch.nn.functional.linear(x, layer.weight).grad_fn, layer.bias)
    assert not _in_graph(None, layer.bias)


def test_a_run_that_died_of_a_size_the_mx_blocks_do_not_divide_names_the_layer(tmp_path):
    # A 10-way head: its forward casts along 256 features, its backward along the 10 classes,
    # which torchao refuses on the CPU as on the GPU.
    source = _script().replace("nn.Linear(256, 64))", "nn.Linear(256, 10, bias=False))")
    source = source.replace("torch.randn(128, 64))", "torch.randn(128, 10))")
    session, _ = trace_source(source, tmp_path, expect="error")
    assert session.observations.mx_refused == ("2", (128, 10))
    found = [f for f in session.report().findings if f.code == "AMP516"]
    assert [(f.extra["module"], f.extra["shape"], f.severity.label) for f in found] == [("2", [128, 10], "error")]
    assert "multiples of 32" in found[0].help and "`filter_fn`" in found[0].help


def test_the_compare_switch_skips_mx_training_and_nothing_else_quantize_does():
    import torchao.quantization as package
    import torchao.quantization.quant_api as defined
    from torchao.prototype.moe_training.config import MXFP8TrainingOpConfig, MXFP8TrainingRecipe
    from torchao.quantization import Int8WeightOnlyConfig

    from ampdoctor.trace.compare.float8_off import Float8Off

    original = defined.quantize_
    switch = Float8Off()
    switch.install()
    try:
        model = torch.nn.Sequential(torch.nn.Linear(64, 64))
        package.quantize_(model, MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.MXFP8_EMULATED_RCEIL))
        assert type(model[0].weight) is torch.nn.Parameter and switch.skipped == 1
        # An inference quantization (a frozen part's int8 weights) runs in both runs, as written.
        frozen = torch.nn.Sequential(torch.nn.Linear(32, 32))
        defined.quantize_(frozen, config=Int8WeightOnlyConfig())
        assert type(frozen[0].weight) is not torch.nn.Parameter and switch.skipped == 1
    finally:
        switch.remove()
    assert package.quantize_ is original and defined.quantize_ is original


def test_a_nan_in_the_input_is_reported_where_it_entered_mxfp8(tmp_path):
    session, _ = _trace(_script(outlier='x[3, 5] = float("nan")'), tmp_path)
    found = [f for f in session.report().findings if f.code == "AMP521"]
    assert [(f.extra["module"], f.extra["role"], f.extra["anomaly"]) for f in found] == [("0", "input", "nonfinite")]
    assert "block of 32 values" in found[0].message and "rowwise" not in found[0].help


def test_mxfp8_on_a_gpu_before_blackwell_is_named_when_the_run_dies_of_it(monkeypatch):
    from ampdoctor.trace.compare.hardware import cuda_hardware
    from ampdoctor.trace.observations import IterationRecord, Observations
    from ampdoctor.trace.rulebase import Locator, Thresholds
    from ampdoctor.trace.rules import float8_rules

    hopper = cuda_hardware("mxfp8", capability=(9, 0), name="NVIDIA H200")
    monkeypatch.setattr(float8_rules, "mx_hardware", lambda index: hopper)
    monkeypatch.setattr(float8_rules, "cuda_device", lambda: "NVIDIA H200, compute capability 9.0")
    observations = Observations()
    observations.float8_imported = True
    observations.mx_device = ("cuda", 0, "AUTO")
    observations.script_error = ("RuntimeError: (a kernel's refusal, in its own words)", ("train.py", 14))
    locator = Locator("train.py", {})

    def found() -> list:
        return [
            (f.location.line, f.extra.get("recipe"))
            for f in float8_rules.float8_unsupported_gpu(observations, Thresholds(), locator)
        ]

    assert found() == [(14, "mxfp8")]
    observations.mx_device = ("cuda", 0, "EMULATED")  # torchao's emulation runs anywhere
    assert found() == []
    observations.mx_device = ("cuda", 0, "AUTO")
    observations.iterations = [IterationRecord(step) for step in (1, 2, 3)]  # it trained: it died of another cause
    assert found() == []
    observations.iterations = []
    monkeypatch.setattr(
        float8_rules, "mx_hardware", lambda index: cuda_hardware("mxfp8", capability=(10, 0), name="NVIDIA B200")
    )
    assert found() == []


def test_the_watch_notes_where_the_mx_gemms_ran(tmp_path):
    session, _ = _trace(_script(), tmp_path)
    assert session.observations.mx_device == ("cpu", None, "EMULATED")
