"""The trace report: findings plus the data behind them, and its JSON form (the terminal text
is ``report_text.py``, the HTML page ``html.py``).

JSON schema, version 1 (``TraceReport.to_dict``); keys are only ever added within a version:

``version``            1
``tool``               "ampdoctor trace"; ``ampdoctor_version``, ``torch_version``
``script``, ``argv``   what ran (a path, or ``-m module``), with its arguments
``steps``              iterations traced; ``steps_requested`` the limit or null
``completed``          false when the script raised, was interrupted or timed out
``stopped``            "steps" | "end" | "exit" | "error" | "interrupt" | "timeout"
``exit_code``          the script's ``sys.exit`` status, else null
``error``              "Type: message" when the script raised, else null
``notes``              plain statements about the run (no optimizer step, no autocast, ...)
``uses``               {autocast: [dtypes], grad_scaler, scaler_steps, optimizer_steps,
                       backward_calls, optimizers}
``thresholds``         the rule thresholds in effect
``findings``           Finding.to_dict() (code, name, severity, message, path, line, ..., help,
                       extra) plus top-level ``module`` and ``step`` (null where they do not apply)
``scale``              per iteration, the loss scale its backward used (null without a scaler)
``scale_after``        per iteration, the scale ``update()`` left
``skipped``            iteration numbers (1-based) whose optimizer step was skipped
``loss``               per iteration, the sum of the losses back-propagated (null if none seen)
``ops_steps``          iterations covered by ``ops``
``ops``                [{op, module, autocast: "on"|"off"|"disabled", phase: "forward"|"backward",
                       input_dtypes, output_dtype, count}]; module null outside any module
``gradient_interval``  the shares and max_abs in ``gradients`` were measured on the first
                       iteration, every iteration of the op-recording window, then every
                       this-many-th (1: all); inf/NaN gradients are checked on every iteration
``gradients``          per parameter: {name, module, module_class, shape, dtype, iterations
                       (with a gradient, each checked for inf/NaN: first_nonfinite_step),
                       sampled_iterations (those with the full statistics), zero,
                       below_subnormal, subnormal, nonfinite, coarse_subnormal (the part of
                       subnormal below 2**-20) (mean shares over the sampled iterations whose
                       step was applied), worst (max share per field), max_abs (unscaled, over
                       the sampled iterations), float16_limit (65504 / the last loss scale),
                       lost_share (AMP505's measure), first_nonfinite_step}
``activations``        per module: {module, module_class, calls, max_abs: {dtype: value},
                       max_abs_step: {dtype: iteration of that value}, first_nonfinite_step}
``boundaries``         per module (op-recording window): {module, module_class, zero, subnormal,
                       coarse_subnormal}
``origin``             the first non-finite activation: {step, module, module_class, input_max,
                       op, op_input_max} or null
``backward_origin``    the first module whose backward made a finite gradient inf/NaN, on a
                       skipped step with a finite forward: {step, module, module_class, side
                       ("parameter" | "input" | "inside": born in the module's own code, before
                       ``submodule`` | "output": born outside the modules), scale, loss_grad_max
                       (max |g| of the first gradient, leaving the loss, at the scale),
                       output_grad_max, halvings_needed} or null
``float8``             torchao float8 training (op-recording window), else null: {conversions:
                       [{file, line, linear_layers, converted}], output_layer, layers: per
                       float8 layer {module, gemms, unaligned_gemms, output_error (the mean
                       relative error of a forward output row against float32, or null),
                       forwards, casts: {role: {dtype, granularity, casts, nonzero, flushed,
                       flushed_share, nonfinite_scales (casts whose scale was NaN or zero),
                       zero_casts (casts of an all-zero operand), floored (values flushed under
                       torchao's amax floor), clipped (values the scale took beyond the format's
                       maximum, which the cast clips: none under dynamic scaling)}}}}
``linted_files``       the script and the local modules it imported, linted into the report
``static_findings``    their ``ampdoctor lint`` findings (Finding.to_dict())
``compare``            ``--compare float32`` only, else null: the two runs and the verdict, see
                       "The ``compare`` object" below
``world_size``, ``rank``, ``ranks``   under torchrun only: the merged report's ranks (see
                       ``distributed.py``)

Runtime findings carry, where known, ``extra.source`` (the forward statement that issued the
module's op, as FILE:LINE), ``extra.class_file``/``class_line``, ``extra.step_site`` (AMP501/502:
``scaler.step``) and ``extra.backward_site`` (AMP503/510), and their ``path``/``line`` point there.

The ``compare`` object (``--compare float32``; ``bfloat16`` below): ``against`` "float32"; ``status`` "compared" |
"nothing to compare" (no autocast, no GradScaler) | "cast by hand" (low-precision parameters:
no float32 run to make) | "float32 run failed" | "too few iterations"; ``explanation`` (one line,
null when compared and measurable); ``speedup`` float32 median / mixed median (>1: mixed precision is faster);
``measurable`` false when the two runs' bands (median ± median absolute deviation) overlap or
either run has fewer than 5 timed iterations (then no ratio is claimed, and ``explanation`` says why);
``memory_change`` mixed / float32 - 1 of the memory each run used (CUDA: allocator peak; CPU:
peak resident size above the size when tracing started); ``memory_measurable`` (beyond 2%);
``paying_off`` (speed-up at least ``thresholds.compare_speedup`` and memory saving at least
``thresholds.compare_memory_saving``; null when not compared); ``loss_at`` {step, mixed,
float32}: the last step both runs reached; ``causes`` [{code, share, of: "iteration time" |
"GEMM time" | "GEMM arithmetic", module}], ranked, the findings AMP512-AMP514 behind a run that
does not pay off; ``device_busy_share`` (CUDA: kernel time over the profiled iterations' wall
time less ampdoctor's instrumentation, measured under torch.profiler; else null); ``hardware`` [{device, name, dtype, fast, capability, flags, reason}] per
autocast setting; ``profile`` {top_ops [{op, seconds, share}] (self time, largest five),
wall_seconds, instrumentation_seconds, gemm_seconds, cast_seconds, device_busy_seconds, time: "cpu" | "device"} over the profiled iterations of the mixed-precision run, or null;
``thresholds``; ``runs`` {mixed, float32 (null when it failed to report)}, each {role, steps,
stopped, error, iteration_seconds and timed_steps (the timed iterations), left_out {window,
warmup, profiled, gradients: iterations not timed; gradients: those on which the
mixed-precision run samples gradient statistics (--gradient-interval), left out of both runs},
median_seconds, quartiles_seconds, deviation_seconds (median absolute deviation), spread
(deviation_seconds over the median), peak_memory_bytes, memory_method, start_memory_bytes (CPU),
loss (per iteration), matmul_dtypes {output dtype: forward matmul-class ops in the census},
autocast [[device, dtype]], autocast_regions (outermost enabled regions entered), scalers,
low_precision_parameters, float8_layers (layers that ran torchao float8 GEMMs), switched_off
{autocast_regions_disabled, scalers_disabled, float8_conversions_skipped} (the float32 run),
profile_error}.

Under ``--compare bfloat16`` (a float8 script against itself with float8 off and bfloat16 on):
``against`` "bfloat16"; the baseline is ``runs.bfloat16`` and ``loss_at.bfloat16`` instead of the
float32 ones; ``status`` "nothing to compare" also when no layer trained in float8, and "bfloat16
run failed" when the baseline did; ``paying_off`` asks for speed only; ``causes`` stays empty;
the baseline's ``switched_off`` is
{float8_conversions_skipped, bfloat16_regions_added (outermost forwards run in a bfloat16 autocast
region the script did not enter)}.

Non-finite numbers are written as the strings "NaN", "Infinity" and "-Infinity" so the document
stays valid JSON.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from ...findings import Finding, Severity
from ...float16 import FLOAT16_MAX
from ..compare.comparison import json_number
from ..numerics import GRADIENT_SHARES
from ..observations import ActivationStats, GradientStats, Observations
from ..ops import sorted_census
from ..outcome import Outcome, how_it_ended
from ..rulebase import Locator, Thresholds
from ..rules.underflow_rules import lost_share
from .float8_summary import float8_dict

if TYPE_CHECKING:
    from rich.console import Console

SCHEMA_VERSION = 1


@dataclass
class TraceReport:
    script: Optional[str]
    argv: Optional[list[str]]
    steps_requested: Optional[int]
    outcome: Outcome
    observations: Observations
    thresholds: Thresholds
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # ``ampdoctor lint`` findings in the traced script and the local modules it imported.
    static_findings: list[Finding] = field(default_factory=list)
    linted_files: list[str] = field(default_factory=list)
    # ``--what-if float16``: a whatif.WhatIfResult.
    what_if: Any = None
    # ``--compare float32``: a compare.Comparison (from ``TraceSession.compared``, compare_child.py).
    compare: Any = None

    @property
    def completed(self) -> bool:
        return self.outcome.completed

    @property
    def all_findings(self) -> list[Finding]:
        """The runtime findings and the static ones (``ampdoctor lint`` on the traced code)."""
        return [*self.findings, *self.static_findings]

    @property
    def trained(self) -> bool:
        """Whether at least one optimizer step ran: without one nothing about the training's
        mixed precision can be concluded."""
        return self.observations.stepped

    def verdict(self) -> tuple[str, str, str]:
        """The line under the headline, for the terminal and the page: (lead, rest, kind). What
        the findings (runtime and static) add up to, and nothing about the training when no
        iteration ran. ``kind``: "ok", "untrained" or the worst severity's label."""
        findings = self.all_findings
        counts = dict.fromkeys(Severity, 0)
        for finding in findings:
            counts[finding.severity] += 1
        parts = [f"{n} {s.label}{'s' if n != 1 else ''}" for s, n in sorted(counts.items(), reverse=True) if n]
        found = f"Found {', '.join(parts)}." if findings else ""
        if not self.trained:
            ended = {
                "error": "The script raised",
                "timeout": "--timeout stopped the script",
                "interrupt": "The script was interrupted",
            }.get(self.outcome.reason, "The script ended")
            rest = " no training iteration ran, so nothing is concluded about its mixed precision."
            return f"{ended} before its first optimizer step:", rest + (f" {found}" if found else ""), "untrained"
        if not findings:
            return "No mixed-precision problems found", f" in {self.observations.steps} iteration(s).", "ok"
        worst = max(finding.severity for finding in findings)  # worst_severity(), of findings there are
        if worst is Severity.INFO:
            # Notes only (the hardware's, an observation worth knowing): nothing is wrong.
            notes = f"{len(findings)} info finding{'s' if len(findings) != 1 else ''} below"
            return "No mixed-precision problems found", f" in {self.observations.steps} iteration(s); {notes}.", "ok"
        return found, "", worst.label

    def worst_severity(self) -> Optional[Severity]:
        return max((f.severity for f in self.all_findings), default=None)

    def fails(self, level: Optional[Severity]) -> bool:
        worst = self.worst_severity()
        return level is not None and worst is not None and worst >= level

    # -- JSON ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        obs = self.observations
        return {
            "version": SCHEMA_VERSION,
            "tool": "ampdoctor trace",
            "ampdoctor_version": _ampdoctor_version(),
            "torch_version": _torch_version(),
            "script": self.script,
            "argv": self.argv,
            "steps": obs.steps,
            "steps_requested": self.steps_requested,
            "completed": self.completed,
            "stopped": self.outcome.reason,
            "exit_code": self.outcome.exit_code,
            "error": self.outcome.error,
            "notes": list(self.notes),
            "uses": obs.to_summary(),
            "thresholds": {name: getattr(self.thresholds, name) for name in Thresholds.names()},
            "findings": [_finding_dict(f) for f in self.findings],
            "scale": [json_number(r.scale) for r in obs.iterations],
            "scale_after": [json_number(r.scale_after) for r in obs.iterations],
            "skipped": [r.step for r in obs.iterations if r.skipped],
            "loss": [json_number(r.loss) for r in obs.iterations],
            "ops_steps": obs.op_steps,
            "ops": [key.to_dict(count) for key, count in sorted_census(obs.ops)],
            "gradient_interval": obs.gradient_interval,
            "gradients": [self._gradient_dict(g) for g in obs.gradients.values()],
            "activations": [_activation_dict(a) for a in obs.activations.values()],
            "boundaries": [
                {
                    "module": b.module,
                    "module_class": b.module_class,
                    "zero": b.zero_share,
                    "subnormal": b.subnormal_share,
                    "coarse_subnormal": b.coarse_subnormal_share,
                }
                for b in obs.boundaries.values()
            ],
            "origin": _origin_dict(obs),
            "backward_origin": _backward_origin_dict(obs),
            "float8": float8_dict(obs),
            "linted_files": list(self.linted_files),
            "static_findings": [f.to_dict() for f in self.static_findings],
            "what_if": self.what_if.to_dict() if self.what_if is not None else None,
            "compare": _jsonable(self.compare.to_dict()) if self.compare is not None else None,
        }

    def to_json(self, indent: Optional[int] = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    def write_json(self, path: str) -> None:
        """Write the JSON document atomically: a reader never finds a partial file."""
        from ...atomic import write_text_atomic

        write_text_atomic(path, self.to_json() + "\n")

    def _gradient_dict(self, stats: GradientStats) -> dict[str, Any]:
        means = {name: stats.mean(name) for name in GRADIENT_SHARES}
        return {
            "name": stats.name,
            "module": stats.module,
            "module_class": stats.module_class,
            "shape": list(stats.shape),
            "dtype": stats.dtype,
            "iterations": stats.iterations,
            "sampled_iterations": stats.sampled_iterations,
            **means,
            "worst": dict(stats.worst),
            "max_abs": json_number(stats.max_abs),
            # The largest unscaled gradient float16 can hold at the last loss scale.
            "float16_limit": FLOAT16_MAX / (stats.last_scale or 1.0),
            "lost_share": lost_share(
                means["zero"], means["below_subnormal"], means["coarse_subnormal"], self.thresholds
            ),
            "first_nonfinite_step": stats.first_nonfinite_step,
        }

    # -- terminal ------------------------------------------------------------------------------

    def print(self, console: Optional[Console] = None) -> None:
        """Render the report with rich (to stdout unless a console is given)."""
        from .report_text import render

        render(self, console)

    @property
    def how_it_ended(self) -> str:
        """How the traced run ended, in words (the terminal and HTML headlines)."""
        return how_it_ended(self.outcome, self.steps_requested)


def _finding_dict(finding: Finding) -> dict[str, Any]:
    data: dict[str, Any] = finding.to_dict()
    data["module"] = finding.extra.get("module")
    data["step"] = finding.extra.get("step")
    if "extra" in data:
        data["extra"] = {k: _jsonable(v) for k, v in data["extra"].items()}
    return data


def _jsonable(value: Any) -> Any:
    if isinstance(value, float):
        return json_number(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _activation_dict(stats: ActivationStats) -> dict[str, Any]:
    return {
        "module": stats.module,
        "module_class": stats.module_class,
        "calls": stats.calls,
        "max_abs": {dtype: json_number(v) for dtype, v in stats.max_abs.items()},
        "max_abs_step": dict(stats.max_abs_step),
        "first_nonfinite_step": stats.first_nonfinite_step,
    }


def _origin_dict(obs: Observations) -> Optional[dict[str, Any]]:
    origin = obs.origin
    if origin is None:
        return None
    return {
        "step": origin.step,
        "module": origin.module,
        "module_class": origin.module_class,
        "input_max": json_number(origin.input_max),
        "op": origin.op,
        "op_input_max": json_number(origin.op_input_max),
    }


def _backward_origin_dict(obs: Observations) -> Optional[dict[str, Any]]:
    origin = obs.backward_origin
    if origin is None:
        return None
    from ..backward import halvings_needed

    return {
        "step": origin.step,
        "module": origin.module,
        "module_class": origin.module_class,
        "side": origin.side,
        "submodule": origin.submodule,
        "loss_grad_max": json_number(origin.loss_grad_max),
        "scale": json_number(origin.scale),
        "output_grad_max": json_number(origin.output_grad_max),
        "halvings_needed": halvings_needed(obs.backward_reference.get(origin.module), origin.scale),
    }


def _ampdoctor_version() -> Optional[str]:
    try:
        from ..._version import __version__

        return __version__
    except ImportError:
        return None


def _torch_version() -> Optional[str]:
    torch = sys.modules.get("torch")
    return getattr(torch, "__version__", None)


def _notes(session: Any) -> list[str]:
    obs, outcome = session.observations, session.outcome
    notes = []
    if outcome.reason == "error":
        notes.append(f"The script raised {outcome.error}: this report is incomplete.")
    elif outcome.reason == "interrupt":
        notes.append(f"Interrupted after {obs.steps} iteration(s): this report is partial.")
    elif outcome.reason == "timeout":
        notes.append(f"Stopped by --timeout after {obs.steps} iteration(s): this report is partial.")
    elif session.steps is not None and obs.steps < session.steps and outcome.completed:
        notes.append(f"The script ended after {obs.steps} of the {session.steps} requested iterations.")
    if not obs.stepped:
        notes.append(
            "No optimizer step was seen, so no training iteration was traced: ampdoctor trace "
            "counts `scaler.step(...)` and `optimizer.step()` calls."
        )
    if not obs.stepped:
        return notes + [f"ampdoctor's {error}." for error in obs.instrument_errors]
    if not obs.autocast_used:
        notes.append(
            "The script never entered torch.autocast: "
            + (
                "tensors were made low precision by hand (see the ops table)."
                if any(k.output_dtype in ("float16", "bfloat16") for k in obs.ops)
                else "it trains in full precision, so there is no mixed precision to check."
            )
        )
    if session.stepped_in_other_thread and obs.op_steps:
        notes.append(
            "The training stepped in a thread other than the script's main thread: the op census "
            "(a dispatch mode, which torch keeps per thread) saw only the main thread's ops."
        )
    if obs.untraced_scaler:
        notes.append(
            "A GradScaler made before tracing began stepped the optimizer: its loss scale and "
            "skipped steps are missing from this report (in the Python API, create the scaler "
            "inside the `with ampdoctor.trace_session()` block)."
        )
    if obs.compiled:
        notes.append(
            "The script uses torch.compile: the op census stopped there and activation ranges are "
            "measured only outside compiled graphs, whose ops ampdoctor cannot see."
        )
    notes.extend(
        f"ampdoctor's {error}; the data it would have collected is missing." for error in obs.instrument_errors
    )
    if obs.backward_calls == 0 and obs.stepped:
        notes.append("No backward call was seen (gradients came from elsewhere).")
    return notes


# Runtime codes that measure what a lint code suspects, under another code and at another line
# (lint points at the conversion or the layer's definition, the run at the call of the model):
# the output layer converted to float8 (lint AMP601, run AMP517), a layer whose sizes float8
# GEMMs refuse (lint AMP602, run AMP516).
_CONFIRMS = {"AMP601": "AMP517", "AMP602": "AMP516"}


def _seen_both_ways(findings: list[Finding], static: list[Finding]) -> tuple[list[Finding], list[Finding]]:
    """A mistake seen at run time that lint also reports (at the same line, or under the lint
    code the runtime one confirms: ``_CONFIRMS``) is one finding: the runtime one, which says so."""

    def key(finding: Finding) -> tuple[str, str, int]:
        return finding.code, os.path.abspath(finding.location.path), finding.location.line

    runtime = {key(f): i for i, f in enumerate(findings) if f.location and f.location.path}
    by_code = {f.code: i for i, f in enumerate(findings)}
    kept = []
    findings = list(findings)
    for finding in static:
        index = runtime.get(key(finding))
        if index is None:
            index = by_code.get(_CONFIRMS.get(finding.code, ""))
        if index is None:
            kept.append(finding)
            continue
        seen = findings[index]
        findings[index] = seen.replace(extra={**seen.extra, "lint": True})
    return findings, kept


def build_report(session: Any) -> TraceReport:
    obs = session.observations
    obs.class_files = dict(session.class_files)
    locator = Locator(session.script, obs.class_files)
    from ..rules import evaluate

    if session.outcome.reason == "error" and session.outcome.error:
        obs.script_error = (session.outcome.error, session.outcome.error_site)
    compared = session.compared() if session.compared is not None else None
    findings = evaluate(obs, session.thresholds, locator, compared)
    notes = _notes(session)
    static: list[Finding] = []
    if session.lint:
        from ..static import lint_files

        static, problem = lint_files(session.local_files)
        if problem:
            notes.append(problem)
        findings, static = _seen_both_ways(findings, static)
    return TraceReport(
        script=session.script,
        argv=session.argv,
        steps_requested=session.steps,
        outcome=session.outcome,
        observations=obs,
        thresholds=session.thresholds,
        findings=findings,
        notes=notes,
        static_findings=static,
        linted_files=list(session.local_files) if session.lint else [],
        what_if=session.what_if.result() if getattr(session, "what_if", None) is not None else None,
        compare=compared.comparison if compared is not None else None,
    )
