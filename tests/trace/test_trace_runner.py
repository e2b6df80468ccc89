"""How traced scripts run and end: iteration limit, crash, early end, Ctrl-C, sys.exit,
arguments, ``-m``, usage errors and the report's statements."""

import json
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ampdoctor.trace.trace_cli import TORCH_MISSING, trace_command

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def script(name: str) -> str:
    return str(SCRIPTS / name)


def test_loop_forever_stops_after_exactly_n_iterations(trace_cli):
    run = trace_cli(script("loop_forever.py"), "--steps", "5")
    assert run.exit_code == 0
    assert run.report["steps"] == 5
    assert run.report["stopped"] == "steps" and run.report["completed"] is True
    # The stop is raised from the 5th update: the script's `except Exception` does not see it,
    # and the 5th iteration's own bookkeeping line is never reached.
    assert "swallowed" not in run.stdout
    assert [line for line in run.stdout.splitlines() if line.startswith("applied")] == [
        f"applied {n}" for n in range(1, 5)
    ]
    assert len(run.report["scale"]) == len(run.report["loss"]) == 5


def test_plain_optimizer_loop_stops_with_exactly_n_steps_applied(trace_cli):
    run = trace_cli(script("two_optimizers.py"), "--steps", "3")
    assert run.report["steps"] == 3
    assert run.report["uses"]["optimizers"] == ["SGD#1", "SGD#2"]
    # Two optimizers per iteration count once; the stop comes right after the 3rd iteration.
    assert run.report["uses"]["optimizer_steps"] == 6
    assert "iteration 3" not in run.stdout and "iteration 2" in run.stdout


def test_two_optimizers_count_once_per_iteration(trace_cli):
    run = trace_cli(script("two_optimizers.py"), "--steps", "0")
    assert run.report["stopped"] == "end"
    assert run.report["steps"] == 6
    assert run.report["uses"]["optimizer_steps"] == 12


def test_crash_writes_incomplete_report_shows_traceback_and_exits_1(trace_cli):
    run = trace_cli(script("crash.py"), "--steps", "10")
    assert run.exit_code == 1
    assert run.report["completed"] is False
    assert run.report["stopped"] == "error"
    assert run.report["error"] == "FileNotFoundError: shard-3.pt"
    assert run.report["steps"] == 3
    assert "Traceback (most recent call last)" in run.stderr
    assert 'crash.py", line 9, in load_next_shard' in run.stderr
    # Only the script's frames: none of ampdoctor's (whatever folder the checkout is in) nor runpy's.
    frames = re.findall(r'^  File "([^"]+)", line \d+', run.stderr.split("Traceback")[1], re.M)
    assert frames and {Path(frame) for frame in frames} == {Path(script("crash.py"))}
    assert "runpy" not in run.stderr
    assert any("incomplete" in note for note in run.report["notes"])


def test_script_ending_early_reports_what_it_saw(trace_cli):
    run = trace_cli(script("early_end.py"), "--steps", "50")
    assert run.exit_code == 0
    assert run.report["stopped"] == "end" and run.report["completed"] is True
    assert run.report["steps"] == 3
    assert "done" in run.stdout
    assert any("3 of the 50" in note for note in run.report["notes"])


@pytest.fixture
def ctrl_c_heard():
    """Ctrl-C raises KeyboardInterrupt in this process, as in a terminal, even where the suite
    was started with SIGINT ignored (a background job of a shell without job control)."""
    import signal

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_ctrl_c_writes_partial_report(trace_cli, ctrl_c_heard):
    run = trace_cli(script("interrupt.py"), "--steps", "50")
    assert run.exit_code == 130
    assert run.report["stopped"] == "interrupt" and run.report["completed"] is False
    assert run.report["steps"] == 4
    assert any("partial" in note for note in run.report["notes"])


@pytest.mark.parametrize("code", [3, 0])
def test_sys_exit_reports_then_exits_with_the_scripts_status(trace_cli, code):
    run = trace_cli(script("sys_exit.py"), "--", str(code))
    assert run.exit_code == code
    assert run.report["stopped"] == "exit"
    assert run.report["exit_code"] == code
    assert run.report["steps"] == 2


def test_script_without_amp_says_so(trace_cli):
    run = trace_cli(script("no_amp.py"))
    assert run.exit_code == 0
    assert run.report["findings"] == []
    assert run.report["uses"]["autocast"] == [] and run.report["uses"]["grad_scaler"] is False
    assert any("never entered torch.autocast" in note for note in run.report["notes"])
    assert "never entered torch.autocast" in " ".join(run.stdout.split())


def test_script_without_optimizer_says_so(trace_cli):
    run = trace_cli(script("no_optimizer.py"))
    assert run.exit_code == 0
    assert run.report["steps"] == 0
    assert run.report["findings"] == []
    assert any("No optimizer step was seen" in note for note in run.report["notes"])
    assert "No optimizer step was seen" in " ".join(run.stdout.split())
    # The forwards were still observed.
    assert {a["module"] for a in run.report["activations"]} >= {"0", "2", "Sequential"}


def test_script_sees_argv_path_and_main_like_python(trace_cli):
    run = trace_cli(script("argv_probe.py"), "--steps", "3", "--", "--lr", "0.1", "-m", "x")
    seen = json.loads(run.stdout.splitlines()[0])
    assert seen == {
        "name": "__main__",
        "argv": [script("argv_probe.py"), "--lr", "0.1", "-m", "x"],
        "path0": str(SCRIPTS),
        "file": script("argv_probe.py"),
    }
    assert run.report["argv"] == [script("argv_probe.py"), "--lr", "0.1", "-m", "x"]
    assert str(SCRIPTS) not in sys.path  # restored


def test_unknown_options_after_the_script_go_to_the_script(trace_cli):
    run = trace_cli(script("argv_probe.py"), "--epochs", "3")
    assert json.loads(run.stdout.splitlines()[0])["argv"][1:] == ["--epochs", "3"]


def test_the_notice_names_every_argument_the_script_received(trace_cli):
    run = trace_cli(script("own_steps.py"), "--lr", "0.5", "--steps", "3", "--", "--steps", "4")
    assert json.loads(run.stdout.splitlines()[0])["argv"] == ["--lr", "0.5", "--steps", "4"]
    assert "took --steps 3 for itself; the script received --lr 0.5 --steps 4" in run.stderr


def test_an_option_the_script_defines_too_is_said_to_be_taken(trace_cli):
    run = trace_cli(script("own_steps.py"), "--steps", "3")
    assert json.loads(run.stdout.splitlines()[0])["argv"] == []
    assert "took --steps for itself, but the script defines --steps too" in run.stderr
    assert "-- --steps" in run.stderr
    quiet = trace_cli(script("argv_probe.py"), "--steps", "3")
    assert "defines" not in quiet.stderr


def test_module_runs_like_python_dash_m(trace_cli, monkeypatch):
    monkeypatch.chdir(SCRIPTS)
    run = trace_cli("-m", "probe_pkg.train", "--steps", "5", "--", "--flag")
    assert run.exit_code == 0
    seen = json.loads(run.stdout.splitlines()[0])
    assert seen["name"] == "__main__"
    assert seen["argv"] == [str(SCRIPTS / "probe_pkg" / "train.py"), "--flag"]
    assert run.report["steps"] == 3
    assert run.report["script"] == str(SCRIPTS / "probe_pkg" / "train.py")


def test_json_output_format_keeps_stdout_pure_json():
    result = CliRunner().invoke(trace_command, [script("early_end.py"), "--output-format", "json"])
    report = json.loads(result.stdout)
    assert report["version"] == 1 and report["steps"] == 3
    assert "done" in result.stderr  # the script's own prints moved out of the way


@pytest.mark.parametrize(
    "args,message",
    [
        (["missing_script.py"], "can't open file 'missing_script.py'"),
        ([str(SCRIPTS / "probe_pkg")], "can't find '__main__' module in"),
        (["-m", "no_such_module_anywhere"], "No module named no_such_module_anywhere"),
        ([], "missing SCRIPT"),
        ([script("early_end.py"), "--steps", "-1"], "--steps"),
        ([script("early_end.py"), "--gradient-interval", "0"], "--gradient-interval"),
        ([script("early_end.py"), "--threshold", "nonsense=1"], "unknown threshold"),
        ([script("early_end.py"), "--json", "/no/such/folder/report.json"], "does not exist"),
    ],
)
def test_usage_errors_exit_2_without_traceback(args, message):
    result = CliRunner().invoke(trace_command, args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_missing_torch_is_one_line_and_exit_2(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    result = CliRunner().invoke(trace_command, [script("early_end.py")])
    assert result.exit_code == 2
    assert result.stderr.strip() == TORCH_MISSING


def test_threshold_option_changes_a_rule(trace_cli, tmp_path):
    fixture = str(Path(__file__).resolve().parents[2] / "fixtures" / "trace" / "activation_overflow_risk.py")
    default = trace_cli(fixture, "--steps", "2", "--fail-on", "never")
    relaxed = trace_cli(fixture, "--steps", "2", "--fail-on", "never", "--threshold", "activation_headroom=2")
    assert "AMP506" in default.codes and "AMP506" not in relaxed.codes
    assert relaxed.report["thresholds"]["activation_headroom"] == 2.0


def test_importing_the_command_does_not_import_torch():
    import subprocess

    code = "import sys, ampdoctor.trace, ampdoctor.trace.trace_cli; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_cli_defaults_are_the_session_defaults():
    from ampdoctor.trace.session import DEFAULT_GRADIENT_INTERVAL, DEFAULT_RECORD_OPS_STEPS

    defaults = {param.name: param.default for param in trace_command.params}
    assert defaults["gradient_interval"] == DEFAULT_GRADIENT_INTERVAL
    assert defaults["record_ops_steps"] == DEFAULT_RECORD_OPS_STEPS


def test_options_after_the_script_mixed_with_the_scripts_own_are_named_on_stderr(trace_cli):
    run = trace_cli(script("argv_probe.py"), "--lr", "0.1", "--steps", "2")
    assert json.loads(run.stdout.splitlines()[0])["argv"][1:] == ["--lr", "0.1"]
    (notice,) = [line for line in run.stderr.splitlines() if line.startswith("ampdoctor trace: took")]
    assert "--steps 2" in notice and "--lr 0.1" in notice and "--" in notice


def test_ampdoctor_options_alone_after_the_script_need_no_notice(trace_cli):
    run = trace_cli(script("argv_probe.py"), "--steps", "2")
    assert json.loads(run.stdout.splitlines()[0])["argv"][1:] == []
    assert "took" not in run.stderr


def test_after_the_double_dash_every_option_is_the_scripts(trace_cli):
    run = trace_cli(script("argv_probe.py"), "--", "--steps", "3", "--json", "x.json", "--timeout", "1")
    assert json.loads(run.stdout.splitlines()[0])["argv"][1:] == ["--steps", "3", "--json", "x.json", "--timeout", "1"]
    assert run.report is not None and "took" not in run.stderr


def test_a_script_dying_before_its_first_step_concludes_nothing_about_its_training(trace_cli):
    run = trace_cli(script("dies_before_stepping.py"))
    assert run.exit_code == 1 and run.report["steps"] == 0
    text = " ".join(run.stdout.split())
    assert "The script raised before its first optimizer step" in text
    assert "nothing is concluded" in text
    assert "No mixed-precision problems found" not in text and "full precision" not in text
    assert not any("never entered torch.autocast" in note for note in run.report["notes"])
    assert "first 0 iteration" not in text
    assert "Ops by module and dtype (before the first optimizer step)" in text


def test_the_report_files_written_are_named_on_stderr(trace_cli, tmp_path):
    page = tmp_path / "page.html"
    run = trace_cli(script("early_end.py"), "--html", str(page), "--no-lint")
    (line,) = [line for line in run.stdout.splitlines() if "Report written to" in line]
    assert "report.json (JSON)" in line and "page.html (HTML)" in line


def test_names_are_never_cut_when_the_report_goes_to_a_file(tmp_path):
    import subprocess
    import sys

    source = tmp_path / "long.py"
    source.write_text(
        "import torch\nfrom torch import nn\n"
        "inner = nn.Sequential()\n"
        "inner.add_module('a_projection_layer_with_a_really_long_descriptive_name_for_the_logs', nn.Linear(4, 4))\n"
        "class Wrapper(nn.Module):\n"
        "    def __init__(self, model):\n"
        "        super().__init__()\n"
        "        self._orig_mod = model\n"
        "    def forward(self, x):\n"
        "        return self._orig_mod(x)\n"
        "model = Wrapper(inner)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(3):\n"
        "    opt.zero_grad()\n"
        "    with torch.autocast('cpu', dtype=torch.bfloat16):\n"
        "        loss = model(torch.randn(8, 4)).float().pow(2).mean()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
    )
    out = tmp_path / "report.txt"
    with out.open("w") as handle:
        subprocess.run(
            [sys.executable, "-m", "ampdoctor", "trace", str(source), "--no-lint", "--json", str(tmp_path / "r.json")],
            stdout=handle,
            stderr=subprocess.PIPE,
            timeout=300,
            check=False,
        )
    text = out.read_text()
    name = "a_projection_layer_with_a_really_long_descriptive_name_for_the_logs"
    assert name in text and "…" not in text
    # The wrapper's attribute is not part of the user's names.
    report = json.loads((tmp_path / "r.json").read_text())
    assert {g["name"] for g in report["gradients"]} == {f"{name}.weight", f"{name}.bias"}
    assert not [a for a in report["activations"] if "_orig_mod" in a["module"]]
    assert not [o for o in report["ops"] if o["module"] and "_orig_mod" in o["module"]]
