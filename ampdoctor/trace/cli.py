"""``ampdoctor trace``: run a training script under instrumentation and report.

This module is imported by ``ampdoctor.cli`` for every command, so it must stay light: torch,
rich and the session are imported inside the command only.

Exit status: 0 no finding at or above ``--fail-on``; 1 findings at or above it, or the script
raised; n when the script called ``sys.exit(n)`` with n != 0; 130 on Ctrl-C; 124 when
``--timeout`` stopped the script; 2 usage errors (script or module not found, bad options, torch
missing) and a report file that cannot be written.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Iterator, Optional

import click

EXIT_TIMEOUT = 124  # as timeout(1)
TORCH_MISSING = "ampdoctor trace needs torch: pip install 'ampdoctor[trace]'"
_FAIL_LEVELS = ("info", "warning", "error", "never")


def _parse_thresholds(values: tuple[str, ...]) -> dict[str, str]:
    overrides = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"expected NAME=VALUE, got {item!r}", param_hint="--threshold")
        overrides[name.strip()] = value.strip()
    return overrides


@click.command(
    "trace",
    context_settings={
        "ignore_unknown_options": True,
        "allow_interspersed_args": True,
        "help_option_names": ["-h", "--help"],
    },
    short_help="Run a training script under instrumentation and report AMP problems.",
)
@click.argument("target", required=False, metavar="SCRIPT")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- SCRIPT_ARGS...]")
@click.option("-m", "module", metavar="MODULE", help="Run a module as `python -m MODULE` would.")
@click.option("--steps", type=click.IntRange(min=0), default=50, show_default=True,
              help="Stop after this many training iterations (0: run to the end).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, writable=True),
              help="Also write the JSON report to this file.")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="Report format on stdout; with json, the script's own stdout goes to stderr.")
@click.option("--fail-on", type=click.Choice(_FAIL_LEVELS, case_sensitive=False), default="warning",
              show_default=True, help="Exit 1 when a finding has at least this severity.")
@click.option("--record-ops-steps", type=click.IntRange(min=0), default=2, show_default=True,
              help="Record the per-op dtype census for the first K iterations.")
@click.option("--gradient-interval", type=click.IntRange(min=1), default=4, show_default=True,
              help="Measure the per-parameter gradient shares (AMP505) and max |g| on the "
              "op-recording iterations, then every N-th iteration (1: every iteration); inf/NaN "
              "gradients are checked on every iteration.")
@click.option("--threshold", "thresholds", multiple=True, metavar="NAME=VALUE",
              help="Change a rule threshold (e.g. skip_share=0.1); repeatable.")
@click.option("--progress/--no-progress", default=None,
              help="Progress display on stderr (default: when stderr is a terminal).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="Stop the script after this many seconds, write the report and exit 124.")
@click.option("--lint/--no-lint", "lint", default=True, show_default=True,
              help="Also lint the script and the local modules it imports, into the same report.")
@click.option("--tensorboard", "tensorboard_dir", type=click.Path(file_okay=False, writable=True),
              help="Write loss, loss scale, skipped steps and per-parameter underflow shares as "
              "TensorBoard scalars to this folder (needs the tensorboard package).")
@click.option("--what-if", "what_if", type=click.Choice(["float16"]), default=None,
              help="Predict how float16 with a GradScaler would fare on this run (the run itself "
              "is unchanged): shadow loss scale, underflow, activation overflow and a verdict.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, writable=True),
              help="Also write a self-contained HTML report (charts included) to this file.")
@click.option("--nproc-per-node", type=click.IntRange(min=1), default=None, metavar="N",
              help="Trace N processes of the script through torch.distributed.run (torchrun "
              "--standalone): a report per rank and a merged one (see Distributed training).")
@click.option("--merge-timeout", type=click.FloatRange(min=0, min_open=True), default=300.0, show_default=True,
              metavar="SECONDS", help="Under torchrun: how long rank 0 waits for the other ranks' "
              "reports, and they for the merged report.")
@click.option("--compare", "compare", type=click.Choice(["float32"]), default=None,
              help="Run the script twice, as written and with mixed precision switched off, and "
              "compare time per iteration, peak memory and loss; explain a run that does not pay off.")
@click.option("--compare-role", type=click.Choice(["float32", "mixed"]), default=None, hidden=True)
@click.option("--compare-baseline", type=click.Path(dir_okay=False), default=None, hidden=True)
@click.option("--compare-out", type=click.Path(dir_okay=False), default=None, hidden=True)
@click.pass_context
def trace_command(
    ctx: click.Context,
    target: Optional[str],
    script_args: tuple[str, ...],
    module: Optional[str],
    steps: int,
    json_path: Optional[str],
    output_format: str,
    fail_on: str,
    record_ops_steps: int,
    gradient_interval: int,
    thresholds: tuple[str, ...],
    progress: Optional[bool],
    lint: bool,
    tensorboard_dir: Optional[str],
    timeout: Optional[float],
    nproc_per_node: Optional[int] = None,
    merge_timeout: float = 300.0,
    what_if: Optional[str] = None,
    html_path: Optional[str] = None,
    compare: Optional[str] = None,
    compare_role: Optional[str] = None,
    compare_baseline: Optional[str] = None,
    compare_out: Optional[str] = None,
) -> None:
    """Run SCRIPT (or -m MODULE) for N training iterations under instrumentation.

    The script runs in this process as __main__, exactly as `python SCRIPT` would run it.
    Pass the script's own arguments after `--`:

        ampdoctor trace train.py --steps 20 -- --lr 0.1
    """
    if compare and not compare_role:
        # Two child runs do the work (and check the script, the options and torch themselves):
        # this process does not even import torch.
        from .compare_cli import start_compare

        ctx.exit(start_compare(ctx, target, module, script_args, nproc_per_node))
    try:
        import torch  # noqa: F401
    except ImportError:
        click.echo(TORCH_MISSING, err=True)
        ctx.exit(2)

    from .distributed import rank_info
    from .runner import Target, UsageError, check_target
    from .rules import Thresholds

    rank = rank_info()
    if module and target:
        script_args = (target, *script_args)
        target = None
    if not module and not target:
        raise click.UsageError("missing SCRIPT (or -m MODULE)", ctx=ctx)
    try:
        limits = Thresholds().with_overrides(_parse_thresholds(thresholds))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--threshold") from None
    if json_path and not os.path.isdir(os.path.dirname(os.path.abspath(json_path))):
        raise click.BadParameter(f"folder of {json_path!r} does not exist", param_hint="--json")
    # Relative to where ampdoctor was started, whatever the script does with os.chdir.
    json_path = os.path.abspath(json_path) if json_path else None
    if html_path and not os.path.isdir(os.path.dirname(os.path.abspath(html_path))):
        raise click.BadParameter(f"folder of {html_path!r} does not exist", param_hint="--html")
    html_path = os.path.abspath(html_path) if html_path else None
    run = Target(script=target, module=module, args=tuple(script_args))
    try:
        check_target(run)
    except UsageError as exc:
        click.echo(f"ampdoctor trace: {exc}", err=True)
        ctx.exit(2)
    if nproc_per_node is not None:
        _launch_ranks(ctx, nproc_per_node, rank is not None)

    threads_before = set(threading.enumerate())
    listeners = []
    if tensorboard_dir:
        from .tensorboard import TensorBoardLog, TensorBoardUnavailable

        try:
            listeners.append(TensorBoardLog(tensorboard_dir, limits))
        except (TensorBoardUnavailable, OSError) as exc:
            click.echo(f"ampdoctor trace: {exc}", err=True)
            ctx.exit(2)
    sigterm = contextlib.nullcontext()
    if rank is not None:
        from .distributed import termination

        sigterm = termination.handling()
    with _one_line_errors(ctx), sigterm:
        try:
            report, outcome = _trace(
                run, steps or None, record_ops_steps, gradient_interval, limits, output_format, progress,
                lint=lint, listeners=listeners, timeout=timeout, what_if=what_if,
                compare_child=(compare_role, compare_baseline, compare_out) if compare_role else None,
            )
        finally:
            for listener in listeners:
                listener.close()
        try:
            if html_path:
                from .distributed import rank_path
                from .html import write_html

                # Under torchrun each rank writes its own page beside the others (as --json).
                write_html(report, html_path if rank is None else rank_path(html_path, rank.rank))
            if rank is None:
                _emit(report, outcome, json_path, output_format)
            else:  # under torchrun: this rank's report, and rank 0 the merged one
                from .distributed import finish_rank

                rank_status = finish_rank(rank, report, outcome, json_path, output_format, fail_on, merge_timeout)
        except OSError as exc:
            click.echo(f"ampdoctor trace: cannot write the report: {exc}", err=True)
            ctx.exit(2)
    status = _exit_status(report, outcome, fail_on) if rank is None else rank_status
    _end_despite_script_threads(outcome, threads_before, status)
    ctx.exit(status)


def _launch_ranks(ctx: click.Context, nproc: int, under_torchrun: bool) -> None:
    """``--nproc-per-node N``: the same command, without the option, under torch.distributed.run."""
    from .distributed import launch_command

    if under_torchrun:
        raise click.UsageError("--nproc-per-node is for a start outside torchrun; this process is already a rank", ctx=ctx)
    command = launch_command(ctx, nproc)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)


@contextlib.contextmanager
def _one_line_errors(ctx: click.Context) -> Iterator[None]:
    """ampdoctor's own failures (the script's are in the report) end in one line, not a
    traceback: exit 2, or 130 for a Ctrl-C once the script is over. AMPDOCTOR_DEBUG=1 re-raises."""
    try:
        yield
    except KeyboardInterrupt:
        click.echo("ampdoctor trace: interrupted while writing the report", err=True)
        ctx.exit(130)
    except (click.exceptions.Exit, click.ClickException):
        raise
    except Exception as exc:
        if os.environ.get("AMPDOCTOR_DEBUG"):
            raise
        click.echo(
            f"ampdoctor trace: internal error: {type(exc).__name__}: {exc} (AMPDOCTOR_DEBUG=1 shows the traceback)",
            err=True,
        )
        ctx.exit(2)


def _trace(
    run, steps, record_ops_steps, gradient_interval, limits, output_format, progress, lint=False, listeners=(),
    timeout=None, what_if=None, compare_child=None,
):
    import contextlib

    from .deadline import Deadline
    from .runner import run_target
    from .session import TraceSession, TraceTimeout

    show_progress = sys.stderr.isatty() if progress is None else progress
    with _progress_display(show_progress, steps) as on_progress:
        session = TraceSession(
            steps=steps,
            record_ops_steps=record_ops_steps,
            gradient_interval=gradient_interval,
            thresholds=limits,
            script=run.source_path() or run.display,
            argv=[run.display, *run.args],
            progress=on_progress,
            lint=lint,
        )
        session.iteration_listeners.extend(listeners)
        if what_if:
            from .whatif import WhatIfFloat16

            session.what_if = WhatIfFloat16(session)
        child = contextlib.nullcontext()
        if compare_child:
            from .compare_child import CompareChild

            child = CompareChild(compare_child[0], session, baseline=compare_child[1], out=compare_child[2])
        redirect = contextlib.redirect_stdout(sys.stderr) if output_format == "json" else contextlib.nullcontext()
        with redirect, session:
            with child, Deadline(timeout, TraceTimeout):
                outcome = run_target(run)
            session.outcome = outcome
    if session.in_forked_child:
        _end_forked_child(session.outcome)
    report = session.report()
    if compare_child:
        child.finish(report)
    return report, session.outcome


def _end_forked_child(outcome) -> None:
    """A process the script forked came back through ampdoctor: it ends as it would have ended
    under ``python``, and only the traced process reports."""
    if outcome.traceback:
        sys.stderr.write(outcome.traceback)
    raise SystemExit({"error": 1, "interrupt": 130}.get(outcome.reason, outcome.exit_code or 0))


def _emit(report, outcome, json_path: Optional[str], output_format: str) -> None:
    if outcome.traceback:
        sys.stderr.write(outcome.traceback)
        sys.stderr.flush()
    write_error = None
    if json_path:
        try:
            report.write_json(json_path)
        except OSError as exc:  # the report still goes to stdout; the caller says what failed
            write_error = exc
    if output_format == "json":
        click.echo(report.to_json())
    else:
        report.print()
    if write_error is not None:
        raise write_error


def _end_despite_script_threads(outcome, threads_before, status: int) -> None:
    """The script was stopped, but threads it started (a producer feeding a queue forever) are
    still running and would keep the process alive: end it, as the stop intended."""
    from .threads import script_threads_left

    if outcome.reason in ("steps", "timeout", "interrupt") and script_threads_left(threads_before):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def _exit_status(report, outcome, fail_on: str) -> int:
    from ..findings import Severity

    if outcome.reason == "error":
        return 1
    if outcome.reason == "interrupt":
        return 130
    if outcome.reason == "timeout":
        return EXIT_TIMEOUT
    if outcome.reason == "exit" and outcome.exit_code:
        return outcome.exit_code
    level = None if fail_on.lower() == "never" else Severity.parse(fail_on)
    return 1 if report.fails(level) else 0


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

    def __enter__(self):
        self._progress.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._progress.stop()

    def __call__(self, step: int, total: Optional[int], scale: Optional[float], skipped: int) -> None:
        status = f"scale {scale:g}  skipped {skipped}" if scale is not None else ""
        self._progress.update(self._task, completed=step, status=status)


def _progress_display(enabled: bool, total: Optional[int]):
    import contextlib

    if not enabled:
        return contextlib.nullcontext(None)
    return _Progress(total)
