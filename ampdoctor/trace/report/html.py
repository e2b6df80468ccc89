"""``ampdoctor trace --html PATH``: one self-contained page a person would rather look at.

Everything is inline: the stylesheet, the charts (SVG from matplotlib, see charts.py), no script,
no link, no font or image from anywhere, so the page opens offline and from an attachment. Every
string that comes from the traced program (module, parameter and class names, messages that
quote them, source lines, paths) goes through ``html.escape``. The file is written atomically.
"""

from __future__ import annotations

import html
import linecache
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Optional, cast

from ...findings import Finding, Severity
from ...float16 import FLOAT16_MAX

if TYPE_CHECKING:
    from ..observations import Observations
    from ..whatif import WhatIfResult
    from .trace_report import TraceReport

_DTYPE_COLOURS = {
    "float32": "#dbeafe",
    "float64": "#e0e7ff",
    "bfloat16": "#dcfce7",
    "float16": "#fef3c7",
}
_SEVERITY_CLASS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "info"}
_VERDICT_CLASS = {"safe": "ok", "safe with changes": "warning", "unsafe": "error"}
_CENSUS_DTYPES = ("float32", "bfloat16", "float16", "float64")
_MAX_BARS = 20
_MAX_CENSUS_ROWS = 40

_STYLE = """
:root { color-scheme: light; }
body { font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1f2937;
       background: #f3f4f6; margin: 0; }
main { max-width: 1000px; margin: 0 auto; padding: 24px; }
header h1 { font-size: 22px; margin: 0 0 4px; }
header p { margin: 0; color: #4b5563; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
section { background: #fff; border-radius: 10px; padding: 16px 20px; margin: 16px 0;
          box-shadow: 0 1px 2px rgba(0,0,0,.06); }
section h2 { font-size: 16px; margin: 0 0 10px; }
.verdict { border-left: 6px solid #9ca3af; font-size: 16px; font-weight: 600; }
.verdict.ok { border-color: #16a34a; } .verdict.warning { border-color: #d97706; }
.verdict.error { border-color: #dc2626; } .verdict.info { border-color: #2563eb; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 999px; font-size: 12px; font-weight: 600; }
.badge.error { background: #fee2e2; color: #991b1b; } .badge.warning { background: #fef3c7; color: #92400e; }
.badge.info { background: #dbeafe; color: #1e40af; } .badge.ok { background: #dcfce7; color: #166534; }
.finding { border-top: 1px solid #e5e7eb; padding: 10px 0; }
.finding:first-of-type { border-top: 0; }
.finding .where { color: #4b5563; font-size: 13px; }
.finding pre { background: #f9fafb; border: 1px solid #e5e7eb; border-radius: 6px; padding: 6px 10px;
               margin: 6px 0; overflow-x: auto; }
.finding details { color: #374151; font-size: 13px; }
.finding details p { margin: 4px 0 0 16px; }
.chart svg { width: 100%; height: auto; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e5e7eb; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.legend span { display: inline-block; padding: 0 8px; margin-right: 6px; border-radius: 4px; font-size: 12px; }
ul.reasons { margin: 6px 0 0; padding-left: 20px; font-weight: normal; font-size: 14px; }
footer { color: #6b7280; font-size: 12px; text-align: center; margin: 24px 0; }
"""


def e(value: Any) -> str:
    """Escaped text of anything that may come from the traced program."""
    return html.escape("" if value is None else str(value), quote=True)


def write_html(report: TraceReport, path: str) -> None:
    from ...atomic import write_text_atomic

    write_text_atomic(path, render_html(report))


def render_html(report: TraceReport) -> str:
    what_if = report.what_if
    parts = [
        _header(report),
        _verdict(report),
        _compare_section(report),
        _what_if_section(what_if) if what_if is not None else "",
        _findings_section("Findings", report.findings),
        _findings_section("Static findings in the traced code", report.static_findings)
        if report.static_findings
        else "",
        _timeline_section(report),
        _gradient_section(report),
        _census_section(report.observations),
        _float8_section(report.observations),
    ]
    title = f"ampdoctor trace: {_shown_path(report.script)}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)}</title><style>{_STYLE}</style></head>\n<body><main>\n"
        + "\n".join(part for part in parts if part)
        + "\n<footer>ampdoctor trace report</footer></main></body></html>\n"
    )


def _compare_section(report: TraceReport) -> str:
    if getattr(report, "compare", None) is None:
        return ""
    from ..compare.compare_html import compare_section

    return compare_section(report.compare)


def _shown_path(path: Optional[str]) -> str:
    """A path relative to the current folder when it lies inside it (as lint prints paths), so a
    page shared from a project does not carry the author's home folder."""
    if not path:
        return ""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive
        return path
    return path if relative.startswith(os.pardir) else relative


def _header(report: TraceReport) -> str:
    obs = report.observations
    how = report.how_it_ended
    uses = obs.to_summary()
    autocast = ", ".join(uses["autocast"]) or "none"
    scaler = "yes" if uses["grad_scaler"] else "no"
    return (
        f"<header><h1>ampdoctor trace <code>{e(_shown_path(report.script))}</code></h1>"
        f"<p>{obs.steps} iteration(s) traced ({e(how)}) &middot; autocast: {e(autocast)} &middot; "
        f"GradScaler: {scaler}</p></header>"
    )


def _verdict(report: TraceReport) -> str:
    lead, rest, kind = report.verdict()
    text = lead + rest
    # Any other kind is the worst severity's label: there are findings.
    css = {"ok": "ok", "untrained": "warning"}.get(kind) or _SEVERITY_CLASS[cast(Severity, report.worst_severity())]
    notes = "".join(f"<li>{e(note)}</li>" for note in report.notes)
    notes_html = f'<ul class="reasons">{notes}</ul>' if notes else ""
    return f'<section class="verdict {css}" id="verdict">{e(text)}{notes_html}</section>'


def _findings_section(title: str, findings: list[Finding]) -> str:
    if not findings:
        return f'<section id="findings"><h2>{e(title)}</h2><p>None.</p></section>'
    items = "\n".join(_finding(f) for f in findings)
    return f'<section id="findings"><h2>{e(title)} ({len(findings)})</h2>{items}</section>'


def _finding(finding: Finding) -> str:
    from ...catalog import get_rule

    rule = get_rule(finding.code)
    css = _SEVERITY_CLASS.get(finding.severity, "info")
    location = finding.location
    where = f"{_shown_path(location.path)}:{location.line}" if location.path else ""
    source = _source_line(location.path, location.line)
    source_html = f"<pre>{e(location.line)} | {e(source)}</pre>" if source else ""
    help_html = f"<div><b>help:</b> {e(finding.help_text)}</div>" if finding.help_text else ""
    explanation = ""
    if rule is not None:
        why = _section_text(rule.body, "Why")
        explanation = (
            f"<details open><summary>{e(rule.code)} {e(rule.name)}: {e(rule.summary)}</summary>"
            f"<p>{e(why)}</p></details>"
        )
    return (
        f'<div class="finding"><span class="badge {css}">{e(finding.severity.label)}</span> '
        f"<b>{e(finding.code)}</b> {e(finding.message)}"
        f'<div class="where"><code>{e(where)}</code></div>{source_html}{help_html}{explanation}</div>'
    )


def _source_line(path: Optional[str], line: Optional[int]) -> str:
    if not path or not line:
        return ""
    return linecache.getline(path, line).rstrip()


def _section_text(body: str, heading_start: str) -> str:
    """The first paragraph under the rule page's heading that starts with ``heading_start``."""
    lines = body.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("## ") and line[3:].startswith(heading_start):
            paragraph: list[str] = []
            for text in lines[index + 1 :]:
                if text.startswith("#"):
                    break
                if not text.strip():
                    if paragraph:
                        break
                    continue
                paragraph.append(text.strip())
            return " ".join(paragraph)
    return ""


def _timeline_section(report: TraceReport) -> str:
    from .charts import timeline_svg

    obs = report.observations
    what_if = report.what_if
    svg = timeline_svg(
        [r.loss for r in obs.iterations],
        [r.scale for r in obs.iterations],
        [r.step for r in obs.iterations if r.skipped],
        shadow=what_if.scale if what_if is not None else None,
        shadow_skipped=what_if.skipped if what_if is not None else (),
    )
    if svg is None:
        return ""
    title = "Loss and loss scale" if any(r.scale is not None for r in obs.iterations) or what_if else "Loss"
    return f'<section id="timeline"><h2>{title}</h2><div class="chart">{svg}</div></section>'


def _gradient_rows(report: TraceReport) -> list[tuple[str, float, Optional[float]]]:
    """(parameter, share float16 loses, overflow headroom) per parameter, worst first: from the
    what-if prediction when asked, else from the measured shares at the run's loss scale."""
    what_if = report.what_if
    if what_if is not None and what_if.params:
        scale = what_if.scale[-1] if what_if.scale else 2.0**16
        rows = [(p.name, p.lost_mean, FLOAT16_MAX / (p.max_abs * scale) if p.max_abs else None) for p in what_if.params]
    else:
        from ..rules.underflow_rules import stats_lost_share

        rows = []
        for stats in report.observations.gradients.values():
            if not stats.sampled_iterations:
                continue
            share = stats_lost_share(stats, report.thresholds)
            scale = stats.last_scale or 1.0
            rows.append((stats.name, share, FLOAT16_MAX / (stats.max_abs * scale) if stats.max_abs else None))
    rows.sort(key=lambda row: (-row[1], row[2] if row[2] is not None else math.inf))
    return rows[:_MAX_BARS]


def _gradient_section(report: TraceReport) -> str:
    from ..rules.underflow_rules import float16_gradients
    from .charts import gradient_bars_svg

    if report.what_if is None:
        # float16's range says nothing about a bfloat16 or float32 run (the terminal hides its
        # table too), and nothing about gradients a protocol mistake changed.
        if not float16_gradients(report.observations):
            return ""
        if any("AMP505" in cast("Sequence[str]", f.extra.get("invalidates", ())) for f in report.findings):
            return ""
    rows = _gradient_rows(report)
    if not rows:
        return ""
    svg = gradient_bars_svg([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
    basis = "at the predicted float16 loss scale" if report.what_if is not None else "at the run's loss scale"
    return f'<section id="gradients"><h2>Gradients in float16 ({e(basis)})</h2><div class="chart">{svg}</div></section>'


def _census_rows(obs: Observations) -> list[tuple[str, dict[str, int]]]:
    per_module: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for key, count in obs.ops.items():
        if key.output_dtype is None or key.phase != "forward":
            continue
        per_module[key.module or "(outside modules)"][key.output_dtype] += count
    rows = sorted(per_module.items(), key=lambda item: -sum(item[1].values()))
    return rows[:_MAX_CENSUS_ROWS]


def _census_section(obs: Observations) -> str:
    rows = _census_rows(obs)
    if not rows:
        return ""
    dtypes = [d for d in _CENSUS_DTYPES if any(d in counts for _, counts in rows)]
    dtypes += sorted({d for _, counts in rows for d in counts} - set(dtypes))
    header = "".join(f"<th>{e(d)}</th>" for d in dtypes)
    body = []
    for module, counts in rows:
        dominant = max(counts, key=counts.__getitem__)
        colour = _DTYPE_COLOURS.get(dominant, "#f3f4f6")
        cells = "".join(
            f'<td class="num" style="background:{_DTYPE_COLOURS.get(d, "#f3f4f6") if counts.get(d) else "transparent"}">'
            f"{counts.get(d, '')}</td>"
            for d in dtypes
        )
        body.append(
            f'<tr><td style="border-left:6px solid {colour}"><code>{e(module)}</code></td>'
            f'<td><span class="badge" style="background:{colour}">{e(dominant)}</span></td>{cells}</tr>'
        )
    # Chips for the dtypes the table shows only: a bfloat16 run has no float16 to explain.
    legend = "".join(
        f'<span style="background:{_DTYPE_COLOURS[d]}">{e(d)}</span>' for d in dtypes if d in _DTYPE_COLOURS
    )
    return (
        f'<section id="census"><h2>Dtype census per module (forward ops by output dtype, '
        f'first {obs.op_steps} iteration(s))</h2><p class="legend">{legend}</p>'
        f"<table><thead><tr><th>module</th><th>mostly</th>{header}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></section>"
    )


def _float8_section(obs: Observations) -> str:
    """The JSON report's ``float8`` layers as a table: what each layer's casts flushed, by
    operand, and its forward output's error against float32."""
    from .float8_summary import float8_cells, float8_dict

    float8 = float8_dict(obs)
    if float8 is None or not float8["layers"]:
        return ""
    body = []
    for layer in float8["layers"]:
        cells = "".join(
            f'<td class="num">{f"{value:.1%}" if value is not None else "-"}</td>' for value in float8_cells(layer)
        )
        body.append(f'<tr><td><code>{e(layer["module"])}</code></td><td class="num">{layer["gemms"]}</td>{cells}</tr>')
    return (
        f'<section id="float8"><h2>float8 layers (first {obs.op_steps} iteration(s))</h2>'
        "<table><thead><tr><th>layer</th><th>float8 GEMMs</th><th>input flushed</th><th>weight flushed</th>"
        "<th>grad flushed</th><th>output error vs float32</th></tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></section>"
    )


def _what_if_section(result: WhatIfResult) -> str:
    css = _VERDICT_CLASS.get(result.verdict, "info")
    reasons = "".join(f"<li>{e(reason)}</li>" for reason in result.reasons)
    real = [s for s in result.real_scale if s is not None]
    comparison = _comparison_table(result, real)
    overflows = ""
    if result.overflows:
        rows = "".join(
            f'<tr><td><code>{e(o.module)}</code> ({e(o.module_class)})</td><td class="num">{o.max_abs:.4g}</td>'
            f'<td class="num">{o.step}</td><td><code>{e(o.contained_by or "-")}</code></td></tr>'
            for o in result.overflows
        )
        overflows = (
            "<h3>Activations beyond float16 (65504)</h3><table><thead><tr><th>module</th><th>max |x|</th>"
            f"<th>iteration</th><th>keep in float32</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    return (
        f'<section class="verdict {css}" id="what-if">What if float16? '
        f'<span class="badge {css}">{e(result.verdict)}</span><ul class="reasons">{reasons}</ul></section>'
        f'<section id="what-if-details"><h2>What if float16: shadow GradScaler</h2>{comparison}{overflows}</section>'
    )


def _comparison_table(result: WhatIfResult, real: list[float]) -> str:
    def cells(values: Iterable[str]) -> str:
        return "".join(f'<td class="num">{v}</td>' for v in values)

    def scale_text(value: Optional[float]) -> str:
        return "-" if value is None else f"{value:g}"

    columns = ["<th></th><th>first scale</th><th>last scale</th><th>skipped steps</th>"]
    rows = [
        "<tr><td>shadow (predicted float16)</td>"
        + cells(
            [
                scale_text(result.scale[0] if result.scale else None),
                scale_text(result.scale[-1] if result.scale else None),
                f"{len(result.skipped)} of {len(result.scale)}",
            ]
        )
        + "</tr>"
    ]
    if real:
        rows.append(
            "<tr><td>this run's GradScaler</td>"
            + cells(
                [scale_text(real[0]), scale_text(real[-1]), f"{len(result.real_skipped)} of {len(result.real_scale)}"]
            )
            + "</tr>"
        )
    needed = (
        ""
        if result.needed_scale is None
        else (
            "<p>Smallest loss scale at which float16 loses (flushes to zero or keeps at most 4 significant "
            f"bits: below 2**-20 once scaled) at most {result.tolerance:.0%} of the gradient elements: <b>{scale_text(result.needed_scale)}</b></p>"
        )
    )
    return f"<table><thead><tr>{''.join(columns)}</tr></thead><tbody>{''.join(rows)}</tbody></table>{needed}"
