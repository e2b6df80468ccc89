"""GradScaler protocol mistakes seen at run time, with lint's codes at the user's line, and the
numeric findings they invalidate withheld; the culprit of an overflow under weight tying and a
residual connection (a nanoGPT-style port, fixtures/trace/nanogpt/)."""

from pathlib import Path

import pytest
from conftest import FIXTURES, SCRIPTS

MISTAKES = str(SCRIPTS / "protocol_mistakes.py")
NANOGPT = str(FIXTURES / "nanogpt" / "train.py")


def line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), start=1) if text in line)


def trace(trace_cli, script, *script_args, steps="0"):
    return trace_cli(script, "--steps", steps, "--fail-on", "never", "--no-progress", "--", *script_args)


@pytest.mark.slow
def test_a_clip_of_scaled_gradients_in_a_helper_module_is_amp201_at_the_helpers_line(trace_cli):
    run = trace(trace_cli, MISTAKES, "clip_scaled")
    (finding,) = run.report["findings"]
    assert finding["code"] == "AMP201" and finding["severity"] == "error"
    helpers = SCRIPTS / "protocol_helpers.py"
    assert (Path(finding["path"]), finding["line"]) == (helpers, line_of(helpers, "clip_grad_norm_"))
    # The user's own names, and the underflow diagnosis it invalidates is not given.
    assert "`amp_scaler.unscale_(opt)`" in finding["message"] and "amp_scaler.step(opt)" in finding["help"]
    assert "AMP505" not in run.codes


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["clip_unscaled", "two_models"])
def test_clipping_unscaled_gradients_is_not_a_protocol_mistake(trace_cli, mode):
    run = trace(trace_cli, MISTAKES, mode)
    assert not run.codes & {"AMP201", "AMP202", "AMP203", "AMP101"}, run.report["findings"]


@pytest.mark.slow
def test_backward_inside_autocast_is_amp101_once_with_lint_agreeing(trace_cli):
    run = trace(trace_cli, MISTAKES, "backward_in")
    (finding,) = [f for f in run.report["findings"] if f["code"] == "AMP101"]
    assert finding["line"] == line_of(Path(MISTAKES), "amp_scaler.scale(loss).backward()")
    assert finding["extra"]["lint"] is True
    # The same mistake is not listed again among the static findings, nor counted twice.
    assert not [f for f in run.report["static_findings"] if f["code"] == "AMP101" and f["line"] == finding["line"]]


@pytest.mark.slow
def test_a_step_around_the_scaler_is_amp203_and_its_consequences_are_withheld(trace_cli):
    run = trace(trace_cli, MISTAKES, "bypass")
    (finding,) = [f for f in run.report["findings"] if f["code"] == "AMP203"]
    assert finding["line"] == line_of(Path(MISTAKES), "opt.step()  # bypass")
    assert "`opt.step()`" in finding["message"] and "`amp_scaler.step(opt)`" in finding["help"]
    assert not run.codes & {"AMP501", "AMP502", "AMP503", "AMP504", "AMP505"}
    assert "Withheld: AMP503, AMP504" in finding["message"]


@pytest.mark.slow
def test_a_missing_update_is_amp202_before_torch_raises(trace_cli):
    run = trace(trace_cli, MISTAKES, "no_update")
    assert run.exit_code == 1 and run.report["stopped"] == "error"
    (finding,) = [f for f in run.report["findings"] if f["code"] == "AMP202"]
    assert finding["line"] == line_of(Path(MISTAKES), "amp_scaler.step(opt)")


@pytest.mark.slow
def test_nanogpt_port_clip_without_unscale_gets_the_protocol_cure_not_a_loss_scale(trace_cli):
    run = trace(trace_cli, NANOGPT, "--no-unscale")
    assert run.codes == {"AMP201"}, run.report["findings"]
    (finding,) = run.report["findings"]
    assert finding["line"] == line_of(Path(NANOGPT), "torch.nn.utils.clip_grad_norm_")
    assert "scaler.unscale_(optimizer)" in finding["help"]
    assert "Most underflow-prone gradients" not in run.stdout


@pytest.mark.slow
@pytest.mark.parametrize("args", [(), ("--dtype", "bfloat16")])
def test_nanogpt_port_healthy_has_no_protocol_finding_and_no_false_note(trace_cli, args):
    run = trace(trace_cli, NANOGPT, *args)
    assert not run.codes & {"AMP101", "AMP201", "AMP202", "AMP203", "AMP504"}, run.report["findings"]
    assert not [n for n in run.report["notes"] if "GradScaler" in n or "session" in n], run.report["notes"]


@pytest.mark.slow
def test_nanogpt_port_summed_loss_names_the_tied_head_and_points_at_the_loss(trace_cli):
    run = trace(trace_cli, NANOGPT, "--sum-loss", steps="8")
    origin = run.report["backward_origin"]
    # lm_head's share of the weight tied to transformer.wte overflows in lm_head's backward,
    # before any block's backward runs.
    assert (origin["module"], origin["side"], origin["submodule"]) == ("lm_head", "parameter", None)
    (finding,) = [f for f in run.report["findings"] if f["code"] == "AMP504"]
    model = FIXTURES / "nanogpt" / "model.py"
    # Where the user acts: the summed loss, which hands every gradient ~0.5 before scaling.
    assert (Path(finding["path"]), finding["line"]) == (model, line_of(model, "loss = F.cross_entropy("))
    assert "outside every module" not in finding["message"]
    assert "before scaling" in finding["message"] and "mean rather than a sum" in finding["help"]


@pytest.mark.slow
def test_a_tied_weight_is_named_after_the_module_that_used_it_in_low_precision(trace_cli):
    run = trace(trace_cli, NANOGPT, "--sum-loss", steps="2")
    names = {g["name"]: g["module"] for g in run.report["gradients"]}
    assert names.get("lm_head.weight") == "lm_head" and "transformer.wte.weight" not in names


DIED = SCRIPTS / "died_of_precision.py"


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode, code, marker",
    [
        ("new_scaler", "AMP205", "# made anew"),
        ("half", "AMP303", "# the optimizer"),
        ("mask", "AMP301", "# the mask"),
        ("bce", "AMP105", "# the loss"),
        ("plain_backward", "AMP204", "# unscaled"),
    ],
)
def test_a_mistake_named_at_run_time_with_lints_code_at_its_line_comes_first(trace_cli, mode, code, marker):
    run = trace(trace_cli, str(DIED), mode)
    top = run.report["findings"][0]
    assert (top["code"], top["line"]) == (code, line_of(DIED, marker)), run.report["findings"]
    assert Path(top["path"]) == DIED
    # What follows from the mistake is not diagnosed as a problem of its own.
    assert not [f for f in run.report["findings"][1:] if f["severity"] in ("warning", "error")], run.report["findings"]
