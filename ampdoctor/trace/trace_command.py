"""What ``ampdoctor trace`` does once its options are parsed (``trace_cli.py`` only parses them):
run the target under a ``TraceSession``, write the report where it was asked for, and give the
exit status (``outcome.exit_status``). Imported by the click command only when it runs, so
torch and rich load only then.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, Optional

import click

from .outcome import exit_status

if TYPE_CHECKING:
    from .distributed import RankInfo
    from .outcome import Outcome
    from .report.tensorboard import TensorBoardLog
    from .report.trace_report import TraceReport
    from .rulebase import Thresholds
    from .runner import Target
    from .session import TraceSession


class CommandError(Exception):
    """A problem of ampdoctor's own (not the script's), said in one line; exit status 2."""


@dataclass
class TraceRequest:
    """The parsed options of one ``ampdoctor trace`` run."""

    run: Target
    steps: Optional[int]
    record_ops_steps: int
    gradient_interval: int
    thresholds: Thresholds
    output_format: str = "text"
    fail_on: str = "warning"
    progress: Optional[bool] = None
    lint: bool = True
    tensorboard_dir: Optional[str] = None
    timeout: Optional[float] = None
    what_if: Optional[str] = None
    json_path: Optional[str] = None
    html_path: Optional[str] = None
    merge_timeout: float = 300.0
    rank: Optional[RankInfo] = None  # under torchrun
    # A child run of ``--compare float32`` (compare_child.py): "float32" or "mixed", the float32
    # run's measurements (read by the mixed run) and where the float32 run writes them.
    compare_role: Optional[str] = None
    compare_against: Optional[str] = None  # the baseline: "float32" or "bfloat16"
    compare_baseline: Optional[str] = None
    compare_out: Optional[str] = None
    notices: list[str] = field(default_factory=list)  # one-line remarks for stderr before the run


def run_trace(request: TraceRequest) -> int:
    """Trace the target and report; returns the exit status. Raises ``CommandError``."""
    rank = request.rank
    threads_before = set(threading.enumerate())
    listeners = []
    if request.tensorboard_dir:
        from .report.tensorboard import TensorBoardLog, TensorBoardUnavailable

        try:
            listeners.append(TensorBoardLog(request.tensorboard_dir, request.thresholds))
        except (TensorBoardUnavailable, OSError) as exc:
            raise CommandError(str(exc)) from None
    for notice in request.notices:
        click.echo(f"ampdoctor trace: {notice}", err=True)
    sigterm: Any = contextlib.nullcontext()
    if rank is not None:
        from .distributed import termination

        sigterm = termination.handling()
    with _one_line_errors(), sigterm:
        try:
            report, outcome = _trace(request, listeners)
        finally:
            for listener in listeners:
                listener.close()
        try:
            if request.html_path:
                from .distributed import rank_path
                from .report.html import write_html

                # Under torchrun each rank writes its own page beside the others (as --json).
                html_path = request.html_path if rank is None else rank_path(request.html_path, rank.rank)
                write_html(report, html_path)
            if rank is None:
                _emit(report, outcome, request)
                _say_where_written(request)
            else:  # under torchrun: this rank's report, and rank 0 the merged one
                from .distributed import finish_rank

                rank_status = finish_rank(
                    rank,
                    report,
                    outcome,
                    request.json_path,
                    request.output_format,
                    request.fail_on,
                    request.merge_timeout,
                )
        except OSError as exc:
            raise CommandError(f"cannot write the report: {exc}") from None
    status = exit_status(report, outcome, request.fail_on) if rank is None else rank_status
    _end_despite_script_threads(outcome, threads_before, status)
    return status


@contextlib.contextmanager
def _one_line_errors() -> Iterator[None]:
    """ampdoctor's own failures (the script's are in the report) end in one line, not a
    traceback: exit 2, or 130 for a Ctrl-C once the script is over. AMPDOCTOR_DEBUG=1 re-raises."""
    try:
        yield
    except KeyboardInterrupt:
        click.echo("ampdoctor trace: interrupted while writing the report", err=True)
        raise SystemExit(130) from None
    except (click.exceptions.Exit, click.ClickException, CommandError, SystemExit):
        raise
    except Exception as exc:
        if os.environ.get("AMPDOCTOR_DEBUG"):
            raise
        raise CommandError(
            f"internal error: {type(exc).__name__}: {exc} (AMPDOCTOR_DEBUG=1 shows the traceback)"
        ) from None


def _trace(request: TraceRequest, listeners: list[TensorBoardLog]) -> tuple[TraceReport, Outcome]:
    from .autocast_state import autocast_as_found
    from .deadline import Deadline
    from .runner import run_target
    from .session import TraceSession
    from .stopping import TraceTimeout

    run = request.run
    show_progress = sys.stderr.isatty() if request.progress is None else request.progress
    with _progress_display(show_progress, request.steps) as on_progress:
        session = TraceSession(
            steps=request.steps,
            record_ops_steps=request.record_ops_steps,
            gradient_interval=request.gradient_interval,
            thresholds=request.thresholds,
            script=run.source_path() or run.display,
            argv=[run.display, *run.args],
            progress=on_progress,
            lint=request.lint,
        )
        session.iteration_listeners.extend(listeners)
        if request.what_if:
            from .whatif import WhatIfFloat16

            session.what_if = WhatIfFloat16(session)
        child: Any = contextlib.nullcontext()
        if request.compare_role:
            from .compare.compare_child import CompareChild

            child = CompareChild(
                request.compare_role,
                session,
                baseline=request.compare_baseline,
                out=request.compare_out,
                against=request.compare_against or request.compare_role,
            )
        redirect: Any = (
            contextlib.redirect_stdout(sys.stderr) if request.output_format == "json" else contextlib.nullcontext()
        )
        with redirect, session:
            # Outside the deadline, so that no late stop lands in its restoring.
            with (
                autocast_as_found(),
                child,
                Deadline(request.timeout, TraceTimeout, on_give_up=lambda: _report_on_give_up(session, request)),
            ):
                outcome = run_target(run)
            session.outcome = outcome
    if session.in_forked_child:
        _end_forked_child(session.outcome)
    report = session.report()
    if request.compare_role:
        child.finish(report)
    return report, session.outcome


def _report_on_give_up(session: TraceSession, request: TraceRequest) -> None:
    """The script swallowed every stop of ``--timeout``: report what was seen so far, from the
    watchdog thread, before the process ends (deadline.py)."""
    from .outcome import Outcome

    session.outcome = Outcome("timeout")
    report = session.report()
    if request.html_path and request.rank is None:
        from .report.html import write_html

        write_html(report, request.html_path)
    if request.rank is None:
        _emit(report, session.outcome, request)


def _end_forked_child(outcome: Outcome) -> NoReturn:
    """A process the script forked came back through ampdoctor: it ends as it would have ended
    under ``python``, and only the traced process reports."""
    if outcome.traceback:
        sys.stderr.write(outcome.traceback)
    raise SystemExit({"error": 1, "interrupt": 130}.get(outcome.reason, outcome.exit_code or 0))


def _emit(report: TraceReport, outcome: Outcome, request: TraceRequest) -> None:
    if outcome.traceback:
        sys.stderr.write(outcome.traceback)
        sys.stderr.flush()
    write_error = None
    if request.json_path:
        try:
            report.write_json(request.json_path)
        except OSError as exc:  # the report still goes to stdout; the caller says what failed
            write_error = exc
    if request.output_format == "json":
        click.echo(report.to_json())
    else:
        report.print()
    if write_error is not None:
        raise write_error


def _say_where_written(request: TraceRequest) -> None:
    """One line naming the report files written: under the text report, or on stderr when
    stdout is the JSON document."""
    written = [
        f"{_shown(path)} ({kind})" for path, kind in ((request.json_path, "JSON"), (request.html_path, "HTML")) if path
    ]
    if written:
        click.echo(f"Report written to {' and '.join(written)}.", err=request.output_format == "json")


def _shown(path: str) -> str:
    relative = os.path.relpath(path)
    return path if relative.startswith(os.pardir) else relative


def _end_despite_script_threads(outcome: Outcome, threads_before: set[threading.Thread], status: int) -> None:
    """The script was stopped, but threads it started (a producer feeding a queue forever) are
    still running and would keep the process alive: end it, as the stop intended."""
    from .threads import script_threads_left

    if outcome.reason in ("steps", "timeout", "interrupt") and script_threads_left(threads_before):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


class _Progress:
    """Steps done of N, the current loss scale and the skipped steps, on stderr."""

    def __init__(self, total: Optional[int]) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("tracing"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
            # Print the script's output above the bar only when it goes to the terminal anyway;
            # stdout redirected to a file must stay there.
            redirect_stdout=sys.stdout.isatty(),
            redirect_stderr=False,
        )
        self._task = self._progress.add_task("trace", total=total, status="")

    def __enter__(self) -> _Progress:
        self._progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._progress.stop()

    def __call__(self, step: int, total: Optional[int], scale: Optional[float], skipped: int) -> None:
        status = f"scale {scale:g}  skipped {skipped}" if scale is not None else ""
        self._progress.update(self._task, completed=step, status=status)


def _progress_display(enabled: bool, total: Optional[int]) -> contextlib.AbstractContextManager[Optional[_Progress]]:
    if not enabled:
        return contextlib.nullcontext(None)
    return _Progress(total)
