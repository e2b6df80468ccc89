"""The trace report lints the traced code (the script and the local modules it imports), and
``--tensorboard`` writes the trace's curves as TensorBoard scalars."""

import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ampdoctor.trace.trace_cli import trace_command

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "trace"
LOCAL = FIXTURES / "local_module"


def _invoke(*args):
    return CliRunner().invoke(trace_command, list(args), catch_exceptions=False)


def test_static_findings_of_an_imported_local_module_join_the_report(tmp_path):
    report_path = tmp_path / "r.json"
    run = _invoke(str(LOCAL / "train.py"), "--steps", "3", "--fail-on", "never", "--json", str(report_path))
    assert run.exit_code == 0, run.output
    report = json.loads(report_path.read_text())
    assert report["linted_files"] == [str(LOCAL / "amp_utils.py"), str(LOCAL / "train.py")]
    static = [(f["code"], Path(f["path"]).name, f["line"]) for f in report["static_findings"]]
    assert static == [("AMP101", "amp_utils.py", 24)]  # in a function the script never calls
    assert "Static findings in the traced code" in run.stdout and "amp_utils.py:24" in run.stdout
    # The clip of still-scaled gradients is seen at run time too: one finding, the runtime one,
    # and the underflow it causes (gradients clipped to norm 1, then unscaled to tiny values) is
    # withheld rather than blamed on the loss scale.
    runtime = [(f["code"], Path(f["path"]).name, f["line"], f["extra"].get("lint")) for f in report["findings"]]
    assert runtime == [("AMP201", "amp_utils.py", 13, True)]
    # The headline counts both kinds.
    assert "Found 2 errors." in " ".join(run.stdout.split())


def test_no_lint_leaves_the_static_part_out(tmp_path):
    report_path = tmp_path / "r.json"
    run = _invoke(
        str(LOCAL / "train.py"), "--steps", "2", "--no-lint", "--fail-on", "never", "--json", str(report_path)
    )
    assert run.exit_code == 0
    report = json.loads(report_path.read_text())
    assert report["linted_files"] == [] and report["static_findings"] == []
    assert "Static findings" not in run.stdout


def test_only_modules_in_the_script_folder_are_linted(tmp_path):
    # A module imported from elsewhere (an installed package) is not the user's script code.
    report_path = tmp_path / "r.json"
    _invoke(str(FIXTURES / "healthy_bf16.py"), "--steps", "2", "--json", str(report_path))
    report = json.loads(report_path.read_text())
    assert report["linted_files"] == [str(FIXTURES / "healthy_bf16.py")]
    assert report["static_findings"] == []


def test_a_bad_lint_configuration_is_a_note_and_the_trace_report_stands(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(LOCAL, project)
    (project / "pyproject.toml").write_text('[tool.ampdoctor]\nselect = ["NOPE999"]\n')
    report_path = tmp_path / "r.json"
    run = _invoke(str(project / "train.py"), "--steps", "2", "--fail-on", "never", "--json", str(report_path))
    assert run.exit_code == 0, run.output
    report = json.loads(report_path.read_text())
    assert report["static_findings"] == []
    (note,) = [n for n in report["notes"] if "not linted" in n]
    assert "NOPE999" in note and "\n" not in note


def test_tensorboard_scalars_match_the_report(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logdir, report_path = tmp_path / "tb", tmp_path / "r.json"
    run = _invoke(
        str(FIXTURES / "backward_overflow.py"),
        "--steps",
        "12",
        "--fail-on",
        "never",
        "--tensorboard",
        str(logdir),
        "--json",
        str(report_path),
    )
    assert run.exit_code == 0, run.output
    report = json.loads(report_path.read_text())
    events = EventAccumulator(str(logdir))
    events.Reload()
    tags = events.Tags()["scalars"]
    series = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in tags}
    assert series["ampdoctor/loss_scale"] == [(i + 1, s) for i, s in enumerate(report["scale"])]
    assert series["ampdoctor/skipped"] == [(i, float(i in report["skipped"])) for i in range(1, 13)]
    losses = [(step, pytest.approx(loss, rel=1e-6)) for step, loss in enumerate(report["loss"], start=1)]
    assert series["ampdoctor/loss"] == losses
    # Per-parameter underflow shares on the sampled iterations (1, 2, then every 4th).
    steps = [step for step, _ in series["ampdoctor/underflow_share/head.weight"]]
    assert steps == [1, 2, 4, 8, 12]
    assert all(0.0 <= value <= 1.0 for tag in tags if "underflow_share" in tag for _, value in series[tag])


def test_tensorboard_without_the_package_is_a_one_line_usage_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    run = _invoke(str(FIXTURES / "healthy_bf16.py"), "--steps", "2", "--tensorboard", str(tmp_path / "tb"))
    assert run.exit_code == 2
    assert run.stderr.strip().splitlines() == [
        "ampdoctor trace: --tensorboard needs the tensorboard package: pip install 'ampdoctor[tensorboard]'"
    ]
