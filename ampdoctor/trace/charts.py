"""The HTML report's charts: matplotlib figures written as inline SVG.

matplotlib is imported here only, and this module only when ``--html`` is used. The Agg backend
is selected without touching pyplot's global state (a ``Figure`` with its own canvas), so a
script's own plotting is left alone. Text stays text in the SVG (``svg.fonttype = none``), which
keeps the page small and searchable.
"""

from __future__ import annotations

import io
import math
import re
from typing import Optional, Sequence

_INK = "#1f2937"
_GRID = "#e5e7eb"
_LOSS = "#2563eb"
_SCALE = "#d97706"
_SHADOW = "#7c3aed"
_SKIP = "#dc2626"


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _svg(figure) -> str:
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "font.size": 9}):
        figure.savefig(buffer, format="svg", transparent=True, metadata={"Date": None})
    text = buffer.getvalue()
    # Only the <svg> element: the XML prolog and DOCTYPE do not belong inside an HTML page, and
    # the RDF metadata block only names vocabularies by URL.
    return re.sub(r"<metadata>.*?</metadata>\s*", "", text[text.index("<svg") :], flags=re.S)


def _style(axes, title: str) -> None:
    axes.set_title(title, loc="left", fontsize=10, color=_INK, fontweight="bold")
    axes.grid(True, color=_GRID, linewidth=0.6)
    axes.set_axisbelow(True)
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)
    axes.tick_params(colors=_INK, labelsize=8)


def _positive(values: Sequence[Optional[float]]) -> list[float]:
    return [v if v is not None and math.isfinite(v) and v > 0 else math.nan for v in values]


def timeline_svg(
    loss: Sequence[Optional[float]],
    scale: Sequence[Optional[float]],
    skipped: Sequence[int],
    shadow: Optional[Sequence[float]] = None,
    shadow_skipped: Sequence[int] = (),
) -> Optional[str]:
    """Loss and loss scale per iteration on log axes, skipped iterations marked; the what-if
    shadow scale beside the real one when there is one."""
    steps = list(range(1, len(loss) + 1))
    if not steps:
        return None
    figure = _figure(7.2, 3.0)
    loss_axes = figure.add_subplot(1, 2, 1)
    loss_axes.plot(steps, _positive(loss), color=_LOSS, linewidth=1.6, marker="o", markersize=2.5)
    if any(v is not None and math.isfinite(v) and v > 0 for v in loss):
        loss_axes.set_yscale("log")
    _mark_skips(loss_axes, skipped, "skipped step")
    _style(loss_axes, "Loss")
    loss_axes.set_xlabel("iteration", color=_INK)
    scale_axes = figure.add_subplot(1, 2, 2)
    plotted = False
    if any(v is not None for v in scale):
        scale_axes.step(steps, _positive(scale), where="post", color=_SCALE, linewidth=1.8, label="loss scale")
        plotted = True
    if shadow:
        shadow_steps = list(range(1, len(shadow) + 1))
        scale_axes.step(shadow_steps, _positive(shadow), where="post", color=_SHADOW, linewidth=1.8,
                        linestyle="--", label="what-if float16 (shadow)")
        _mark_skips(scale_axes, shadow_skipped, "predicted skip", color=_SHADOW)
        plotted = True
    _mark_skips(scale_axes, skipped, "skipped step")
    if plotted:
        scale_axes.set_yscale("log", base=2)
        scale_axes.legend(fontsize=7, frameon=False, loc="best")
    else:
        scale_axes.text(0.5, 0.5, "no GradScaler", ha="center", va="center", transform=scale_axes.transAxes,
                        color="#6b7280")
    _style(scale_axes, "Loss scale")
    scale_axes.set_xlabel("iteration", color=_INK)
    return _svg(figure)


def _mark_skips(axes, skipped: Sequence[int], label: str, color: str = _SKIP) -> None:
    for index, step in enumerate(skipped):
        axes.axvline(step, color=color, alpha=0.35, linewidth=1.2, label=label if index == 0 else None)


def gradient_bars_svg(names: Sequence[str], underflow: Sequence[float], headroom: Sequence[Optional[float]]) -> Optional[str]:
    """Per parameter: the share of gradient elements float16 would lose, and the overflow
    headroom (how many times max |g| fits under 65504 at the scale), as horizontal bars."""
    if not names:
        return None
    count = len(names)
    figure = _figure(7.2, 0.9 + 0.28 * count)
    positions = list(range(count))
    left = figure.add_subplot(1, 2, 1)
    left.barh(positions, [100.0 * share for share in underflow], color=_SKIP, height=0.6)
    left.set_yticks(positions, labels=list(names))
    left.invert_yaxis()
    left.set_xlim(0, max(1.0, max(100.0 * share for share in underflow) * 1.15))
    left.set_xlabel("% of elements below float16's normal range", color=_INK)
    if not any(share > 0 for share in underflow):
        left.text(0.5, 0.5, "no parameter loses gradient elements", ha="center", va="center",
                  transform=left.transAxes, color="#16a34a")
    _style(left, "Gradient underflow")
    right = figure.add_subplot(1, 2, 2, sharey=left)
    values = [h if h is not None and math.isfinite(h) and h > 0 else math.nan for h in headroom]
    colors = [_SKIP if v < 1 else "#16a34a" for v in values]
    right.barh(positions, values, color=colors, height=0.6)
    right.set_xscale("log")
    right.axvline(1.0, color=_INK, linewidth=0.8)
    right.set_xlabel("65504 / (max |g| x scale); below 1 overflows", color=_INK)
    right.tick_params(labelleft=False)
    _style(right, "Overflow headroom")
    return _svg(figure)
