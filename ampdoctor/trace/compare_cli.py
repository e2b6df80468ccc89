"""The child runs' command lines for ``--compare float32``, from the parent's options."""

from __future__ import annotations

import os
from typing import Any


def compare_arguments(params: dict[str, Any], run: Any) -> tuple[list[str], list[str], list[str], list[str]]:
    """(target, script arguments, options for both runs, output options for the reporting run)."""
    target = ["-m", run.module] if run.module else [os.path.abspath(run.script)]
    common = [
        "--steps", str(params["steps"]),
        "--record-ops-steps", str(params["record_ops_steps"]),
        "--gradient-interval", str(params["gradient_interval"]),
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
    return target, list(run.args), common, output
