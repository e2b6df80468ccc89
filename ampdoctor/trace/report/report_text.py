"""The trace report as text on the terminal (rich): headline, verdict, notes, findings and the
static findings (one line each, as ruff prints them), the op census, the underflow-prone
gradients and the loss-scale timeline (tables).

``render`` takes a ``report.TraceReport`` (it does not import it: the report imports this module
when it prints).
"""

from __future__ import annotations

import math
import os
from typing import IO, TYPE_CHECKING, Any

from ...findings import Finding, Severity
from ..observations import Observations
from ..ops import sorted_census
from ..rulebase import format_scale
from ..rules.underflow_rules import float16_gradients, stats_lost_share

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

# Ops that move or reinterpret data without computing: left out of the terminal table (they
# stay in --json) so the precision-relevant rows are visible.
_BOOKKEEPING_OPS = frozenset(
    {
        "detach",
        "view",
        "_unsafe_view",
        "t",
        "transpose",
        "expand",
        "permute",
        "unsqueeze",
        "squeeze",
        "slice",
        "select",
        "as_strided",
        "alias",
        "reshape",
        "split",
        "chunk",
        "_local_scalar_dense",
        "empty",
        "empty_like",
        "empty_strided",
        "zeros_like",
        "ones_like",
        "fill_",
        "zero_",
        "copy_",
        "clone",
        "lift_fresh",
        "new_empty_strided",
        "new_zeros",
    }
)
_SEVERITY_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
_TABLE_ROWS = 15


def render(report: Any, console: Console | None = None) -> None:
    from rich.markup import escape

    console = console or report_console(report)
    obs = report.observations
    console.print(_headline(report))
    console.print(_verdict(report))
    series = _series_line(obs)
    if series:
        console.print(escape(series), highlight=False, soft_wrap=True)
    for note in report.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    if getattr(report, "compare", None) is not None:
        from ..compare.compare_text import render_compare

        render_compare(report.compare, console)
    if report.findings:
        _print_findings(console, "Findings", report.findings)
    if report.static_findings:
        _print_findings(console, "Static findings in the traced code (ampdoctor lint)", report.static_findings)
    if obs.ops:
        console.print(_ops_table(obs))
    underflow = None if _withheld(report, "AMP505") else _underflow_table(report)
    if underflow is not None:
        console.print(underflow)
    timeline = _scale_table(obs)
    if timeline is not None:
        console.print(timeline)
    float8 = _float8_table(obs)
    if float8 is not None:
        console.print(float8)
    if report.what_if is not None:
        from .whatif_text import render_what_if

        render_what_if(report.what_if, console)


def _headline(report: Any) -> str:
    how = report.how_it_ended
    return f"[bold]ampdoctor trace[/] {report.script or ''}: {report.observations.steps} iteration(s) traced ({how})"


def _verdict(report: Any) -> str:
    from rich.markup import escape

    lead, rest, kind = report.verdict()
    style = {"ok": "bold green", "untrained": "bold yellow"}.get(kind) or _SEVERITY_STYLE[report.worst_severity()]
    return f"[{style}]{escape(lead)}[/]{escape(rest)}"


def _series_line(obs: Observations) -> str:
    """One line on the loss and the loss scale over the run (the charts are in --html): first,
    last and lowest loss, the scale's range and the skipped steps. Iterations are numbered from 1,
    the first optimizer step (a script counting from 0 calls it step 0); with several backward
    passes per iteration the loss is their sum."""
    records = obs.iterations
    if not records:
        return ""
    parts = []
    losses = [(r.step, r.loss) for r in records if r.loss is not None and math.isfinite(r.loss)]
    if losses:
        low_step, low = min(losses, key=lambda item: item[1])
        text = f"loss {losses[0][1]:.4g} → {losses[-1][1]:.4g} (lowest {low:.4g} at iteration {low_step})"
        micro = obs.backward_calls / obs.steps if obs.steps else 0
        if micro >= 1.5:
            text += f", each the sum of the iteration's {micro:.3g} backward passes"
        parts.append(text)
    scales = [r.scale for r in records if r.scale is not None]
    if scales:
        skipped = [r.step for r in records if r.skipped]
        text = f"loss scale {format_scale(scales[0])} → {format_scale(scales[-1])}"
        if min(scales) < min(scales[0], scales[-1]):
            text += f" (lowest {format_scale(min(scales))})"
        if skipped:
            shown = ", ".join(str(step) for step in skipped[:6]) + (", ..." if len(skipped) > 6 else "")
            text += f", {len(skipped)} skipped step(s) (iteration {shown})"
        else:
            text += ", no skipped step"
        parts.append(text)
    if not parts:
        return ""
    # Said as the run's, so that no one takes it for a line the script printed ("loss ...").
    return "Over the run: " + "; ".join(parts) + " (iteration 1 is the first optimizer step)"


def _print_findings(console: Console, title: str, findings: list[Finding]) -> None:
    """Findings as ruff and rustc print them: ``path:line: CODE [severity] message``, then an
    indented ``help:`` line; each a logical line the terminal wraps (an editor or a grep reads
    the location whole), the module and iteration after the message."""
    from rich.markup import escape

    console.print(f"[bold]{escape(title)}[/]")
    for finding in findings:
        style = _SEVERITY_STYLE[finding.severity]
        location = finding.location
        where = ""
        if location is not None and location.path and not location.path.startswith("<"):
            where = f"[bold]{escape(_display_path(location.path))}:{location.line}:[/] "
        context = []
        if finding.extra.get("module"):
            context.append(f"module `{finding.extra['module']}`")
        step = finding.extra.get("step")
        if step and f"iteration {step}" not in finding.message:
            context.append(f"iteration {step}")
        tail = f" [dim]({escape(', '.join(context))})[/]" if context else ""
        console.print(
            f"{where}[{style}]{finding.code} {escape(f'[{finding.severity.label}]')}[/] {escape(finding.message)}{tail}",
            highlight=False,
            soft_wrap=True,
        )
        if finding.help_text:
            console.print(f"  [dim]help:[/] {escape(finding.help_text)}", highlight=False, soft_wrap=True)


def _display_path(path: str) -> str:
    """The path relative to the working folder when it lies inside it, else as given."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    return path if relative.startswith("..") else relative


def _ops_table(obs: Observations) -> Table:
    from rich.table import Table

    # A run that ended before its first optimizer step recorded the ops of that partial iteration.
    span = f"first {obs.op_steps} iteration(s)" if obs.op_steps else "before the first optimizer step"
    table = Table(title=f"Ops by module and dtype ({span})", title_justify="left")
    for column in ("module", "op", "phase", "dtypes", "autocast", "count"):
        table.add_column(column, justify="right" if column == "count" else "left", overflow="fold")
    rows = [(key, count) for key, count in sorted_census(obs.ops) if key.op not in _BOOKKEEPING_OPS]
    for key, count in rows[:_TABLE_ROWS]:
        dtypes = f"{','.join(key.input_dtypes) or '-'} -> {key.output_dtype or '-'}"
        op = f"[bold]{key.op}[/]" if key.is_matmul else key.op
        table.add_row(key.module or "-", op, key.phase, dtypes, key.autocast, str(count))
    hidden = len(obs.ops) - min(len(rows), _TABLE_ROWS)
    if hidden:
        table.caption = f"{hidden} more rows (views, copies, rarer ops) in --json"
    return table


def _underflow_table(report: Any) -> Table | None:
    from rich.table import Table

    ranked = []
    for stats in report.observations.gradients.values():
        share = stats_lost_share(stats, report.thresholds)
        ranked.append((share, stats.mean("subnormal"), stats))
    ranked = [item for item in sorted(ranked, key=lambda item: (-item[0], -item[1])) if item[0] > 0 or item[1] > 0]
    # The shares say what float16 would lose: without float16 gradients (a bfloat16 or float32
    # run) they describe no loss that happened and would only mislead.
    if not ranked or not float16_gradients(report.observations):
        return None
    table = Table(title="Most underflow-prone gradients (float16 at the loss scale)", title_justify="left")
    # |g| * scale in disjoint bands: flushed, coarse subnormal (at most 4 significant bits, lost)
    # and fine subnormal (5 to 10 bits, kept).
    for column in ("parameter", "lost", "zero", "< 2**-24", "2**-24..-20", "2**-20..-14", "max |g|"):
        table.add_column(column, justify="left" if column == "parameter" else "right", overflow="fold")
    for share, _, stats in ranked[:5]:
        coarse = stats.mean("coarse_subnormal")
        table.add_row(
            stats.name,
            f"{share:.1%}",
            f"{stats.mean('zero'):.1%}",
            f"{stats.mean('below_subnormal'):.1%}",
            f"{coarse:.1%}",
            f"{max(stats.mean('subnormal') - coarse, 0.0):.1%}",
            f"{stats.max_abs:.3g}",
        )
    caption = "lost: below 2**-20 once scaled, and the zeros where 2**-24..-20 is populated"
    interval = report.observations.gradient_interval
    if interval > 1:
        caption += f"; measured on the first iterations, then every {interval}th (--gradient-interval)"
    table.caption = caption
    return table


def _float8_table(obs: Observations) -> Table | None:
    """Per float8 layer: what its casts flushed to zero, by operand, and how far its forward
    output was from float32 (the JSON report's ``float8`` object, in short)."""
    from rich.table import Table

    from .float8_summary import float8_cells, float8_dict

    float8 = float8_dict(obs)
    layers = float8["layers"] if float8 is not None else []
    if not layers:
        return None
    span = f"first {obs.op_steps} iteration(s)" if obs.op_steps else "before the first optimizer step"
    table = Table(title=f"float8 layers ({span})", title_justify="left")
    for column in ("layer", "input flushed", "weight flushed", "grad flushed", "output error"):
        table.add_column(column, justify="left" if column == "layer" else "right", overflow="fold")
    for layer in layers[:_TABLE_ROWS]:
        cells = [f"{value:.1%}" if value is not None else "-" for value in float8_cells(layer)]
        table.add_row(str(layer["module"]), *cells)
    caption = (
        "flushed: the share of non-zero values the float8 cast made zero; output error: a forward output "
        "row's distance from the same layer in float32, relative, on average"
    )
    if len(layers) > _TABLE_ROWS:
        caption += f"; {len(layers) - _TABLE_ROWS} more layers in --json"
    table.caption = caption
    return table


def _scale_segments(obs: Observations) -> list[tuple[int, int, float, int]]:
    """(first, last, scale, skipped) for runs of iterations that used the same scale."""
    segments: list[list[Any]] = []
    for record in obs.iterations:
        if record.scale is None:
            continue
        if segments and segments[-1][2] == record.scale and segments[-1][1] == record.step - 1:
            segments[-1][1] = record.step
            segments[-1][3] += record.skipped
        else:
            segments.append([record.step, record.step, record.scale, int(record.skipped)])
    return [tuple(s) for s in segments]


def _scale_table(obs: Observations) -> Table | None:
    from rich.table import Table

    segments = _scale_segments(obs)
    if not segments:
        return None
    table = Table(title="Loss scale timeline", title_justify="left")
    for column in ("iterations", "scale", "skipped"):
        table.add_column(column, justify="right")
    # None: the "..." row between the first and the last segments.
    shown: list[tuple[int, int, float, int] | None] = (
        [*segments] if len(segments) <= 12 else [*segments[:6], None, *segments[-5:]]
    )
    for segment in shown:
        if segment is None:
            table.add_row("...", "", "")
            continue
        first, last, scale, skipped = segment
        span = str(first) if first == last else f"{first}-{last}"
        table.add_row(span, format_scale(scale), str(skipped) if skipped else "")
    return table


# Where the report goes to a file or a CI log, there is no terminal width to respect: wide
# enough that module and parameter names are never folded, let alone cut.
FILE_WIDTH = 100


def report_console(report: Any, stream: IO[str] | None = None) -> Console:
    """A rich console for the report: the terminal's width on a terminal, else one that fits the
    longest name the report shows."""
    import sys

    from rich.console import Console

    stream = stream or sys.stdout
    if hasattr(stream, "isatty") and stream.isatty():
        return Console(file=stream)
    names = [*report.observations.gradients, *report.observations.activations]
    names += [key.module or "" for key in report.observations.ops]
    longest = max((len(name) for name in names), default=0)
    return Console(file=stream, width=max(FILE_WIDTH, 4 * (longest + 8), 2 * longest + 60))


def _withheld(report: Any, code: str) -> bool:
    """Whether a protocol mistake withheld ``code`` (its data would mislead as well)."""
    return any(code in f.extra.get("invalidates", ()) for f in report.findings)
