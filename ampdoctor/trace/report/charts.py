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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

_INK = "#1f2937"
_GRID = "#e5e7eb"
_LOSS = "#2563eb"
_SCALE = "#d97706"
_SHADOW = "#7c3aed"
_SKIP = "#dc2626"


def _figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _svg(figure: Figure) -> str:
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "font.size": 9}):
        figure.savefig(buffer, format="svg", transparent=True, metadata={"Date": None})
    text = buffer.getvalue()
    # Only the <svg> element: the XML prolog and DOCTYPE do not belong inside an HTML page, and
    # the RDF metadata block only names vocabularies by URL.
    return re.sub(r"<metadata>.*?</metadata>\s*", "", text[text.index("<svg") :], flags=re.S)


def _style(axes: Axes, title: str) -> None:
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
    has_scale = any(v is not None for v in scale) or bool(shadow)
    # Without a GradScaler (bfloat16, float32) there is no scale to draw: the loss alone.
    figure = _figure(7.2 if has_scale else 3.8, 3.0)
    loss_axes = figure.add_subplot(1, 2, 1) if has_scale else figure.add_subplot(1, 1, 1)
    loss_axes.plot(steps, _positive(loss), color=_LOSS, linewidth=1.6, marker="o", markersize=2.5)
    shown = [v for v in _positive(loss) if not math.isnan(v)]
    if shown and max(shown) > 10 * min(shown):  # a log axis only where the loss spans a decade
        loss_axes.set_yscale("log")
        loss_axes.yaxis.set_major_formatter(_plain_formatter())
        loss_axes.yaxis.set_minor_formatter(_plain_formatter(minor=True, decades=_decades(shown)))
    _mark_skips(loss_axes, skipped, "skipped step")
    _style(loss_axes, "Loss")
    _iteration_axis(loss_axes)
    if not has_scale:
        return _svg(figure)
    scale_axes = figure.add_subplot(1, 2, 2)
    plotted = False
    if any(v is not None for v in scale):
        scale_axes.step(steps, _positive(scale), where="post", color=_SCALE, linewidth=1.8, label="loss scale")
        plotted = True
    if shadow:
        shadow_steps = list(range(1, len(shadow) + 1))
        scale_axes.step(
            shadow_steps,
            _positive(shadow),
            where="post",
            color=_SHADOW,
            linewidth=1.8,
            linestyle="--",
            label="what-if float16 (shadow)",
        )
        _mark_skips(scale_axes, shadow_skipped, "predicted skip", color=_SHADOW)
        plotted = True
    _mark_skips(scale_axes, skipped, "skipped step")
    if plotted:
        scale_axes.set_yscale("log", base=2)
        scale_axes.legend(fontsize=7, frameon=False, loc="best")
    _style(scale_axes, "Loss scale")
    _iteration_axis(scale_axes)
    return _svg(figure)


def _iteration_axis(axes: Axes) -> None:
    """Iterations are whole numbers: ticks at integers only (20 iterations: 5, 10, 15, 20)."""
    from matplotlib.ticker import MaxNLocator

    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("iteration", color=_INK)


def _decades(values: Sequence[float]) -> float:
    shown = [v for v in values if v == v and v > 0 and math.isfinite(v)]
    return math.log10(max(shown) / min(shown)) if shown else 0.0


def _plain_formatter(minor: bool = False, decades: float = 0.0) -> FuncFormatter:
    """Tick labels as plain numbers (4.4, 0.01, 2000), not as powers of ten. Minor ticks get a
    label (at 2 and 5 within a decade) only on an axis spanning at most two decades, where the
    major ticks alone would leave it nearly unlabelled; elsewhere they would crowd."""
    from matplotlib.ticker import FuncFormatter

    def label(value: float, _position: object) -> str:
        if value <= 0:
            return ""
        if minor:
            if decades > 2:
                return ""
            leading = value / 10 ** math.floor(math.log10(value) + 1e-9)
            if round(leading) not in (2, 5) or abs(leading - round(leading)) > 1e-6:
                return ""
        return f"{value:g}"

    return FuncFormatter(label)


def _mark_skips(axes: Axes, skipped: Sequence[int], label: str, color: str = _SKIP) -> None:
    for index, step in enumerate(skipped):
        axes.axvline(step, color=color, alpha=0.35, linewidth=1.2, label=label if index == 0 else None)


def gradient_bars_svg(
    names: Sequence[str], underflow: Sequence[float], headroom: Sequence[Optional[float]]
) -> Optional[str]:
    """Per parameter: the share of gradient elements float16 would lose, and the overflow
    headroom (how many times max |g| fits under 65504 at the scale), as horizontal bars."""
    if not names:
        return None
    count = len(names)
    # One chart above the other, each the page's width: long parameter names take the left
    # margin of both without pushing one chart's title or axis label into the other's.
    panel = 0.9 + 0.28 * count
    figure = _figure(7.2, 2 * panel + 0.3)
    positions = list(range(count))
    top, bottom = figure.subplots(2, 1, sharey=True)
    top.barh(positions, [100.0 * share for share in underflow], color=_SKIP, height=0.6)
    top.set_yticks(positions, labels=list(names))
    top.invert_yaxis()
    top.set_xlim(0, max(1.0, max(100.0 * share for share in underflow) * 1.15))
    top.set_xlabel("% of elements lost in float16 (below 2**-20 once scaled)", color=_INK)
    if not any(share > 0 for share in underflow):
        top.text(
            0.5,
            0.5,
            "no parameter loses gradient elements",
            ha="center",
            va="center",
            transform=top.transAxes,
            color="#16a34a",
        )
    _style(top, "Gradient underflow")
    values = [h if h is not None and math.isfinite(h) and h > 0 else math.nan for h in headroom]
    colors = [_SKIP if v < 1 else "#16a34a" for v in values]
    bottom.barh(positions, values, color=colors, height=0.6)
    bottom.set_xscale("log")
    bottom.xaxis.set_major_formatter(_plain_formatter())
    bottom.xaxis.set_minor_formatter(_plain_formatter(minor=True, decades=math.inf))  # no crowding
    bottom.axvline(1.0, color=_INK, linewidth=0.8)
    bottom.set_xlabel("65504 / (max |g| x scale); below 1 overflows", color=_INK)
    bottom.tick_params(labelleft=True)
    _style(bottom, "Overflow headroom")
    return _svg(figure)
