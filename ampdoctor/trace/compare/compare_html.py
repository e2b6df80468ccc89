"""The HTML report's "Mixed precision vs float32" section (``--compare float32 --html``): the
sentences of the terminal block, both runs' iteration-time distributions and the memory bars
(matplotlib, inline SVG like the other charts)."""

from __future__ import annotations

import html
import math
import statistics
from typing import Optional

from .compare_text import headline, summary_lines
from .comparison import BFLOAT16, COMPARED, Comparison, used_memory

_FLOAT32 = "#2563eb"
_MIXED = "#16a34a"


def e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def compare_section(comparison: Optional[Comparison]) -> str:
    if comparison is None:
        return ""
    lines = "".join(f"<li>{e(line)}</li>" for line in summary_lines(comparison))
    svg = compare_svg(comparison) if comparison.status == COMPARED else None
    chart = f'<div class="chart">{svg}</div>' if svg else ""
    return f'<section id="compare"><h2>{e(headline(comparison))}</h2><ul class="reasons">{lines}</ul>{chart}</section>'


def compare_svg(comparison: Comparison) -> Optional[str]:
    """Left: each run's timed iterations (dots) and median (bar); right: the memory each used."""
    from ..report.charts import _INK, _figure, _style, _svg

    mixed, baseline = comparison.mixed, comparison.baseline
    if baseline is None or not (mixed.seconds and baseline.seconds):
        return None
    written = "float8" if comparison.against == BFLOAT16 else "mixed precision"
    figure = _figure(7.2, 2.8)
    times = figure.add_subplot(1, 2, 1)
    runs = ((comparison.against, baseline, _FLOAT32), (written, mixed, _MIXED))
    for position, (_label, run, colour) in enumerate(runs):
        values = [1000 * s for s in run.seconds]
        jitter = [position + 0.25 * ((i * 0.618) % 1 - 0.5) for i in range(len(values))]
        times.scatter(jitter, values, s=12, color=colour, alpha=0.7, zorder=3)
        median = statistics.median(values)
        times.hlines(median, position - 0.3, position + 0.3, color=_INK, linewidth=2, zorder=4)
    times.set_xticks([0, 1], labels=[label for label, _, _ in runs])
    times.set_xlim(-0.6, 1.6)
    times.set_ylim(bottom=0)
    times.set_ylabel("ms per iteration", color=_INK)
    _style(times, "Time per iteration (bar: median)")
    memory = figure.add_subplot(1, 2, 2)
    baseline_used, mixed_used = used_memory(baseline), used_memory(mixed)
    if baseline_used and mixed_used:
        memory.bar([0, 1], [baseline_used / 1e6, mixed_used / 1e6], color=[_FLOAT32, _MIXED], width=0.6)
        memory.set_xticks([0, 1], labels=[comparison.against, written])
        memory.set_ylabel("MB", color=_INK)
        _style(memory, "Memory (peak)" if mixed.start_bytes is None else "Memory (peak above start)")
    else:
        memory.text(0.5, 0.5, "memory not measured", ha="center", va="center", transform=memory.transAxes)
        _style(memory, "Memory")
    if any(not math.isfinite(s) for s in mixed.seconds + baseline.seconds):
        return None
    return _svg(figure)
