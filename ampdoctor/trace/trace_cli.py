"""``ampdoctor trace``: run a training script under instrumentation and report.

This module is imported by ``ampdoctor.cli`` for every command, so it must stay light: torch,
rich and the session are imported inside the command only.

Exit status: 0 no finding at or above ``--fail-on``; 1 findings at or above it, or the script
raised; n when the script called ``sys.exit(n)`` with n != 0; 130 on Ctrl-C; 124 when
``--timeout`` stopped the script; 2 usage errors (script or module not found, bad options, torch
missing) and a report file that cannot be written.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

import click

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


class _TraceCommand(click.Command):
    """Keeps the raw arguments, to tell the user which options after SCRIPT ampdoctor took."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["ampdoctor.trace.argv"] = list(args)
        return super().parse_args(ctx, args)


def _options_the_script_defines(script: str | None, names: list[str]) -> list[str]:
    """Those of ``names`` that the script's text spells as a string (``add_argument("--steps")``)."""
    if not script or not names:
        return []
    try:
        with open(script, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return []
    return [name for name in dict.fromkeys(names) if f'"{name}"' in text or f"'{name}'" in text]


def options_taken_after_script(command: click.Command, args: list[str]) -> tuple[list[str], list[str]]:
    """(ampdoctor's options written after SCRIPT, the script's arguments given without ``--``),
    each as the words the user typed."""
    takes_value: dict[str, bool] = {}
    for param in command.params:
        if isinstance(param, click.Option):
            for name in (*param.opts, *param.secondary_opts):
                takes_value[name] = not (param.is_flag or param.count)
    taken: list[str] = []
    given: list[str] = []
    seen_script = False
    words = iter(args)
    for word in words:
        if word == "--":
            break
        name = word.split("=", 1)[0]
        if name in takes_value:
            option = [word]
            if takes_value[name] and "=" not in word:
                option.append(next(words, ""))
            if name == "-m":
                seen_script = True
            elif seen_script:
                taken += option
            continue
        if not seen_script and not word.startswith("-"):
            seen_script = True
            continue
        given.append(word)
    return taken, given


@click.command(
    "trace",
    cls=_TraceCommand,
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
@click.option(
    "--steps",
    type=click.IntRange(min=0),
    default=50,
    show_default=True,
    help="Stop after this many training iterations (0: run to the end).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, writable=True),
    help="Also write the JSON report to this file.",
)
@click.option(
    "--output-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Report format on stdout; with json, the script's own stdout goes to stderr.",
)
@click.option(
    "--fail-on",
    type=click.Choice(_FAIL_LEVELS, case_sensitive=False),
    default="warning",
    show_default=True,
    help="Exit 1 when a finding has at least this severity.",
)
@click.option(
    "--record-ops-steps",
    type=click.IntRange(min=0),
    default=2,
    show_default=True,
    help="Record the per-op dtype census for the first K iterations.",
)
@click.option(
    "--gradient-interval",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Measure the per-parameter gradient shares (AMP505) and max |g| on the "
    "op-recording iterations, then every N-th iteration (1: every iteration); inf/NaN "
    "gradients are checked on every iteration.",
)
@click.option(
    "--threshold",
    "thresholds",
    multiple=True,
    metavar="NAME=VALUE",
    help="Change a rule threshold (e.g. skip_share=0.1); repeatable.",
)
@click.option(
    "--progress/--no-progress", default=None, help="Progress display on stderr (default: when stderr is a terminal)."
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="Stop the script after this many seconds, write the report and exit 124.",
)
@click.option(
    "--lint/--no-lint",
    "lint",
    default=True,
    show_default=True,
    help="Also lint the script and the local modules it imports, into the same report.",
)
@click.option(
    "--tensorboard",
    "tensorboard_dir",
    type=click.Path(file_okay=False, writable=True),
    help="Write loss, loss scale, skipped steps and per-parameter underflow shares as "
    "TensorBoard scalars to this folder (needs the tensorboard package).",
)
@click.option(
    "--what-if",
    "what_if",
    type=click.Choice(["float16"]),
    default=None,
    help="Predict how float16 with a GradScaler would fare on this run (the run itself "
    "is unchanged): shadow loss scale, underflow, activation overflow and a verdict.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, writable=True),
    help="Also write a self-contained HTML report (charts included) to this file.",
)
@click.option(
    "--nproc-per-node",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Trace N processes of the script through torch.distributed.run (torchrun "
    "--standalone): a report per rank and a merged one (see Distributed training).",
)
@click.option(
    "--merge-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="Under torchrun: how long rank 0 waits for the other ranks' reports, and they for the merged report.",
)
@click.option(
    "--compare",
    "compare",
    type=click.Choice(["float32", "bfloat16"]),
    default=None,
    help="Run the script twice, as written and with mixed precision switched off (float32), "
    "or a float8 script with float8 switched off and bfloat16 autocast (bfloat16), and compare "
    "time per iteration, peak memory and loss; explain a run that does not pay off.",
)
@click.option("--compare-role", type=click.Choice(["float32", "bfloat16", "mixed"]), default=None, hidden=True)
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

    ampdoctor's options written after SCRIPT are ampdoctor's (`ampdoctor trace train.py --steps
    20`); when the script also gets arguments there, a line on stderr says which were taken.
    """
    if compare and not compare_role:
        # Two child runs do the work (and check the script, the options and torch themselves):
        # this process does not even import torch.
        from .compare.compare_cli import start_compare

        ctx.exit(start_compare(ctx, target, module, script_args, nproc_per_node))
    try:
        import torch  # noqa: F401
    except ImportError:
        click.echo(TORCH_MISSING, err=True)
        ctx.exit(2)

    from .distributed import rank_info
    from .rulebase import Thresholds
    from .runner import Target, UsageError, check_target
    from .trace_command import CommandError, TraceRequest, run_trace

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
    # Relative to where ampdoctor was started, whatever the script does with os.chdir.
    json_path = _output_path(json_path, "--json")
    html_path = _output_path(html_path, "--html")
    run = Target(script=target, module=module, args=tuple(script_args))
    try:
        check_target(run)
    except UsageError as exc:
        click.echo(f"ampdoctor trace: {exc}", err=True)
        ctx.exit(2)
    if nproc_per_node is not None:
        _launch_ranks(ctx, nproc_per_node, rank is not None)
    notices = []
    taken, given = options_taken_after_script(ctx.command, ctx.meta.get("ampdoctor.trace.argv", []))
    if taken and given:
        received = " ".join(script_args)
        notices.append(
            f"took {' '.join(taken)} for itself; the script received {received} "
            "(arguments after `--` all go to the script)"
        )
    shared = _options_the_script_defines(target, [word.split("=", 1)[0] for word in taken if word.startswith("-")])
    if shared:
        names = ", ".join(shared)
        notices.append(
            f"took {names} for itself, but the script defines {names} too: to give it to the script, "
            f"write it after `--` (`ampdoctor trace SCRIPT -- {shared[0]} ...`)"
        )
    request = TraceRequest(
        run=run,
        steps=steps or None,
        record_ops_steps=record_ops_steps,
        gradient_interval=gradient_interval,
        thresholds=limits,
        output_format=output_format,
        fail_on=fail_on,
        progress=progress,
        lint=lint,
        tensorboard_dir=tensorboard_dir,
        timeout=timeout,
        what_if=what_if,
        json_path=json_path,
        html_path=html_path,
        merge_timeout=merge_timeout,
        rank=rank,
        notices=notices,
        compare_role=compare_role,
        compare_against=compare,
        compare_baseline=compare_baseline,
        compare_out=compare_out,
    )
    try:
        status = run_trace(request)
    except CommandError as exc:
        click.echo(f"ampdoctor trace: {exc}", err=True)
        ctx.exit(2)
    ctx.exit(status)


def _output_path(path: Optional[str], option: str) -> Optional[str]:
    if not path:
        return None
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise click.BadParameter(f"folder of {path!r} does not exist", param_hint=option)
    return os.path.abspath(path)


def _launch_ranks(ctx: click.Context, nproc: int, under_torchrun: bool) -> None:
    """``--nproc-per-node N``: the same command, without the option, under torch.distributed.run."""
    from .distributed import launch_command

    if under_torchrun:
        raise click.UsageError(
            "--nproc-per-node is for a start outside torchrun; this process is already a rank", ctx=ctx
        )
    command = launch_command(ctx, nproc)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)
