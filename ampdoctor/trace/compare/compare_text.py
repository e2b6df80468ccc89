"""The "Mixed precision vs float32" block (or "float8 vs bfloat16" under ``--compare bfloat16``): at
most six lines, as users talk about it.

    Mixed precision vs float32 (bfloat16 autocast on cpu): 1.46x faster
      time    112 → 76.7 ms/iteration (median of 40 iterations each, spread ±3% / ±2%; ...)
      memory  peak 8.2 → 4.8 GB (−42%), torch.cuda.max_memory_allocated
      loss    after 50 iterations 2.311 (mixed) vs 2.309 (float32)
      why     AMP514 61% of iteration time; AMP512 `head` 40% of GEMM time (see the findings)

The same sentences serve the HTML section (``summary_lines``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from .comparison import BFLOAT16, COMPARED, TOO_SHORT, Comparison, RunRecord, used_memory, written_run
from .stopwatch import CUDA_MEMORY_METHOD

if TYPE_CHECKING:
    from rich.console import Console


def format_seconds(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    ms = seconds * 1000
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    return f"{ms:.2g}" if ms >= 0.01 else f"{ms:.1e}"


def format_bytes(size: Optional[int]) -> str:
    if size is None:
        return "-"
    for unit, factor in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= factor:
            return f"{size / factor:.3g} {unit}"
    return f"{size} B"


def headline(comparison: Comparison) -> str:
    if comparison.against == BFLOAT16:
        layers = comparison.mixed.float8_layers
        head = "float8 vs bfloat16" + (
            f" ({layers} torchao float8 layer{'s' if layers != 1 else ''})" if layers else ""
        )
    else:
        setting = ", ".join(f"{dtype} autocast on {device}" for device, dtype in comparison.mixed.autocast)
        head = "Mixed precision vs float32" + (f" ({setting})" if setting else "")
    if comparison.status not in (COMPARED, TOO_SHORT):
        return f"{head}: {comparison.explanation}"
    if comparison.speedup is None:
        return f"{head}: {comparison.explanation}"
    if not comparison.measurable:
        return f"{head}: {comparison.explanation or 'no measurable difference in speed'}"
    if comparison.speedup >= 1:
        return f"{head}: {comparison.speedup:.2f}x faster"
    return f"{head}: {1 / comparison.speedup:.2f}x slower"


def _left_out(comparison: Comparison) -> str:
    left = comparison.mixed.left_out
    names = (
        ("window", "op-recording"),
        ("warmup", "warm-up"),
        ("profiled", "profiled"),
        ("gradients", "gradient samples"),
    )
    parts = [f"{left[key]} {label}" for key, label in names if left.get(key)]
    return f"; left out: {', '.join(parts)}" if parts else ""


def summary_lines(comparison: Comparison) -> list[str]:
    """The lines under the headline (none when nothing was compared)."""
    if comparison.status != COMPARED or comparison.baseline is None:
        return []
    mixed, baseline, against = comparison.mixed, comparison.baseline, comparison.against
    written = "float8" if against == BFLOAT16 else "mixed"
    a, b = mixed.timing, baseline.timing
    lines = []
    if a.median and b.median:
        spreads = f"spread ±{(b.spread or 0):.0%} / ±{(a.spread or 0):.0%}"
        counts = f"{len(b.seconds)}" if len(a.seconds) == len(b.seconds) else f"{len(b.seconds)} and {len(a.seconds)}"
        lines.append(
            f"time    {format_seconds(b.median)} → {format_seconds(a.median)} ms/iteration "
            f"({against} → {written}, median of {counts} iterations, {spreads}{_left_out(comparison)})"
        )
    mixed_used, baseline_used = used_memory(mixed), used_memory(baseline)
    if mixed_used and baseline_used:
        change = comparison.memory_change or 0.0
        verdict = f"{change:+.0%}".replace("-", "−") if comparison.memory_measurable else "no measurable difference"
        basis = "allocator peak" if mixed.start_bytes is None else "peak resident size above the start"
        lines.append(
            f"memory  {basis} {format_bytes(baseline_used)} → {format_bytes(mixed_used)} ({verdict}); "
            f"measured as {mixed.memory_method}"
        )
    loss = comparison.common_loss()
    if loss is not None:
        step, mixed_loss, baseline_loss = loss
        lines.append(f"loss    after {step} iterations {mixed_loss:.4g} ({written}) vs {baseline_loss:.4g} ({against})")
    if comparison.device_busy_share is not None:
        line = (
            f"device  busy {comparison.device_busy_share:.0%} of each profiled iteration "
            "(under torch.profiler, the tracer's own work taken off)"
        )
        # Said only where the speed-up is missing: it is the reason, not a forecast.
        if comparison.device_busy_share < 0.5 and not comparison.fast_enough:
            line += ": mixed precision cannot speed up the time the GPU waits"
        lines.append(line)
    if against == BFLOAT16:
        if comparison.paying_off is False:
            lines.append(f"why     {_float8_why(mixed)}")
    elif comparison.causes:
        causes = "; ".join(
            f"{c.code}"
            + (f" `{c.module}`" if c.module else "")
            + (f" {c.share:.0%} of {c.basis}" if c.share is not None else "")
            for c in comparison.causes[:3]
        )
        lines.append(f"why     {causes} (see the findings)")
    elif comparison.paying_off is False:
        lines.append("why     no cause found among AMP512-AMP514")
    top = (comparison.profile or {}).get("top_ops") or []
    if comparison.paying_off is False and top:
        spent = ", ".join(f"{item['op']} {item['share']:.0%}" for item in top[:3] if item.get("share") is not None)
        if spent:
            lines.append(f"spent   in the {written_run(against)} run (self time): {spent}")
    return lines[:5]  # with the headline, at most six lines


def _float8_why(run: RunRecord) -> str:
    """Why float8 may not pay off against bfloat16 (no causes are ranked for it)."""
    if run.memory_method != CUDA_MEMORY_METHOD:
        return (
            "the CPU has no float8 GEMMs (torch emulates them, slower than bfloat16): measure on a GPU "
            "with compute capability 8.9 or later"
        )
    return (
        "float8 pays off on large GEMMs of a compiled model: small layers (AMP609) and eager mode (AMP605) "
        "cost more in casts than the GEMMs save"
    )


def render_compare(comparison: Comparison, console: Console) -> None:
    from rich.markup import escape

    style = "bold green" if comparison.paying_off else "bold yellow"
    console.print(f"[{style}]{escape(headline(comparison))}[/]", highlight=False)
    for line in summary_lines(comparison):
        console.print(f"  {escape(line)}", highlight=False)
