"""``ampdoctor trace --compare float32``: the script run twice, as two child processes.

1. The float32 run: ``ampdoctor trace`` with the same script, arguments, environment and
   options, plus a hidden ``--compare-role float32``: mixed precision switched off
   (precision_off.py), its output captured, its measurements written to a temporary file.
   With ``--compare bfloat16`` (a float8 script), the bfloat16 run instead: float8 switched off
   and bfloat16 autocast on (bfloat16_on.py).
2. The mixed-precision run: the script as written, with ``--compare-role mixed`` and the float32
   run's file; it prints the report (the user's ``--json``, ``--html``, output format, exit
   status), comparison included.

Each child gets ``--timeout`` itself (its script is stopped and reported, exit 124); the parent
also kills a child that outlives it by ``KILL_GRACE`` seconds (a hang in native code). A float32
run that crashes without writing its file is described to the mixed-precision run, which reports
it; a mixed-precision run that dies without a report is described here in one line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any, Optional

import click

from .comparison import written_run

KILL_GRACE = 60.0
_TAIL = 400


def child_command(trace_args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "ampdoctor", "trace", *trace_args]


def run_compare(
    target_args: list[str],
    script_args: Sequence[str],
    common: list[str],
    output: list[str],
    timeout: Optional[float],
    against: str = "float32",
) -> int:
    """Run both children; returns the exit status of the command.

    ``target_args``: the script (or ``-m MODULE``); ``common``: the options both runs get;
    ``output``: the options only the reporting (mixed-precision) run gets; ``against``: the
    baseline, "float32" (mixed precision off) or "bfloat16" (float8 off, bfloat16 on)."""
    limit = timeout + KILL_GRACE if timeout else None
    timeout_args = ["--timeout", repr(timeout)] if timeout else []
    with tempfile.TemporaryDirectory(prefix="ampdoctor-compare-") as folder:
        baseline = os.path.join(folder, f"{against}.json")
        log = os.path.join(folder, f"{against}.log")
        first = child_command(
            [
                *target_args,
                *common,
                *timeout_args,
                "--no-lint",
                "--no-progress",
                "--fail-on",
                "never",
                "--output-format",
                "json",
                "--compare-role",
                against,
                "--compare-out",
                baseline,
                "--",
                *script_args,
            ]
        )
        switched = "mixed precision switched off" if against == "float32" else "float8 switched off, bfloat16 on"
        click.echo(f"ampdoctor trace: {against} run ({switched})...", err=True)
        code, failure = _run_child(first, limit, log, quiet=True)
        if not os.path.exists(baseline):
            with open(baseline, "w", encoding="utf-8") as handle:
                json.dump({"failed": failure or f"it ended with exit status {code} and wrote no measurements"}, handle)
        mixed = child_command(
            [
                *target_args,
                *common,
                *timeout_args,
                *output,
                "--compare",
                against,
                "--compare-role",
                "mixed",
                "--compare-baseline",
                baseline,
                "--",
                *script_args,
            ]
        )
        written = written_run(against)
        click.echo(f"ampdoctor trace: {written} run (as written)...", err=True)
        code, failure = _run_child(mixed, limit, None, quiet=False)
        if failure:
            click.echo(f"ampdoctor trace: the {written} run {failure}", err=True)
            return 1
        return code


def _run_child(
    command: list[str], limit: Optional[float], log: Optional[str], quiet: bool
) -> tuple[int, Optional[str]]:
    """Run one child; (exit status, why it failed without a report or None)."""
    sink = open(log, "w+b") if quiet and log else None
    try:
        process = subprocess.Popen(
            command,
            stdout=sink if sink else None,
            stderr=subprocess.STDOUT if sink else None,
            start_new_session=False,
        )
        try:
            code = process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            return 124, f"did not end {KILL_GRACE:g} seconds after its --timeout and was killed"
        except KeyboardInterrupt:
            process.send_signal(signal.SIGINT)
            process.wait()
            raise
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            tail = _tail(sink)
            return 128 - code, f"was killed by {name}" + (f" ({tail})" if tail else "")
        if quiet and code not in (0, 1, 124):
            tail = _tail(sink)
            return code, f"ended with exit status {code}" + (f": {tail}" if tail else "")
        return code, None
    finally:
        if sink:
            sink.close()


def _tail(sink: Any) -> str:
    """The last line the child wrote (its error), shortened."""
    if sink is None:
        return ""
    sink.flush()
    sink.seek(0)
    lines = [line.strip() for line in sink.read().decode("utf-8", "replace").splitlines() if line.strip()]
    return lines[-1][-_TAIL:] if lines else ""
