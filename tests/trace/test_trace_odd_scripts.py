"""Scripts that do what real training scripts do — worker processes, threads, evaluation
between steps, a changed working directory, their own exception hook, argparse, anomaly
detection, hanging — run under ``ampdoctor trace`` as under ``python``, and the report is
written every time. The scripts are in scripts/odd/; most run through the installed command in
a subprocess, because they start processes and threads or end the interpreter."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ODD = Path(__file__).resolve().parent / "scripts" / "odd"

# Every script here is a real training run, most in their own interpreter: none is quick.
pytestmark = pytest.mark.slow


def ampdoctor(*args: str, cwd: Path = ODD, timeout: float = 240) -> subprocess.CompletedProcess:
    """``python -m ampdoctor ARGS`` (the installed command's code path) in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "ampdoctor", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def python(*args: str, cwd: Path = ODD) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=240)


def read_report(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.slow
def test_main_module_file_local_import_and_guard_are_exactly_as_under_python(tmp_path):
    plain = python("main_probe.py", "--lr", "3")
    traced = ampdoctor("trace", "main_probe.py", "--steps", "0", "--json", str(tmp_path / "r.json"), "--", "--lr", "3")
    assert plain.returncode == traced.returncode == 0, traced.stderr
    expected = json.loads(plain.stdout.splitlines()[0])
    assert expected["guard"] is True and expected["name"] == "__main__"  # the probe really probes
    assert json.loads(traced.stdout.splitlines()[0]) == expected
    assert read_report(tmp_path / "r.json")["steps"] == 3


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_dataloader_workers_run_untraced_and_the_guard_holds(tmp_path, start_method):
    report = tmp_path / "r.json"
    run = ampdoctor("trace", "dataloader_workers.py", "--steps", "5", "--json", str(report), "--", start_method)
    assert run.returncode == 0, run.stderr
    assert read_report(report)["steps"] == 5 and read_report(report)["stopped"] == "steps"
    seen = [line for line in run.stdout.splitlines() if line.startswith("worker hooks")]
    assert len(seen) == 5 and set(seen) == {"worker hooks 0"}  # no worker process holds a hook
    assert "finished" not in run.stdout
    # The workers share the parent's stderr: each announcement is one write (so it stays whole),
    # but it can land inside another process's line (torch's C++ warnings are written piece by
    # piece), so the announcements are read from the stream, not from the starts of its lines.
    imports = re.findall(r"imported as (\S+)\n", run.stderr)
    if start_method == "spawn":  # each worker re-imports the script, whose guard keeps it from training
        assert imports == ["__main__"] + ["__mp_main__"] * 2, run.stderr
    else:
        assert imports == ["__main__"], run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.slow
def test_a_producer_thread_left_running_does_not_keep_ampdoctor_alive(tmp_path):
    report = tmp_path / "r.json"
    run = ampdoctor("trace", "threads.py", "--steps", "5", "--json", str(report), timeout=120)
    assert run.returncode == 0, run.stderr
    assert read_report(report)["steps"] == 5
    assert "iteration(s) traced (stopped after --steps 5)" in " ".join(run.stdout.split())


@pytest.mark.slow
def test_training_in_a_thread_stops_the_whole_script(tmp_path):
    report = tmp_path / "r.json"
    run = ampdoctor("trace", "thread_trainer.py", "--steps", "5", "--json", str(report))
    assert run.returncode == 0, run.stderr
    assert read_report(report)["steps"] == 5 and read_report(report)["stopped"] == "steps"
    assert "saved checkpoint" not in run.stdout  # the main thread did not go on after the stop
    assert "Exception in thread" not in run.stderr and "Traceback" not in run.stderr


@pytest.mark.slow
def test_the_scripts_own_excepthook_shows_its_crash_as_under_python(tmp_path):
    plain = python("excepthook.py", "crash")
    report = tmp_path / "r.json"
    traced = ampdoctor("trace", "excepthook.py", "--json", str(report), "--", "crash")
    assert plain.returncode == traced.returncode == 1
    assert plain.stderr.strip() == "script hook saw RuntimeError"
    assert traced.stderr.strip() == "script hook saw RuntimeError"  # its hook, no traceback of ours
    assert read_report(report)["error"] == "RuntimeError: diverged"
    assert read_report(report)["steps"] == 3


@pytest.mark.slow
def test_report_path_relative_to_the_start_folder_survives_os_chdir(tmp_path):
    start, elsewhere = tmp_path / "start", tmp_path / "elsewhere"
    for folder in (start, start / "out", elsewhere):
        folder.mkdir()
    run = ampdoctor(
        "trace", str(ODD / "chdir.py"), "--steps", "3", "--json", "out/report.json", "--", str(elsewhere), cwd=start
    )
    assert run.returncode == 0, run.stderr
    assert read_report(start / "out" / "report.json")["steps"] == 3
    assert list(elsewhere.iterdir()) == []


# In process, through click's runner: scripts that start no process and leave no thread.


def odd(name: str) -> str:
    return str(ODD / name)


def test_evaluation_under_no_grad_between_steps_is_no_iteration(trace_cli):
    run = trace_cli(odd("eval_between.py"), "--steps", "0")
    assert run.exit_code == 0 and "done" in run.stdout
    printed = [float(line.split()[2]) for line in run.stdout.splitlines() if line.startswith("train")]
    assert run.report["steps"] == 6 == len(printed)
    assert run.report["loss"] == pytest.approx(printed, abs=1e-6)
    uses = run.report["uses"]
    # Two models, two optimizers, one scaler made again at iteration 4: still one iteration per update.
    assert uses["optimizers"] == ["SGD#1", "SGD#2"] and uses["scaler_steps"] == 12
    assert run.report["scale"] == [65536.0] * 6 and run.report["skipped"] == []


def test_a_stop_between_two_models_optimizer_steps_comes_after_the_update(trace_cli):
    run = trace_cli(odd("eval_between.py"), "--steps", "4")
    assert run.report["steps"] == 4 and run.report["stopped"] == "steps"
    assert [line.split()[1] for line in run.stdout.splitlines() if line.startswith("train")] == ["0", "1", "2"]


def test_argparse_help_exits_0_and_the_report_says_no_step_was_seen(trace_cli):
    run = trace_cli(odd("argparse_help.py"), "--", "--help")
    assert run.exit_code == 0
    assert "usage: argparse_help.py" in run.stdout
    assert run.report["stopped"] == "exit" and run.report["exit_code"] == 0 and run.report["steps"] == 0
    assert any("No optimizer step was seen" in note for note in run.report["notes"])


def test_anomaly_detection_does_not_disturb_tracing(trace_cli):
    import torch

    try:
        run = trace_cli(odd("anomaly.py"), "--steps", "3")
    finally:
        torch.autograd.set_detect_anomaly(False)  # the script set it for this whole process
    assert run.exit_code == 0, run.stderr
    assert run.report["steps"] == 3 and run.report["findings"] == []


@pytest.mark.parametrize("name", ["never_steps.py", "hang.py"])
def test_timeout_stops_a_script_that_never_steps_writes_the_report_and_exits_124(trace_cli, name):
    import signal

    handler = signal.getsignal(signal.SIGALRM)
    run = trace_cli(odd(name), "--timeout", "2")
    assert run.exit_code == 124
    assert run.report["stopped"] == "timeout" and run.report["completed"] is False
    assert run.report["steps"] == 0
    assert any("Stopped by --timeout" in note for note in run.report["notes"])
    assert any("No optimizer step was seen" in note for note in run.report["notes"])
    assert "stopped by --timeout" in " ".join(run.stdout.split())
    assert signal.getsignal(signal.SIGALRM) is handler and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_timeout_stop_never_leaves_the_process_inside_an_autocast_region(trace_cli):
    # A stop that landed half-way through torch's enter or exit of a region (about one run in
    # five here) would leave autocast on for everything the process runs next.
    import torch

    for _ in range(5):
        run = trace_cli(odd("enters_regions.py"), "--timeout", "0.2")
        assert run.exit_code == 124 and run.report["stopped"] == "timeout"
        assert not torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16


def test_timeout_that_does_not_expire_changes_nothing(trace_cli):
    run = trace_cli(odd("eval_between.py"), "--steps", "0", "--timeout", "600")
    assert run.exit_code == 0 and run.report["stopped"] == "end" and run.report["steps"] == 6


@pytest.mark.parametrize("value", ["0", "-1", "soon"])
def test_timeout_must_be_a_positive_number(value):
    from click.testing import CliRunner

    from ampdoctor.trace.trace_cli import trace_command

    result = CliRunner().invoke(trace_command, [odd("never_steps.py"), "--timeout", value])
    assert result.exit_code == 2 and "--timeout" in result.stderr and "Traceback" not in result.stderr


def test_the_scripts_excepthook_is_put_back_after_the_run(trace_cli):
    before = sys.excepthook
    run = trace_cli(odd("excepthook.py"), "--", "crash")
    assert run.exit_code == 1 and run.report["error"] == "RuntimeError: diverged"
    assert "script hook saw RuntimeError" in run.stderr and "Traceback" not in run.stderr
    assert sys.excepthook is before


def test_a_report_file_that_cannot_be_written_is_one_line_exit_2_and_no_partial_file(tmp_path, monkeypatch):
    import errno

    from click.testing import CliRunner

    import ampdoctor.atomic
    from ampdoctor.trace.trace_cli import trace_command

    def no_space(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ampdoctor.atomic.os, "replace", no_space)
    result = CliRunner().invoke(
        trace_command, [odd("eval_between.py"), "--steps", "2", "--json", str(tmp_path / "r.json")]
    )
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "ampdoctor trace: cannot write the report: [Errno 28] No space left on device"
    ]
    # the terminal report was still printed (rich wraps the headline at the console width)
    assert "iteration(s) traced" in " ".join(result.stdout.split())
    assert os.listdir(tmp_path) == []


def test_an_internal_error_is_one_line_and_exit_2(tmp_path, monkeypatch):
    from click.testing import CliRunner

    import ampdoctor.trace.report.trace_report
    from ampdoctor.trace.trace_cli import trace_command

    def broken(session):
        raise ValueError("cannot summarise")

    monkeypatch.setattr(ampdoctor.trace.report.trace_report, "build_report", broken)
    monkeypatch.delenv("AMPDOCTOR_DEBUG", raising=False)
    result = CliRunner().invoke(trace_command, [odd("eval_between.py"), "--steps", "1"])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "ampdoctor trace: internal error: ValueError: cannot summarise (AMPDOCTOR_DEBUG=1 shows the traceback)"
    ]


@pytest.mark.slow
def test_ctrl_c_from_outside_writes_the_report_and_exits_130(tmp_path):
    import signal

    report = tmp_path / "r.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "ampdoctor", "trace", "never_steps.py", "--json", str(report)],
        cwd=ODD,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C heard as in a terminal, even where the suite runs with SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert process.stdout.readline().strip() == "started"  # the script is running
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:  # a failed assertion leaves no tracer running behind the suite
            process.kill()
            process.communicate()
    assert process.returncode == 130, stderr
    assert read_report(report)["stopped"] == "interrupt" and read_report(report)["completed"] is False
    assert "interrupted" in " ".join(stdout.split()) and "Traceback" not in stderr


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_ends_as_under_python_and_only_the_parent_reports(tmp_path):
    report = tmp_path / "r.json"
    run = ampdoctor("trace", "forks.py", "--steps", "0", "--json", str(report))
    assert run.returncode == 0, run.stderr
    assert "child ends" in run.stdout and "child status 3" in run.stdout
    assert " ".join(run.stdout.split()).count("iteration(s) traced") == 1
    assert read_report(report)["steps"] == 2 and read_report(report)["stopped"] == "end"


def test_training_in_a_thread_is_stopped_and_the_census_limit_is_stated(trace_cli):
    run = trace_cli(odd("thread_trainer.py"), "--steps", "3")
    assert run.exit_code == 0 and run.report["stopped"] == "steps" and run.report["steps"] == 3
    assert "saved checkpoint" not in run.stdout and "Exception in thread" not in run.stderr
    assert any("saw only the main thread's ops" in note for note in run.report["notes"])
    assert not any(
        "saw only the main thread's ops" in note for note in trace_cli(odd("eval_between.py")).report["notes"]
    )


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["del", "except"])
def test_timeout_ends_the_run_with_124_even_when_the_script_swallows_the_stop(tmp_path, mode):
    import json
    import subprocess
    import sys

    report_path = tmp_path / "report.json"
    command = [
        sys.executable,
        "-m",
        "ampdoctor",
        "trace",
        odd("swallows_stops.py"),
        "--timeout",
        "1",
        "--json",
        str(report_path),
        "--no-lint",
        "--",
        mode,
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert run.returncode == 124, run.stderr[-2000:]
    report = json.loads(report_path.read_text())
    assert report["stopped"] == "timeout" and report["completed"] is False
