"""ampdoctor trace under torchrun: a report per rank, rank 0's merged report, AMP511, a rank
that raises, and the --nproc-per-node shortcut. The end-to-end tests start two gloo processes on
the CPU (marker ``distributed``); a subprocess timeout guards against any hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES

from ampdoctor.catalog import get_rule
from ampdoctor.findings import Location, Severity
from ampdoctor.trace.distributed import forwarded_arguments, rank_info, rank_path
from ampdoctor.trace.rules.rank_rules import scale_disagreement
from ampdoctor.trace.trace_cli import trace_command

DDP_SCRIPT = FIXTURES / "distributed" / "ddp_train.py"
SAFETY_TIMEOUT = 240  # seconds: a hang fails the test instead of blocking the suite


def _rank_report(scales, skipped):
    return {"scale": scales, "skipped": skipped}


# -- without processes ------------------------------------------------------------------------


def test_rank_info_reads_torchrun_environment():
    env = {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "localhost",
        "MASTER_PORT": "29500",
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCHELASTIC_RESTART_COUNT": "0",
    }
    info = rank_info(env)
    assert (info.rank, info.world_size, info.master_port, info.agent_store) == (1, 2, 29500, True)
    assert rank_info({}) is None
    assert rank_info({"RANK": "0", "WORLD_SIZE": "1"}) is None  # one process: a plain trace
    assert rank_info({"RANK": "x", "WORLD_SIZE": "2"}) is None


def test_rank_path_sits_beside_the_report():
    assert rank_path("/out/report.json", 3) == "/out/report.rank3.json"
    assert rank_path("/out/trace", 0) == "/out/trace.rank0.json"


def test_scale_disagreement_names_first_iteration_and_ranks():
    reports = {
        0: _rank_report([65536.0, 32768.0, 32768.0, 32768.0], [1]),
        1: _rank_report([65536.0, 32768.0, 16384.0, 16384.0], [1, 2]),
        2: _rank_report([65536.0, 32768.0, 32768.0, 32768.0], [1]),
    }
    finding = scale_disagreement(reports, Location("train.py", 7))
    assert finding.code == "AMP511" and finding.severity is Severity.ERROR
    assert finding.extra["step"] == 2 and finding.extra["ranks"] == [1]
    assert finding.extra["iterations"] == 3
    assert "iteration 2" in finding.message and "rank 1: scale 32768, step skipped" in finding.message
    assert "ranks 0, 2: scale 32768, step applied" in finding.message


def test_scale_agreement_and_scaler_less_runs_are_silent():
    same = _rank_report([65536.0, 32768.0, 32768.0], [1])
    assert scale_disagreement({0: same, 1: dict(same)}, Location("t.py")) is None
    # A rank that stopped early is compared on the iterations all ranks traced.
    short = _rank_report([65536.0, 32768.0], [1])
    assert scale_disagreement({0: same, 1: short}, Location("t.py")) is None
    plain = _rank_report([None, None], [])
    assert scale_disagreement({0: plain, 1: dict(plain)}, Location("t.py")) is None


def test_shortcut_forwards_every_given_option_but_its_own():
    ctx = trace_command.make_context(
        "trace",
        [
            "--nproc-per-node",
            "2",
            "--steps",
            "5",
            "--no-lint",
            "--threshold",
            "skip_share=0.2",
            "--json",
            "r.json",
            "train.py",
            "--",
            "--lr",
            "0.1",
        ],
    )
    assert forwarded_arguments(ctx) == [
        "--steps",
        "5",
        "--json",
        "r.json",
        "--threshold",
        "skip_share=0.2",
        "--no-lint",
        "train.py",
        "--",
        "--lr",
        "0.1",
    ]
    module = trace_command.make_context("trace", ["--nproc-per-node", "2", "-m", "pkg.train", "--", "--fast"])
    assert forwarded_arguments(module) == ["-m", "pkg.train", "--", "--fast"]


def _traced_report(tmp_path):
    import contextlib
    import io

    from ampdoctor.trace.runner import Target, run_target
    from ampdoctor.trace.session import TraceSession

    script = tmp_path / "tiny.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Linear(4, 2)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "scaler = torch.amp.GradScaler('cpu')\n"
        "for _ in range(3):\n"
        "    optimizer.zero_grad()\n"
        "    with torch.autocast('cpu', dtype=torch.float16):\n"
        "        loss = model(torch.randn(8, 4)).float().pow(2).mean()\n"
        "    scaler.scale(loss).backward()\n"
        "    scaler.step(optimizer)\n"
        "    scaler.update()\n"
    )
    with contextlib.redirect_stdout(io.StringIO()):
        with TraceSession(script=str(script), lint=False) as session:
            session.outcome = run_target(Target(script=str(script)))
    return session.report()


def test_merged_report_names_missing_and_failed_ranks(tmp_path):
    import io

    from rich.console import Console

    from ampdoctor.trace.distributed import RankInfo, merge_reports

    own = _traced_report(tmp_path)
    own_dict = own.to_dict()
    assert own_dict["steps"] == 3 and not own.findings
    crashed = dict(
        own_dict,
        steps=1,
        stopped="error",
        completed=False,
        error="RuntimeError: boom",
        findings=[
            {
                "code": "AMP502",
                "severity": "warning",
                "message": "skips",
                "path": "t.py",
                "line": 3,
                "help": None,
                "extra": {"step": 1},
            }
        ],
    )
    info = RankInfo(rank=0, world_size=3, master_addr=None, master_port=None, agent_store=False, attempt="0")
    merged = merge_reports(own, own_dict, {1: crashed, 2: None}, info, str(tmp_path / "r.json"))
    assert merged.failed_ranks == [1, 2]
    assert [entry["reported"] for entry in merged.ranks] == [True, True, False]
    assert merged.ranks[2]["report"] == str(tmp_path / "r.rank2.json")
    assert "Rank 1 raised RuntimeError: boom after 1 iteration(s): its report is incomplete." in merged.notes
    assert any(note.startswith("Rank 2 sent no report (it was killed") for note in merged.notes)
    finding = next(f for f in merged.findings if f.code == "AMP502")
    assert finding.extra["ranks"] == [1] and finding.severity is Severity.WARNING
    # Rank 1's first iteration is compared with rank 0's: both at the same scale, none skipped.
    assert not [f for f in merged.findings if f.code == "AMP511"]
    document = json.loads(json.dumps(merged.to_dict(), allow_nan=False))
    assert document["world_size"] == 3 and document["rank"] is None and len(document["ranks"]) == 3
    console = Console(file=io.StringIO(), width=120)
    merged.print(console)
    text = console.file.getvalue()
    assert "Ranks" in text and "no report" in text and "Rank 1 raised RuntimeError: boom" in text


# -- two gloo processes -----------------------------------------------------------------------


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=SAFETY_TIMEOUT, check=False
    )


def _torchrun(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return _run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            "-m",
            "ampdoctor",
            "trace",
            *args,
        ],
        cwd,
    )


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.distributed
def test_healthy_ddp_through_the_shortcut(tmp_path):
    result = _run(
        [
            sys.executable,
            "-m",
            "ampdoctor",
            "trace",
            "--nproc-per-node",
            "2",
            str(DDP_SCRIPT),
            "--steps",
            "6",
            "--json",
            "report.json",
        ],
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    merged = _load(tmp_path / "report.json")
    ranks = [_load(tmp_path / f"report.rank{rank}.json") for rank in (0, 1)]
    assert merged["world_size"] == 2 and merged["rank"] is None
    assert [r["rank"] for r in ranks] == [0, 1]
    assert merged["steps"] == 6 and [r["steps"] for r in ranks] == [6, 6]
    assert [entry["steps"] for entry in merged["ranks"]] == [6, 6]
    assert all(entry["reported"] and entry["stopped"] == "steps" for entry in merged["ranks"])
    assert ranks[0]["scale"] == ranks[1]["scale"] and ranks[0]["skipped"] == ranks[1]["skipped"]
    assert merged["findings"] == [] and all(r["findings"] == [] for r in ranks)
    # rank 0 prints the merged report; rank 1 one line
    assert "Ranks" in result.stdout and "No mixed-precision problems found" in result.stdout
    assert "ampdoctor trace (rank 1 of 2): 6 iteration(s), 0 findings" in result.stderr


@pytest.mark.distributed
def test_a_rank_that_raises_is_reported_and_nothing_hangs(tmp_path):
    result = _torchrun(
        str(DDP_SCRIPT),
        "--steps",
        "6",
        "--json",
        "report.json",
        "--output-format",
        "json",
        "--",
        "--fail-rank",
        "1",
        "--fail-at",
        "3",
        cwd=tmp_path,
    )
    assert result.returncode != 0
    merged = _load(tmp_path / "report.json")
    # With --output-format json, stdout holds rank 0's merged report and nothing else.
    assert json.loads(result.stdout)["ranks"] == merged["ranks"]
    crashed = _load(tmp_path / "report.rank1.json")
    survivor = _load(tmp_path / "report.rank0.json")
    assert crashed["stopped"] == "error" and "lost its data shard" in crashed["error"] and crashed["steps"] == 2
    assert survivor["rank"] == 0 and not survivor["completed"]
    entry = merged["ranks"][1]
    assert entry["reported"] and entry["stopped"] == "error" and entry["steps"] == 2
    assert any(note.startswith("Rank 1 raised RuntimeError: rank 1 lost its data shard") for note in merged["notes"])


@pytest.mark.distributed
def test_a_rank_killed_outright_is_listed_without_report(tmp_path):
    # os._exit: no Python error handling, no report from rank 1; torchrun sends rank 0 SIGTERM.
    result = _torchrun(
        str(DDP_SCRIPT),
        "--steps",
        "6",
        "--json",
        "report.json",
        "--",
        "--fail-rank",
        "1",
        "--fail-at",
        "3",
        "--fail-hard",
        cwd=tmp_path,
    )
    assert result.returncode != 0
    assert not (tmp_path / "report.rank1.json").exists()
    assert (tmp_path / "report.rank0.json").exists(), result.stderr[-3000:]
    survivor = _load(tmp_path / "report.rank0.json")
    merged = _load(tmp_path / "report.json")
    assert survivor["steps"] == 2 and not survivor["completed"]
    assert merged["ranks"][1] == {"rank": 1, "report": str(tmp_path / "report.rank1.json"), "reported": False}
    assert any(note.startswith("Rank 1 sent no report") for note in merged["notes"])


@pytest.mark.distributed
@pytest.mark.parametrize("kind", ["bad", "good"])
def test_rank_scale_disagreement_page_examples(kind, tmp_path):
    example = next(e for e in get_rule("AMP511").examples if e.kind == kind)
    assert "torchrun" in example.options
    (tmp_path / "example.py").write_text(example.source)
    result = _torchrun("example.py", "--json", "report.json", cwd=tmp_path)
    merged = _load(tmp_path / "report.json")
    assert [entry["steps"] for entry in merged["ranks"]] == [8, 8], result.stderr[-3000:]
    codes = {f["code"] for f in merged["findings"]}
    if kind == "bad":
        finding = next(f for f in merged["findings"] if f["code"] == "AMP511")
        assert finding["severity"] == "error" and finding["step"] == 2
        assert finding["extra"]["ranks"] == [0, 1]  # two ranks: no majority, both named
        assert finding["extra"]["decisions"]["1"] == "scale 32768, step skipped"
        assert "iteration 2" in finding["message"]
        assert result.returncode == 1
    else:
        assert "AMP511" not in codes
        assert not [f for f in merged["findings"] if f["severity"] in ("warning", "error")]
        assert merged["ranks"][0]["skipped"] == merged["ranks"][1]["skipped"]
        assert result.returncode == 0, result.stderr[-3000:]


# -- a SIGTERM while the script's error is being recorded ---------------------------------------

_SIGTERM_WHILE_RECORDING = """
import os, signal

class ShardLost(RuntimeError):
    sent = False

    def __str__(self):
        # Runs when ampdoctor records the error, after the script has left: torchrun's SIGTERM
        # arriving just then, as it does when a peer fails.
        if not ShardLost.sent:
            ShardLost.sent = True
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass
        return "rank 0 lost its data shard"

raise ShardLost()
"""


@pytest.mark.slow
def test_a_sigterm_while_the_error_is_recorded_still_leaves_the_report(tmp_path):
    import socket

    (tmp_path / "train.py").write_text(_SIGTERM_WHILE_RECORDING)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC")}
    env.update(RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    result = subprocess.run(
        [sys.executable, "-m", "ampdoctor", "trace", "train.py", "--json", "report.json", "--merge-timeout", "1"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=SAFETY_TIMEOUT,
        check=False,
    )
    assert "interrupted while writing the report" not in result.stderr
    own = _load(tmp_path / "report.rank0.json")
    assert own["stopped"] == "error" and own["error"] == "ShardLost: rank 0 lost its data shard"
    merged = _load(tmp_path / "report.json")
    assert merged["ranks"][1]["reported"] is False
    assert result.returncode == 1, result.stderr[-3000:]


def test_only_the_target_counts_as_running(tmp_path, monkeypatch):
    from ampdoctor.trace.runner import Target, run_target, script_on_stack

    assert not script_on_stack(sys._getframe())
    probe = (
        "import sys\nfrom ampdoctor.trace.runner import script_on_stack\n"
        "def inner():\n    return script_on_stack(sys._getframe())\n"
        "open(sys.argv[1], 'w').write(str(inner()))\n"
    )
    (tmp_path / "probe.py").write_text(probe)
    (tmp_path / "probe_folder").mkdir()
    (tmp_path / "probe_folder" / "__main__.py").write_text(probe)
    monkeypatch.chdir(tmp_path)
    for target in (Target(script="probe.py"), Target(module="probe"), Target(script="probe_folder")):
        seen = tmp_path / "seen.txt"
        seen.unlink(missing_ok=True)
        target = Target(script=target.script, module=target.module, args=(str(seen),))
        assert run_target(target).reason == "end", target
        assert seen.read_text() == "True", target
