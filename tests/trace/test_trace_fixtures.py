"""Every runtime finding fires on its fixture, through the click command, and the healthy
fixtures stay silent."""

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "trace"

# fixture -> (steps, the finding it provokes, findings that follow from it by nature)
PROVOKED = {
    "loss_scale_collapse.py": (12, "AMP501", {"AMP504"}),  # AMP504 names where the NaN is born
    "skipped_steps.py": (40, "AMP502", {"AMP504"}),  # AMP504 names the layer that overflows
    "nonfinite_loss.py": (3, "AMP503", set()),
    "overflow_origin.py": (3, "AMP504", {"AMP503"}),  # the inf reaches the loss
    "underflow_gradients.py": (3, "AMP505", set()),
    "activation_overflow_risk.py": (3, "AMP506", set()),
    "float32_matmul.py": (3, "AMP507", set()),
    "manual_half_softmax.py": (3, "AMP508", set()),
    "forward_outside_autocast.py": (3, "AMP509", set()),
    "float16_without_scaler.py": (3, "AMP510", {"AMP505"}),  # the unscaled gradients underflow
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PROVOKED))
def test_fixture_provokes_its_finding(trace_cli, name):
    steps, code, companions = PROVOKED[name]
    run = trace_cli(str(FIXTURES / name), "--steps", str(steps), "--fail-on", "never")
    assert run.exit_code == 0, run.stderr
    assert run.report["steps"] == steps
    assert code in run.codes
    assert run.codes - {code} <= companions
    finding = next(f for f in run.report["findings"] if f["code"] == code)
    assert finding["message"] and finding["help"]
    assert finding["path"] == str(FIXTURES / name)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,steps,autocast", [("healthy_fp16.py", 15, "float16"), ("healthy_bf16.py", 15, "bfloat16")]
)
def test_healthy_fixture_reports_nothing(trace_cli, name, steps, autocast):
    run = trace_cli(str(FIXTURES / name), "--steps", str(steps), "--fail-on", "info")
    assert run.exit_code == 0, run.stdout
    assert run.report["findings"] == []
    assert run.report["completed"] is True
    assert run.report["uses"]["autocast"] == [autocast]
    assert len(run.report["loss"]) == run.report["steps"] == steps
    assert "No mixed-precision problems found" in run.stdout


def test_fixture_fails_at_default_level(trace_cli):
    run = trace_cli(str(FIXTURES / "forward_outside_autocast.py"), "--steps", "2")
    assert run.exit_code == 1
    assert run.codes == {"AMP509"}


def test_info_finding_does_not_fail_by_default(trace_cli):
    run = trace_cli(str(FIXTURES / "float32_matmul.py"), "--steps", "2")
    assert run.codes == {"AMP507"}
    assert run.exit_code == 0


def test_overflow_origin_names_module_op_and_class(trace_cli):
    run = trace_cli(str(FIXTURES / "overflow_origin.py"), "--steps", "2", "--fail-on", "never")
    finding = next(f for f in run.report["findings"] if f["code"] == "AMP504")
    assert finding["module"] == "encoder.0"
    assert finding["step"] == 1
    assert finding["extra"]["module_class"] == "Linear"
    assert finding["extra"]["op"] == "_to_copy"  # autocast's cast of the timestamp to float16
    assert finding["extra"]["class_file"].endswith("linear.py")
    assert run.report["origin"]["module"] == "encoder.0"


def test_collapse_names_iteration_and_gradient(trace_cli):
    run = trace_cli(str(FIXTURES / "loss_scale_collapse.py"), "--steps", "20", "--fail-on", "never")
    finding = next(f for f in run.report["findings"] if f["code"] == "AMP501")
    assert finding["step"] == 17  # 65536 / 2**17 < 1
    assert finding["module"] == "net.0"
    assert run.report["skipped"] == list(range(1, 21))
    assert run.report["scale"][:3] == [65536.0, 32768.0, 16384.0]


def test_underflow_suggests_a_scale(trace_cli):
    run = trace_cli(str(FIXTURES / "underflow_gradients.py"), "--steps", "2", "--fail-on", "never")
    finding = next(f for f in run.report["findings"] if f["code"] == "AMP505")
    assert finding["extra"]["scale"] == 1.0
    assert finding["extra"]["suggested_scale"] > 1.0
    assert "bfloat16" in finding["help"]
    ranked = [p["lost_share"] for p in finding["extra"]["parameters"]]
    assert ranked == sorted(ranked, reverse=True)
    # At scale 1 most of the first layer's weight gradient is subnormal, but only the part below
    # 2**-20 (at most 4 significant bits) is lost; the gradients reaching that layer's output,
    # from which the weight gradient is computed, lose half of their elements that way.
    assert finding["extra"]["parameters"][0]["name"] == "0.weight" and ranked[0] > 0.05
    assert finding["extra"]["boundaries"][0]["module"] == "0"
    assert finding["extra"]["boundaries"][0]["lost_share"] > 0.5


def _finding_keys(run):
    keys = set()
    for finding in run.report["findings"]:
        names = tuple(sorted(p["name"] for p in finding["extra"].get("parameters", [])))
        keys.add((finding["code"], finding["step"], finding["module"], names))
    return keys


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PROVOKED) + ["healthy_fp16.py", "healthy_bf16.py"])
def test_sampled_gradient_shares_find_what_every_iteration_finds(trace_cli, name):
    """The default samples the gradient shares (the op-recording window, then every 4th
    iteration): on every fixture it finds the same problems, at the same iterations and modules
    and for the same parameters, as measuring them on every iteration."""
    steps = max(PROVOKED.get(name, (0,))[0], 9)
    every = trace_cli(str(FIXTURES / name), "--steps", str(steps), "--fail-on", "never", "--gradient-interval", "1")
    sampled = trace_cli(str(FIXTURES / name), "--steps", str(steps), "--fail-on", "never")
    assert every.report["gradient_interval"] == 1 and sampled.report["gradient_interval"] == 4
    assert every.report["steps"] == sampled.report["steps"] == steps
    assert _finding_keys(sampled) == _finding_keys(every)
    # Iterations 1 and 2 (the window), then 4, 8, ...; every gradient is present on every one.
    assert {g["sampled_iterations"] for g in sampled.report["gradients"]} == {2 + steps // 4}
    assert {g["sampled_iterations"] for g in every.report["gradients"]} == {steps}


# What the line a finding points at must contain, by code.
POINTED_STATEMENT = {
    "AMP501": "scaler.step(",
    "AMP502": "scaler.step(",
    "AMP503": "backward(",
    "AMP510": "backward(",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PROVOKED))
def test_every_finding_points_at_a_statement_in_the_script(trace_cli, name):
    steps, _, _ = PROVOKED[name]
    run = trace_cli(str(FIXTURES / name), "--steps", str(steps), "--fail-on", "never")
    lines = (FIXTURES / name).read_text().splitlines()
    for finding in run.report["findings"]:
        assert finding["path"] == str(FIXTURES / name)
        statement = lines[finding["line"] - 1]
        expected = POINTED_STATEMENT.get(finding["code"])
        if expected is not None:
            assert expected in statement, (finding["code"], statement)
        else:  # a module's finding: the forward statement that called it, named in `source`
            assert finding["extra"]["source"] == f"{FIXTURES / name}:{finding['line']}"
            # a call of the module, or the op itself when the forward issues it directly
            assert any(text in statement for text in ("self.", "model(", "softmax(")), (finding["code"], statement)
            assert finding["extra"]["module_class"]


def test_the_census_counts_none_of_the_tracers_own_reads(trace_cli):
    # The statistics are read when the script steps, inside the census window: the gather
    # (stack, cat) is ampdoctor's, not the script's. This script stacks nothing and cats only in
    # the backward of its attention's split.
    run = trace_cli(str(FIXTURES / "healthy_bf16.py"), "--steps", "3", "--fail-on", "never")
    ops = run.report["ops"]
    assert run.report["ops_steps"] == 2 and any(op["op"] == "addmm" for op in ops)
    assert not [op for op in ops if op["op"] == "stack"]
    assert [(op["module"], op["phase"]) for op in ops if op["op"] == "cat"] == [("TinyAttentionClassifier", "backward")]


def test_the_census_counts_none_of_the_tracers_own_copies_of_the_loss_scale_and_gradients(trace_cli):
    # The tracer copies the loss and the loss scale at each step and flattens the gradients to
    # measure them; the script clones nothing, cats nothing and stacks only in clip_grad_norm_
    # (once per iteration of the census's two).
    run = trace_cli(str(FIXTURES / "healthy_fp16.py"), "--steps", "3", "--fail-on", "never")
    ops = run.report["ops"]
    assert run.report["ops_steps"] == 2 and any(op["op"] == "_foreach_norm" for op in ops)
    assert not [op for op in ops if op["op"] in ("clone", "cat")]
    assert sum(op["count"] for op in ops if op["op"] == "stack") == 2


def test_gradients_are_measured_in_a_step_inside_a_region_of_the_other_half_dtype(trace_cli):
    # float16 gradients gathered under a bfloat16 region raised in autocast's cast of cat/stack.
    run = trace_cli(str(Path(__file__).parent / "scripts" / "step_in_other_region.py"), "--steps", "3")
    assert run.report["steps"] == 3 and not run.report["notes"], run.report["notes"]
    assert run.report["gradients"] and {"AMP101", "AMP303"} <= run.codes
