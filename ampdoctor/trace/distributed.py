"""Tracing under torchrun: every rank traced as a single process, one merged report.

Under ``torchrun`` (``RANK`` and a ``WORLD_SIZE`` above 1 in the environment) every rank runs the
script exactly as a single ``ampdoctor trace`` would, and when its script has stopped:

1. writes its own report, ``report.rankN.json`` beside ``--json report.json``;
2. posts that report to torch.distributed's key-value store: the ``TCPStore`` that torchrun's
   agent runs for the whole job (``TORCHELASTIC_USE_AGENT_STORE``), else the one rank 0 hosts at
   ``MASTER_ADDR:MASTER_PORT`` (shared with the script's own group while that lives);
3. rank 0 waits for every rank's report, up to ``--merge-timeout`` seconds, and writes and prints
   the merged report: its own data, every rank's findings (each naming its ranks), a ``ranks``
   table, AMP511 where ranks' loss scales or skip decisions differ, and a note for every rank
   that raised, ended early or sent nothing. The other ranks print one line; those stopped by
   ``--steps`` wait for the merged report before they exit. Only rank 0's exit status carries
   the verdict (``--fail-on``); the others exit as their script would have, because torchrun
   ends every rank as soon as one exits with an error.

Why the store and not a gather on a process group: when ranks diverge (one raised, another is
blocked in the script's all-reduce) a collective on the script's group pairs with the wrong
collective, and a fresh group needs every rank to arrive. Keys are posted and awaited one by one,
each wait with a deadline, so nothing waits forever, and the script may have destroyed its group.
The agent's store outlives the workers, so a rank that has gone still has its report read.

A rank whose script raised or ended posts its report and exits at once, as it would under
``python``: its connections close, a peer blocked in a collective with it fails
instead of hanging, and torchrun sends SIGTERM to the other ranks. Under ampdoctor a SIGTERM
stops the script like Ctrl-C (the report says "interrupt"), and once the script is over it only
shortens the wait: torchrun allows 30 seconds before SIGKILL, time enough to write the reports.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Optional, cast

from ..findings import Finding, Location, Severity
from .report.trace_report import TraceReport
from .rules import evaluate_ranks
from .runner import script_on_stack

if TYPE_CHECKING:
    from types import FrameType

    import click
    from rich.console import Console
    from rich.table import Table

    from .outcome import Outcome

DEFAULT_MERGE_TIMEOUT = 300.0
# How long rank 0 waits for the others when its own script raised or exited.
EARLY_END_WAIT = 15.0
_KEY_PREFIX = "ampdoctor-trace"


@dataclass(frozen=True)
class RankInfo:
    """Where this process stands in a torchrun job."""

    rank: int
    world_size: int
    master_addr: Optional[str]
    master_port: Optional[int]
    agent_store: bool
    attempt: str

    @property
    def label(self) -> str:
        return f"rank {self.rank} of {self.world_size}"


def rank_info(environ: Optional[Mapping[str, str]] = None) -> Optional[RankInfo]:
    """This process's rank when it runs under torchrun with more than one rank, else None."""
    env = os.environ if environ is None else environ
    try:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    except (KeyError, ValueError):
        return None
    if world < 2 or not 0 <= rank < world:
        return None
    try:
        port: Optional[int] = int(env["MASTER_PORT"])
    except (KeyError, ValueError):
        port = None
    return RankInfo(
        rank=rank,
        world_size=world,
        master_addr=env.get("MASTER_ADDR") or None,
        master_port=port,
        agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
        attempt=env.get("TORCHELASTIC_RESTART_COUNT", "0"),
    )


def rank_path(json_path: str, rank: int) -> str:
    """``report.json`` → ``report.rank1.json``."""
    root, ext = os.path.splitext(json_path)
    return f"{root}.rank{rank}{ext or '.json'}"


# -- the exchange -----------------------------------------------------------------------------


class Exchange:
    """Rank reports and the "merged report written" mark, as keys in torch.distributed's store."""

    def __init__(self, info: RankInfo, timeout: float) -> None:
        from torch.distributed import PrefixStore, TCPStore  # type: ignore[attr-defined]  # not re-exported by torch

        if info.master_addr is None or info.master_port is None:
            raise ConnectionError("MASTER_ADDR or MASTER_PORT is not set")
        hosts = not info.agent_store and info.rank == 0
        store = TCPStore(
            info.master_addr,
            info.master_port,
            is_master=hosts,
            timeout=timedelta(seconds=max(timeout, 1.0)),
            wait_for_workers=False,
            multi_tenant=hosts,
        )
        self._store = PrefixStore(f"{_KEY_PREFIX}/{info.attempt}", store)

    def post(self, rank: int, report: dict[str, Any]) -> None:
        self._store.set(f"rank{rank}", json.dumps(report, allow_nan=False))

    def collect(self, ranks: list[int], deadline: float) -> dict[int, Optional[dict[str, Any]]]:
        """Each rank's report, or None for a rank that posted none before the deadline."""
        reports: dict[int, Optional[dict[str, Any]]] = {}
        for rank in ranks:
            key = f"rank{rank}"
            if not self._wait(key, deadline):
                reports[rank] = None
                continue
            reports[rank] = json.loads(self._store.get(key))
        return reports

    def mark_merged(self) -> None:
        self._store.set("merged", "1")

    def wait_merged(self, deadline: float) -> bool:
        return self._wait("merged", deadline)

    def _wait(self, key: str, deadline: float) -> bool:
        # In slices, so that a SIGTERM (handled between them) can shorten the wait.
        while True:
            remaining = termination.deadline(deadline) - time.monotonic()
            try:
                self._store.wait([key], timedelta(seconds=min(max(remaining, 0.05), 1.0)))
                return True
            except Exception:  # DistStoreError on timeout, RuntimeError when the store went away
                if remaining <= 1.0:
                    return False


class Termination:
    """torchrun's SIGTERM (another rank failed): while the script runs it stops the script as
    Ctrl-C would; once the script is over it shortens the waits to what torchrun grants before
    SIGKILL (30 s by default).

    Whether the script still runs is read from the interrupted frame, not from a flag: a flag
    is cleared only after the script's error has been caught, and a SIGTERM landing in between
    (torchrun sends it as soon as a peer fails, which is when this rank's collective raises)
    would cut short the code that records the error, and this rank would write no report."""

    GRACE = 20.0

    def __init__(self) -> None:
        self.received_at: Optional[float] = None

    @contextlib.contextmanager
    def handling(self) -> Iterator[None]:
        import threading

        # Left in place afterwards: the process ends right after the reports, and a SIGTERM
        # in between must not cut them short.
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._handle)
        yield

    def deadline(self, deadline: float) -> float:
        return deadline if self.received_at is None else min(deadline, self.received_at + self.GRACE)

    def _handle(self, signum: int, frame: Optional[FrameType]) -> None:
        first = self.received_at is None
        if first:
            self.received_at = time.monotonic()
        if first and script_on_stack(frame):
            raise KeyboardInterrupt


termination = Termination()


def connect(info: RankInfo, timeout: float) -> tuple[Optional[Exchange], Optional[str]]:
    """The exchange, or None and why it could not be reached."""
    try:
        return Exchange(info, timeout), None
    except Exception as exc:  # no store to reach: each rank keeps its own report
        text = str(exc).strip().splitlines()
        return None, f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


# -- the merged report ------------------------------------------------------------------------


@dataclass
class MergedReport(TraceReport):
    """Rank 0's report with every rank's findings, the ranks table and AMP511."""

    world_size: int = 0
    ranks: list[dict[str, Any]] = field(default_factory=list)
    failed_ranks: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["world_size"] = self.world_size
        data["rank"] = None
        data["ranks"] = self.ranks
        return data

    def print(self, console: Optional[Console] = None) -> None:
        from .report.report_text import report_console

        console = console or report_console(self)
        super().print(console)
        console.print(_ranks_table(self.ranks))


def _ranks_table(ranks: list[dict[str, Any]]) -> Table:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="Ranks", title_justify="left")
    for column in ("rank", "iterations", "stopped", "skipped", "findings", "report"):
        table.add_column(column, justify="right" if column in ("rank", "iterations", "skipped") else "left")
    for entry in ranks:
        if not entry["reported"]:
            table.add_row(
                str(entry["rank"]), "-", "[red]no report[/]", "", "", escape(os.path.basename(entry["report"] or "-"))
            )
            continue
        stopped = entry["stopped"] + (f": {entry['error']}" if entry["error"] else "")
        table.add_row(
            str(entry["rank"]),
            str(entry["steps"]),
            escape(stopped),
            str(len(entry["skipped"])),
            ", ".join(entry["findings"]) or "-",
            escape(os.path.basename(entry["report"] or "-")),
        )
    return table


def _finding_from_dict(data: dict[str, Any]) -> Finding:
    location = Location(data.get("path") or "<trace>", data.get("line") or 1, data.get("column") or 1)
    return Finding(
        code=data["code"],
        severity=Severity.parse(data["severity"]),
        message=data["message"],
        location=location,
        help=data.get("help"),
        extra=dict(data.get("extra") or {}),
    )


def _merge_findings(own: TraceReport, others: dict[int, dict[str, Any]], own_rank: int) -> list[Finding]:
    """Every rank's findings, one entry per (code, message) naming the ranks that reported it."""
    merged: dict[tuple[str, str], Finding] = {}
    sources = [(own_rank, list(own.findings))]
    sources += [(rank, [_finding_from_dict(f) for f in report.get("findings", [])]) for rank, report in others.items()]
    for rank, findings in sorted(sources, key=lambda item: item[0]):
        for finding in findings:
            key = (finding.code, finding.message)
            if key not in merged:
                merged[key] = finding.replace(extra={**finding.extra, "ranks": []})
            ranks = merged[key].extra["ranks"]
            assert isinstance(ranks, list)  # made just above
            ranks.append(rank)
    return list(merged.values())


def _rank_note(
    rank: int, report: Optional[dict[str, Any]], reference_steps: int, unreachable: Optional[str]
) -> Optional[str]:
    if report is None:
        if unreachable:
            return f"Rank {rank}'s report could not be gathered ({unreachable})."
        return (
            f"Rank {rank} sent no report (it was killed, ended without Python's error handling, or "
            "was still running when rank 0 stopped waiting): the merged report covers the other ranks."
        )
    steps, reason = report.get("steps", 0), report.get("stopped")
    if reason == "error":
        return f"Rank {rank} raised {report.get('error')} after {steps} iteration(s): its report is incomplete."
    if reason == "interrupt":
        return f"Rank {rank} was interrupted after {steps} iteration(s)."
    if reason == "timeout":
        return f"Rank {rank} was stopped by --timeout after {steps} iteration(s)."
    if steps != reference_steps:
        how = f"sys.exit({report.get('exit_code')})" if reason == "exit" else "the script ended"
        return f"Rank {rank} stopped after {steps} iteration(s) ({how}), rank 0 after {reference_steps}."
    return None


def _rank_entry(rank: int, report: Optional[dict[str, Any]], path: Optional[str]) -> dict[str, Any]:
    entry: dict[str, Any] = {"rank": rank, "report": path, "reported": report is not None}
    if report is None:
        return entry
    entry.update(
        steps=report.get("steps"),
        stopped=report.get("stopped"),
        completed=report.get("completed"),
        error=report.get("error"),
        exit_code=report.get("exit_code"),
        findings=sorted({f["code"] for f in report.get("findings", [])}),
        scale=report.get("scale", []),
        skipped=report.get("skipped", []),
    )
    return entry


def merge_reports(
    own: TraceReport,
    own_dict: dict[str, Any],
    others: dict[int, Optional[dict[str, Any]]],
    info: RankInfo,
    json_path: Optional[str],
    unreachable: Optional[str] = None,
) -> MergedReport:
    """Rank 0's merged report from its own report and the other ranks' (None: none came)."""
    reports = {info.rank: own_dict, **{r: rep for r, rep in others.items() if rep is not None}}
    findings = _merge_findings(own, {r: rep for r, rep in reports.items() if r != info.rank}, info.rank)
    step_site = own.observations.step_site
    location = Location(*step_site) if step_site else Location(own.script or "<trace>", 1)
    findings.extend(evaluate_ranks(reports, location))
    findings.sort(key=lambda f: (-f.severity, f.code, f.extra.get("step") or 0))
    notes = list(own.notes)
    if unreachable:
        notes.append(
            f"The other ranks' reports could not be gathered ({unreachable}): this report holds rank {info.rank} only."
        )
    entries, failed = [], []
    for rank in range(info.world_size):
        report = reports.get(rank)
        path = rank_path(json_path, rank) if json_path else None
        entries.append(_rank_entry(rank, report, path))
        if rank == info.rank:
            continue
        note = _rank_note(rank, report, own.observations.steps, unreachable)
        if note:
            notes.append(note)
        if report is None or report.get("stopped") in ("error", "interrupt"):
            failed.append(rank)
    base = {f.name: getattr(own, f.name) for f in fields(TraceReport)}
    base.update(findings=findings, notes=notes)
    return MergedReport(**base, world_size=info.world_size, ranks=entries, failed_ranks=failed)


# -- the end of a rank's run ------------------------------------------------------------------


def _rank_dict(report: TraceReport, info: RankInfo) -> dict[str, Any]:
    data = report.to_dict()
    data["world_size"] = info.world_size
    data["rank"] = info.rank
    return data


def _write(path: str, data: dict[str, Any]) -> None:
    from ..atomic import write_text_atomic

    write_text_atomic(path, json.dumps(data, indent=2, allow_nan=False) + "\n")


def _one_line(info: RankInfo, report: TraceReport, path: Optional[str]) -> str:
    count = len(report.findings)
    where = f"report: {path}" if path else "merged into rank 0's report"
    how = "" if report.outcome.reason in ("steps", "end") else f" ({report.outcome.reason})"
    return (
        f"ampdoctor trace ({info.label}): {report.observations.steps} iteration(s){how}, "
        f"{count} finding{'s' if count != 1 else ''}; {where}"
    )


def finish_rank(
    info: RankInfo,
    report: TraceReport,
    outcome: Outcome,
    json_path: Optional[str],
    output_format: str,
    fail_on: str,
    timeout: float = DEFAULT_MERGE_TIMEOUT,
) -> int:
    """Write this rank's report, exchange, and (rank 0) write and print the merged report; the
    exit status."""
    import click

    from .outcome import exit_status

    if outcome.traceback:
        sys.stderr.write(outcome.traceback)
        sys.stderr.flush()
    own = _rank_dict(report, info)
    own_path = rank_path(json_path, info.rank) if json_path else None
    write_error: Optional[OSError] = None
    if own_path:
        try:
            _write(own_path, own)
        except OSError as exc:
            write_error = exc
    deadline = time.monotonic() + timeout
    in_step = outcome.reason in ("steps", "timeout")  # stopped by ampdoctor, as the others are
    exchange, unreachable = connect(info, timeout)
    if exchange is not None:
        try:
            exchange.post(info.rank, own)
        except Exception as exc:  # the store went away: rank 0 will say this rank sent nothing
            exchange, unreachable = None, f"{type(exc).__name__}: {exc}"
    if info.rank != 0:
        click.echo(_one_line(info, report, own_path), err=True)
        if exchange is not None and in_step:
            # Exiting now with an error status would make torchrun end rank 0 mid-merge. A rank
            # that raised or ended leaves at once instead: its peers may be blocked on it.
            exchange.wait_merged(deadline)
        if write_error is not None:
            raise write_error
        # The verdict is rank 0's; this rank exits as its script would have, so that torchrun
        # ends the other ranks only where a script really failed.
        return exit_status(report, outcome, "never")
    if not in_step and outcome.reason != "end":
        # The others may be blocked in a collective with this rank until it exits.
        deadline = min(deadline, time.monotonic() + EARLY_END_WAIT)
    return _merge_as_rank_zero(
        info, report, own, exchange, unreachable, deadline, json_path, output_format, fail_on, write_error
    )


def _merge_as_rank_zero(
    info: RankInfo,
    report: TraceReport,
    own: dict[str, Any],
    exchange: Optional[Exchange],
    unreachable: Optional[str],
    deadline: float,
    json_path: Optional[str],
    output_format: str,
    fail_on: str,
    write_error: Optional[OSError],
) -> int:
    """Gather the other ranks' reports, write and print the merged report; the exit status."""
    import click

    from .outcome import exit_status

    others_ranks = [r for r in range(info.world_size) if r != info.rank]
    others = exchange.collect(others_ranks, deadline) if exchange is not None else dict.fromkeys(others_ranks)
    merged = merge_reports(report, own, others, info, json_path, unreachable)
    document = merged.to_dict()
    try:
        if json_path:
            _write(json_path, document)
    except OSError as exc:
        write_error = write_error or exc
    if output_format == "json":
        click.echo(json.dumps(document, indent=2, allow_nan=False))
    else:
        merged.print()
    if exchange is not None:
        exchange.mark_merged()
    if write_error is not None:
        raise write_error
    status = exit_status(merged, report.outcome, fail_on)
    return 1 if status == 0 and merged.failed_ranks else status


# -- the --nproc-per-node shortcut ------------------------------------------------------------

_NOT_FORWARDED = {"nproc_per_node", "module", "target", "script_args"}


def _option_words(option: click.Option, value: Any) -> list[str]:
    if option.is_flag and option.secondary_opts:
        return [option.opts[0] if value else option.secondary_opts[0]]
    if option.is_flag:
        return [option.opts[0]] if value else []
    values = value if option.multiple else [value]
    return [word for item in values for word in (option.opts[0], str(item))]


def forwarded_arguments(ctx: click.Context) -> list[str]:
    """The ``trace`` arguments the user gave, ``--nproc-per-node`` left out."""
    import click
    from click.core import ParameterSource

    given = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    words: list[str] = []
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name in _NOT_FORWARDED:
            continue
        if ctx.get_parameter_source(param.name) in given:
            words += _option_words(param, ctx.params[param.name])
    module, target = ctx.params.get("module"), ctx.params.get("target")
    script_args = list(ctx.params.get("script_args") or ())
    if module:
        words += ["-m", module]
        script_args = ([target] if target else []) + script_args
    else:  # without -m the command requires a script (trace_cli.py checked)
        words.append(cast(str, target))
    return words + (["--", *script_args] if script_args else [])


def launch_command(ctx: click.Context, nproc: int) -> list[str]:
    """``python -m torch.distributed.run --standalone --nproc-per-node N -m ampdoctor trace ...``"""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "ampdoctor",
        "trace",
        *forwarded_arguments(ctx),
    ]
