"""torchao float8 training under the tracer (float8.py, AMP515, AMP516): what each layer's casts
flush to zero, float8 GEMMs the GPU would refuse, and a run that stays bit-identical."""

from __future__ import annotations

import contextlib
import io
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from helpers import trace_source

from ampdoctor.trace.float8 import unaligned
from ampdoctor.trace.observations import CastStats
from ampdoctor.trace.runner import Target, run_target
from ampdoctor.trace.session import TraceSession

torchao_float8 = pytest.importorskip("torchao.float8", reason="torchao is not installed (the fp8 extra)")

SCRIPT = """\
import torch
from torch import nn
from torchao.float8 import Float8LinearConfig, convert_to_float8_training

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, {out}))
convert_to_float8_training(
    model, config=Float8LinearConfig.from_recipe_name("{recipe}"), module_filter_fn=lambda m, fqn: {keep}
)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
losses = []
for step in range(4):
    x = torch.randn(64, 64)
    if {outlier}:
        x[0, 0] = {outlier}
    loss = nn.functional.mse_loss(model(x), torch.randn(64, {out}))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
print("losses", losses)
"""


def _script(out: int = 16, recipe: str = "tensorwise", keep: str = 'fqn != "4"', outlier: float = 0) -> str:
    return SCRIPT.format(out=out, recipe=recipe, keep=keep, outlier=outlier)


def _trace(source: str, tmp_path):
    return trace_source(source, tmp_path)


def _codes(session) -> dict[str, list]:
    found: dict[str, list] = {}
    for finding in session.report().findings:
        found.setdefault(finding.code, []).append(finding)
    return found


def test_an_outlier_under_tensorwise_scaling_is_named_at_its_layer_and_operand(tmp_path):
    session, _ = _trace(_script(outlier=1e6), tmp_path)
    assert session.observations.instrument_errors == []
    flushed = _codes(session)["AMP515"]
    first = flushed[0]
    assert (first.extra["module"], first.extra["role"], first.extra["granularity"]) == ("0", "input", "tensorwise")
    assert first.extra["share"] > 0.9  # nearly everything but the outlier
    assert "rowwise_with_gw_hp" in first.help
    # The weights are cast from their own values: nothing of theirs is lost.
    assert all(f.extra["role"] != "weight" for f in flushed)


def test_a_healthy_float8_run_reports_nothing_of_float8(tmp_path):
    session, _ = _trace(_script(), tmp_path)
    stats = session.observations.float8_casts
    # Two layers converted (the filter keeps the last one out), every operand role of each seen.
    assert set(stats) == {(m, r) for m in ("0", "2") for r in ("input", "weight", "grad_output")}
    assert all(s.flushed_share < 0.01 for s in stats.values())
    assert not {"AMP515", "AMP516", "AMP517", "AMP520"} & set(_codes(session))
    assert session.observations.float8_last_layer == "4"  # found, and left in float32 by the filter
    assert session.observations.instrument_errors == []


def test_rowwise_with_a_high_precision_weight_gradient_keeps_the_outliers_row_to_itself(tmp_path):
    session, _ = _trace(_script(recipe="rowwise_with_gw_hp", outlier=1e6), tmp_path)
    assert "AMP515" not in _codes(session)
    # Each row has its own scale: every output row is as close to float32 as e4m3 allows.
    shadows = session.observations.float8_shadows
    assert set(shadows) == {"0", "2"} and all(s.relative_error < 0.1 for s in shadows.values())


def test_each_float8_layer_is_compared_with_float32_row_by_row(tmp_path):
    healthy, _ = _trace(_script(), tmp_path)
    shadows = healthy.observations.float8_shadows
    # Two forwards recorded per layer (the census window), 64 rows each; e4m3 rounds the input
    # and the weight to 3 mantissa bits: a few percent, never zero.
    assert {name: (s.forwards, s.rows) for name, s in shadows.items()} == {"0": (2, 128), "2": (2, 128)}
    assert all(0.005 < s.relative_error < 0.1 for s in shadows.values())
    # One outlier under a tensorwise scale: the 63 other rows of the first layer's input are
    # flushed to zero, and their outputs are the bias alone.
    outlier, _ = _trace(_script(outlier=1e6), tmp_path)
    assert outlier.observations.float8_shadows["0"].relative_error > 0.5
    found = _codes(outlier)["AMP515"][0]
    assert found.extra["module"] == "0" and found.extra["output_error"] > 0.5


def test_dynamic_scales_clip_nothing_and_a_scale_from_elsewhere_is_counted(tmp_path, monkeypatch):
    import torchao.float8.float8_linear as float8_linear

    healthy, _ = _trace(_script(outlier=1e6), tmp_path)
    assert all(stats.clipped == 0 for stats in healthy.observations.float8_casts.values())
    # A scale four times too large for the inputs (a stand-in for a static or delayed one): the
    # watch wraps the cast it finds, and every input value above a quarter of the largest is
    # clipped to 448.
    dynamic = float8_linear.hp_tensor_to_float8_dynamic

    def static(hp, dtype, *args, **kwargs):
        out = dynamic(hp, dtype, *args, **kwargs)
        if kwargs["gemm_input_role"].name == "INPUT":
            out._scale = out._scale * 4
            top = torch.finfo(dtype).max
            out._data = (hp * out._scale).clamp(-top, top).to(dtype)
        return out

    monkeypatch.setattr(float8_linear, "hp_tensor_to_float8_dynamic", static)
    session, _ = _trace(_script(), tmp_path)
    stats = session.observations.float8_casts[("0", "input")]
    # A standard normal 64x64 input peaks near 4: a quarter of that is about 1, and a third of
    # the values lie beyond it.
    assert 0.2 * stats.nonzero < stats.clipped < 0.45 * stats.nonzero
    assert session.observations.float8_casts[("0", "weight")].clipped == 0
    layer = next(entry for entry in session.report().to_dict()["float8"]["layers"] if entry["module"] == "0")
    assert layer["casts"]["input"]["clipped"] == stats.clipped


def test_a_large_batch_is_compared_on_rows_spread_over_it(tmp_path):
    source = (
        _script()
        .replace("torch.randn(64, 64)", "torch.randn(1000, 64)")
        .replace("torch.randn(64, 16)", "torch.randn(1000, 16)")
    )
    session, _ = _trace(source, tmp_path)
    shadows = session.observations.float8_shadows
    # 1000 rows a forward, every fourth compared: 250, in each of the 2 recorded forwards.
    assert {name: (s.forwards, s.rows) for name, s in shadows.items()} == {"0": (2, 500), "2": (2, 500)}
    assert all(0.005 < s.relative_error < 0.1 for s in shadows.values())


def test_a_shadow_that_fails_is_noted_and_the_training_goes_on(tmp_path, monkeypatch):
    from ampdoctor.trace.float8 import Float8Watch

    def broken(self, module, hp_input, output):
        raise RuntimeError("no float32 kernel here")

    monkeypatch.setattr(Float8Watch, "_shadow", broken)
    session, printed = _trace(_script(), tmp_path)  # ends normally (``_trace`` checks it)
    assert printed.splitlines()[-1].startswith("losses")
    assert session.observations.float8_shadows == {}
    assert any("no float32 kernel here" in error for error in session.observations.instrument_errors)
    assert session.observations.float8_casts  # the rest of the watch still measured


def test_the_census_counts_the_training_step_not_the_float8_watch(tmp_path):
    session, _ = _trace(_script(outlier=1e6), tmp_path)
    ops = {key.op for key in session.observations.ops}
    # What the watch computes to count flushed values and to compare with float32.
    assert not ops & {"bitwise_and", "bitwise_not", "ne", "eq", "linalg_vector_norm", "square"}, ops
    assert {"gelu", "gelu_backward"} <= ops  # the model's own ops are recorded


def test_the_json_report_lists_each_float8_layer(tmp_path):
    session, _ = _trace(_script(out=10, keep="True"), tmp_path)
    float8 = session.report().to_dict()["float8"]
    assert [c["linear_layers"] for c in float8["conversions"]] == [3]
    assert [c["converted"] for c in float8["conversions"]] == [3]
    assert float8["output_layer"] == "4"
    layers = {layer["module"]: layer for layer in float8["layers"]}
    assert set(layers) == {"0", "2", "4"}
    assert layers["4"]["unaligned_gemms"] > 0 and layers["0"]["unaligned_gemms"] == 0
    assert set(layers["0"]["casts"]) == {"input", "weight", "grad_output"}
    assert layers["0"]["casts"]["grad_output"]["dtype"] == "float8_e5m2"
    assert all(0 < layer["output_error"] < 0.1 and layer["forwards"] == 2 for layer in layers.values())


def test_the_terminal_report_tabulates_the_float8_layers(tmp_path):
    from rich.console import Console

    from ampdoctor.trace.report.report_text import render

    session, _ = _trace(_script(outlier=1e6), tmp_path)
    stream = io.StringIO()
    render(session.report(), Console(file=stream, width=160, color_system=None))
    text = stream.getvalue()
    table = text[text.index("float8 layers (first 2 iteration(s))") :]
    rows = {line.split()[1]: line for line in table.splitlines() if line.startswith("│ ")}
    assert set(rows) == {"0", "2"}
    shadow = session.observations.float8_shadows["0"].relative_error
    flushed = session.observations.float8_casts[("0", "input")].flushed_share
    assert f"{flushed:.1%}" in rows["0"] and f"{shadow:.1%}" in rows["0"]


FUNCTIONAL = """\
import torch
from torch import nn
from torchao.float8 import convert_to_float8_training


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(64, 256)
        self.down = nn.Linear(256, 16)

    def forward(self, x):
        # The layers' weights, used around the layers' own forward.
        hidden = nn.functional.gelu(nn.functional.linear(x, self.up.weight, self.up.bias))
        return nn.functional.linear(hidden, self.down.weight, self.down.bias)


torch.manual_seed(0)
model = Mlp()
convert_to_float8_training(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(4):
    loss = nn.functional.mse_loss(model(torch.randn(64, 64)), torch.randn(64, 16))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def test_float8_layers_whose_forward_never_runs_are_named_at_the_conversion(tmp_path):
    session, _ = _trace(FUNCTIONAL, tmp_path)
    found = _codes(session)["AMP520"]
    line = next(n for n, text in enumerate(FUNCTIONAL.splitlines(), 1) if text.startswith("convert_to_float8"))
    assert [(f.location.line, f.extra["layers"]) for f in found] == [(line, 2)]
    assert "none of them ran" in found[0].message


def test_float8_never_ran_says_nothing_without_a_recorded_training_step_or_under_compile():
    from ampdoctor.trace.observations import Observations
    from ampdoctor.trace.rulebase import Locator, Thresholds
    from ampdoctor.trace.rules.float8_rules import float8_never_ran

    observations = Observations()
    observations.float8_conversions = [(("train.py", 9), 3, 3)]
    locator = Locator("train.py", {})
    assert list(float8_never_ran(observations, Thresholds(), locator)) == []  # no iteration recorded
    observations.op_steps = 2
    observations.ops = Counter({"recorded": 1})
    assert [f.code for f in float8_never_ran(observations, Thresholds(), locator)] == ["AMP520"]
    observations.compiled = True  # the census stopped: float8 may have run in compiled graphs
    assert list(float8_never_ran(observations, Thresholds(), locator)) == []


def test_the_html_report_tabulates_the_float8_layers(tmp_path):
    from ampdoctor.trace.report.html import render_html

    session, _ = _trace(_script(outlier=1e6), tmp_path)
    page = render_html(session.report())
    section = page[page.index('<section id="float8">') :].split("</section>")[0]
    rows = section.split("<tbody>")[1].split("</tr>")[:-1]
    assert [row.split("<code>")[1].split("</code>")[0] for row in rows] == ["0", "2"]
    flushed = session.observations.float8_casts[("0", "input")].flushed_share
    error = session.observations.float8_shadows["0"].relative_error
    assert f"{flushed:.1%}" in rows[0] and f"{error:.1%}" in rows[0]
    plain, _ = _trace(_script().replace("convert_to_float8_training(", "(lambda *a, **k: None)("), tmp_path)
    assert 'id="float8"' not in render_html(plain.report())


def test_a_run_without_float8_has_no_float8_object():
    from ampdoctor.trace.observations import Observations
    from ampdoctor.trace.report.float8_summary import float8_dict

    assert float8_dict(Observations()) is None


def test_an_unaligned_head_converted_to_float8_is_named_with_its_shapes(tmp_path):
    session, _ = _trace(_script(out=10, keep="True"), tmp_path)
    found = _codes(session)["AMP516"]
    assert [f.extra["module"] for f in found] == ["4"]
    assert [[64, 256], [256, 10]] in found[0].extra["shapes"]  # the forward: input @ weight.t()
    assert all(10 in a or 10 in b for a, b in found[0].extra["shapes"])
    assert "multiples of 16" in found[0].message


def test_a_filter_that_keeps_the_odd_sized_head_out_ends_the_finding(tmp_path):
    session, _ = _trace(_script(out=10, keep='fqn != "4"'), tmp_path)
    assert "AMP516" not in _codes(session)


@pytest.mark.parametrize("keep", ["True", "m.in_features % 16 == 0 and m.out_features % 16 == 0"])
def test_an_output_layer_converted_to_float8_is_named(tmp_path, keep):
    session, _ = _trace(_script(keep=keep), tmp_path)
    found = _codes(session)["AMP517"]
    assert [f.extra["module"] for f in found] == ["4"]
    assert 'fqn == "4"' in found[0].help


def test_the_output_layer_is_the_last_with_weights_even_after_weightless_modules(tmp_path):
    # A head followed by an activation and a flatten (no weights): still the head.
    source = _script(keep="True").replace("nn.Linear(256, 16))", "nn.Linear(256, 16), nn.Tanh(), nn.Flatten())")
    session, _ = _trace(source, tmp_path)
    assert [f.extra["module"] for f in _codes(session)["AMP517"]] == ["4"]


def test_the_traced_float8_run_is_bit_identical_and_the_wrappers_are_removed(tmp_path):
    import torchao.float8.float8_linear as float8_linear

    cast, scaled_mm = float8_linear.hp_tensor_to_float8_dynamic, torch._scaled_mm
    source = _script(outlier=1e6)
    _, traced = _trace(source, tmp_path)
    plain = io.StringIO()
    with contextlib.redirect_stdout(plain):
        exec(compile(source, "plain.py", "exec"), {"__name__": "__main__"})
    assert traced.splitlines()[-1] == plain.getvalue().splitlines()[-1]
    assert float8_linear.hp_tensor_to_float8_dynamic is cast
    assert torch._scaled_mm is scaled_mm


def test_the_watch_wraps_torchao_once_the_training_code_has_imported_it(monkeypatch):
    import types

    from ampdoctor.trace.float8 import Float8Watch
    from ampdoctor.trace.observations import Observations

    def cast(hp_tensor, float8_dtype, *args, **kwargs):
        return hp_tensor

    monkeypatch.delitem(sys.modules, "torchao.float8.float8_linear")
    scaled_mm = torch._scaled_mm
    watch = Float8Watch(lambda: None, Observations(), lambda module: type(module).__name__)
    watch.install()
    try:
        torch.nn.Identity()(torch.ones(1))  # a module call before the import: nothing to wrap
        assert torch._scaled_mm is scaled_mm
        late = types.ModuleType("torchao.float8.float8_linear")
        late.hp_tensor_to_float8_dynamic = cast
        monkeypatch.setitem(sys.modules, "torchao.float8.float8_linear", late)
        torch.nn.Identity()(torch.ones(1))  # the first module call after it wraps both
        assert late.hp_tensor_to_float8_dynamic is not cast and torch._scaled_mm is not scaled_mm
        x = torch.ones(2)
        assert late.hp_tensor_to_float8_dynamic(x, torch.float8_e4m3fn) is x  # no census: passes through
    finally:
        watch.remove()
    assert late.hp_tensor_to_float8_dynamic is cast and torch._scaled_mm is scaled_mm


def test_cast_statistics_and_alignment():
    stats = CastStats("float8_e4m3fn", "tensorwise", casts=2, nonzero=200, flushed=50)
    assert stats.flushed_share == 0.25
    assert CastStats("float8_e5m2", "axiswise").flushed_share == 0.0
    assert stats.to_dict()["flushed"] == 50
    # torch._scaled_mm's checks on the GPU: the first operand's columns, both of the second's
    assert unaligned((64, 10), (10, 256)) and unaligned((64, 256), (256, 10))
    assert not unaligned((100, 64), (64, 256))  # 100 tokens in the forward: rows are free
    assert unaligned((64, 100), (100, 256))  # ... but the weight gradient multiplies along them


def test_a_run_that_died_of_an_unaligned_float8_gemm_on_the_gpu_is_named():
    from ampdoctor.trace.observations import Observations
    from ampdoctor.trace.rulebase import Locator, Thresholds
    from ampdoctor.trace.rules.float8_rules import float8_gemm_unaligned

    observations = Observations()
    message = "RuntimeError: Expected trailing dimension of mat1 to be divisible by 16 but got mat1 shape: (64x10)."
    observations.script_error = (message, ("train.py", 41))
    assert list(float8_gemm_unaligned(observations, Thresholds(), Locator("train.py", {}))) == []  # no float8
    observations.float8_imported = True
    found = list(float8_gemm_unaligned(observations, Thresholds(), Locator("train.py", {})))
    assert [(f.code, f.location.line) for f in found] == [("AMP516", 41)]
    assert "(64x10)" in found[0].message
    observations.script_error = ("RuntimeError: CUDA out of memory", ("train.py", 41))
    assert list(float8_gemm_unaligned(observations, Thresholds(), Locator("train.py", {}))) == []


# torch's refusal on a GPU below compute capability 8.9 (aten/src/ATen/native/cuda/Blas.cpp).
REFUSED = "torch._scaled_mm is only supported on CUDA devices with compute capability >= 9.0 or 8.9, or ROCm MI300+"


def test_a_run_that_died_on_a_gpu_without_float8_is_named_with_the_gpu(monkeypatch):
    from ampdoctor.trace.observations import Observations
    from ampdoctor.trace.rulebase import Locator, Thresholds
    from ampdoctor.trace.rules import float8_rules

    monkeypatch.setattr(float8_rules, "cuda_device", lambda: "NVIDIA A100-SXM4-80GB, compute capability 8.0")
    observations = Observations()
    observations.script_error = (f"RuntimeError: {REFUSED}", ("train.py", 12))
    locator = Locator("train.py", {})
    assert list(float8_rules.float8_unsupported_gpu(observations, Thresholds(), locator)) == []  # no float8
    observations.float8_imported = True
    found = list(float8_rules.float8_unsupported_gpu(observations, Thresholds(), locator))
    assert [(f.code, f.location.line, f.severity.label) for f in found] == [("AMP519", 12, "error")]
    assert "A100" in found[0].message and "8.9" in found[0].message and "bfloat16" in found[0].help
    # The MoE experts' grouped GEMM, and torch's older wording, are the same refusal.
    for error in (
        "RuntimeError: torch._scaled_grouped_mm is only supported on CUDA devices with compute capability = [9.0, 10.0], or ROCm MI300+",
        "RuntimeError: torch._scaled_mm is only supported on devices with compute capability >= 9.0)",
    ):
        observations.script_error = (error, ("train.py", 12))
        assert [f.code for f in float8_rules.float8_unsupported_gpu(observations, Thresholds(), locator)] == ["AMP519"]
    observations.script_error = ("RuntimeError: CUDA out of memory", ("train.py", 12))
    assert list(float8_rules.float8_unsupported_gpu(observations, Thresholds(), locator)) == []


def test_a_run_that_died_for_want_of_a_rowwise_kernel_is_told_to_use_tensorwise(monkeypatch):
    from ampdoctor.trace.observations import Observations
    from ampdoctor.trace.rulebase import Locator, Thresholds
    from ampdoctor.trace.rules import float8_rules

    monkeypatch.setattr(float8_rules, "cuda_device", lambda: "NVIDIA GeForce RTX 5090, compute capability 12.0")
    observations = Observations()
    observations.float8_imported = True
    # aten's RowwiseScaledMM, on a GPU or a build without the rowwise kernel.
    error = "RuntimeError: Rowwise scaling is not currently supported on your device"
    observations.script_error = (error, ("train.py", 30))
    found = list(float8_rules.float8_unsupported_gpu(observations, Thresholds(), Locator("train.py", {})))
    assert [(f.code, f.location.line, f.extra["recipe"]) for f in found] == [("AMP519", 30, "rowwise")]
    assert "RTX 5090" in found[0].message and "rowwise" in found[0].message
    assert 'from_recipe_name("tensorwise")' in found[0].help
    observations.float8_imported = False  # not a torchao float8 run: someone else's kernel
    assert list(float8_rules.float8_unsupported_gpu(observations, Thresholds(), Locator("train.py", {}))) == []


@pytest.mark.parametrize(
    "refusal,recipe",
    [(REFUSED, "tensorwise"), ("Rowwise scaling is not currently supported on your device", "rowwise")],
    ids=["no-float8", "no-rowwise"],
)
def test_the_gpu_refusal_is_named_at_the_line_of_the_traced_script(tmp_path, refusal, recipe):
    # The script stands in for the GPU: its float8 GEMM raises what torch raises on an A100 (or,
    # for rowwise scales, on a build without that kernel), from code that is not the script's (as
    # torch's own is not).
    refuse = "def refuse(*args, **kwargs):\n    raise RuntimeError(REFUSED)\n"
    source = _script(recipe=recipe).replace(
        "torch.manual_seed(0)\n",
        f"torch.manual_seed(0)\ngpu = {{}}\nexec(compile({refuse!r}, '<gpu>', 'exec'), {{'REFUSED': {refusal!r}}}, gpu)\n"
        "torch._scaled_mm = gpu['refuse']\n",
    )
    path = tmp_path / "train.py"
    path.write_text(source)
    with contextlib.redirect_stdout(io.StringIO()):
        with TraceSession(script=str(path)) as session:
            session.outcome = run_target(Target(script=str(path)))
    assert session.outcome.reason == "error"
    found = _codes(session)["AMP519"]
    line = next(n for n, text in enumerate(source.splitlines(), 1) if "model(x)" in text)
    assert [f.location.line for f in found] == [line]
    assert "AMP516" not in _codes(session)


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "trace"


def test_the_float8_tabular_fixture_names_each_mistake_at_its_layer(trace_cli):
    path = FIXTURES / "float8_tabular_buggy.py"
    run = trace_cli(str(path), "--steps", "5", "--fail-on", "never")
    assert run.exit_code == 0, run.stderr
    runtime = {(f["code"], f["extra"].get("module")) for f in run.report["findings"] if f["code"].startswith("AMP51")}
    # the raw timestamp floods the first layer's input; the 10-way head is unaligned and in float8
    assert runtime == {("AMP515", "0"), ("AMP516", "4"), ("AMP517", "4")}
    flushed = next(f for f in run.report["findings"] if f["code"] == "AMP515")
    assert flushed["extra"]["role"] == "input" and flushed["extra"]["share"] > 0.9
    # placed at the statement that calls the model
    assert {f["line"] for f in run.report["findings"] if f["code"].startswith("AMP51")} == {33}
    # lint suspected the head (AMP601) and its size (AMP602): the run confirms both, one finding each
    static = {f["code"] for f in run.report["static_findings"]}
    assert "AMP605" in static and not {"AMP601", "AMP602"} & static
    assert all(f["extra"].get("lint") for f in run.report["findings"] if f["code"] in ("AMP516", "AMP517"))


def test_the_healthy_float8_fixture_reports_nothing(trace_cli):
    run = trace_cli(str(FIXTURES / "float8_tabular_healthy.py"), "--steps", "5", "--fail-on", "info")
    assert run.exit_code == 0, run.stdout
    assert run.report["findings"] == []
    assert run.report["completed"] is True


def test_the_float32_run_of_compare_trains_the_model_unconverted():
    # A fresh interpreter: the hook waits for torchao's module and replaces the conversion before
    # the script's own import binds it.
    import subprocess

    script = (
        "import sys, torch\n"
        "from ampdoctor.trace.compare.float8_off import Float8Off\n"
        "switch = Float8Off()\n"
        "switch.install()\n"
        "assert 'torchao.float8.float8_linear_utils' not in sys.modules\n"
        "from torchao.float8 import convert_to_float8_training\n"
        "model = torch.nn.Sequential(torch.nn.Linear(32, 32))\n"
        "assert convert_to_float8_training(model) is model\n"
        "assert type(model[0]) is torch.nn.Linear\n"
        "switch.remove()\n"
        "import torchao.float8 as package\n"
        "converted = package.convert_to_float8_training(torch.nn.Sequential(torch.nn.Linear(32, 32)))\n"
        "print(switch.skipped, type(converted[0]).__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "Float8Linear"]


def test_the_switch_replaces_a_conversion_imported_before_it_and_puts_it_back():
    import torchao.float8 as package
    import torchao.float8.float8_linear_utils as defined

    from ampdoctor.trace.compare.float8_off import Float8Off

    original = defined.convert_to_float8_training
    switch = Float8Off()
    switch.install()
    try:
        model = torch.nn.Sequential(torch.nn.Linear(32, 32))
        assert package.convert_to_float8_training(model) is model
        assert defined.convert_to_float8_training(model) is model
        assert type(model[0]) is torch.nn.Linear and switch.skipped == 2
    finally:
        switch.remove()
    assert package.convert_to_float8_training is original and defined.convert_to_float8_training is original


def test_a_conversion_that_converts_nothing_is_named_at_its_line(tmp_path):
    session, _ = _trace(_script(keep='fqn.startswith("blocks.")'), tmp_path)
    assert session.observations.float8_conversions == [((str(tmp_path / "train.py"), 7), 3, 0)]
    found = _codes(session)["AMP518"]
    assert [(f.location.line, f.extra["linears"]) for f in found] == [(7, 3)]
    assert "refused all 3" in found[0].message
    assert not {"AMP515", "AMP516", "AMP517"} & set(_codes(session))


def test_a_model_without_linear_layers_converts_nothing_either(tmp_path):
    source = _script().replace(
        "nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 16))",
        "nn.Sequential(nn.Unflatten(1, (1, 64)), nn.Conv1d(1, 16, 64), nn.Flatten())",
    )
    session, _ = _trace(source, tmp_path)
    found = _codes(session)["AMP518"]
    assert [f.extra["linears"] for f in found] == [0] and "no `nn.Linear` layer" in found[0].message


def test_a_converted_model_is_counted_and_the_conversion_put_back(tmp_path):
    import torchao.float8 as package
    import torchao.float8.float8_linear_utils as defined

    original = defined.convert_to_float8_training
    session, _ = _trace(_script(), tmp_path)
    assert [(linears, converted) for _site, linears, converted in session.observations.float8_conversions] == [(3, 2)]
    assert "AMP518" not in _codes(session)
    assert defined.convert_to_float8_training is original and package.convert_to_float8_training is original


def test_a_script_that_imports_torchao_inside_the_trace_is_counted(tmp_path):
    # A fresh interpreter: the session starts before torchao is imported, and the import hook
    # wraps the conversion before the script binds it.
    import json
    import subprocess

    path = tmp_path / "train.py"
    path.write_text(_script(keep='fqn.startswith("blocks.")'))
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "ampdoctor", "trace", str(path), "--steps", "2", "--no-lint", "--json", str(report)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert report.exists(), done.stderr
    codes = [(f["code"], f["line"]) for f in json.loads(report.read_text())["findings"] if f["code"] == "AMP518"]
    assert codes == [("AMP518", 7)]
