"""The child runs' command lines for ``--compare float32`` (or ``bfloat16``), from the parent's options."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Optional

import click


def start_compare(
    ctx: click.Context,
    script: Optional[str],
    module: Optional[str],
    script_args: Sequence[str],
    nproc_per_node: Optional[int],
) -> int:
    """Check what only the parent can check, then run both children (compare_run.py)."""
    from .compare_run import run_compare

    if nproc_per_node is not None:
        raise click.UsageError("--compare and --nproc-per-node cannot be combined", ctx=ctx)
    if module and script:
        script_args = (script, *script_args)
        script = None
    if module:
        target = ["-m", module]
    elif script:
        target = [os.path.abspath(script)]
    else:
        raise click.UsageError("missing SCRIPT (or -m MODULE)", ctx=ctx)
    _, script_args, common, output = compare_arguments(ctx.params, target, script_args)
    against = ctx.params.get("compare") or "float32"
    return run_compare(target, script_args, common, output, timeout=ctx.params.get("timeout"), against=against)


def compare_arguments(
    params: dict[str, Any], target: list[str], script_args: Sequence[str]
) -> tuple[list[str], list[str], list[str], list[str]]:
    """(target, script arguments, options for both runs, output options for the reporting run)."""
    common = [
        "--steps",
        str(params["steps"]),
        "--record-ops-steps",
        str(params["record_ops_steps"]),
        "--gradient-interval",
        str(params["gradient_interval"]),
    ]
    for item in params.get("thresholds") or ():
        common += ["--threshold", item]
    output = ["--output-format", params["output_format"], "--fail-on", params["fail_on"]]
    output.append("--lint" if params["lint"] else "--no-lint")
    if params.get("progress") is not None:
        output.append("--progress" if params["progress"] else "--no-progress")
    for option, key in (("--json", "json_path"), ("--html", "html_path"), ("--tensorboard", "tensorboard_dir")):
        if params.get(key):
            output += [option, os.path.abspath(params[key])]
    if params.get("what_if"):
        output += ["--what-if", params["what_if"]]
    return target, list(script_args), common, output
