"""The ``--what-if float16`` section of the terminal report (rich)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

_VERDICT_STYLE = {"safe": "bold green", "safe with changes": "bold yellow", "unsafe": "bold red"}
_ROWS = 10


def scale_segments(scales: list[float], skipped: list[int]) -> list[tuple[int, int, float, int]]:
    """(first step, last step, scale, skipped steps) for each run of equal scales."""
    segments: list[list[Any]] = []
    skipped_set = set(skipped)
    for step, scale in enumerate(scales, start=1):
        if segments and segments[-1][2] == scale:
            segments[-1][1] = step
        else:
            segments.append([step, step, scale, 0])
        if step in skipped_set:
            segments[-1][3] += 1
    return [tuple(s) for s in segments]


def render_what_if(result: Any, console: Console) -> None:
    """``result``: a ``whatif.WhatIfResult`` (not imported: that module imports the report's)."""
    from rich.markup import escape
    from rich.table import Table

    style = _VERDICT_STYLE.get(result.verdict, "bold")
    console.print(f"\n[bold]What if float16?[/] [{style}]{result.verdict}[/]")
    for reason in result.reasons:
        console.print(f"  - {escape(reason)}", highlight=False)
    real = any(s is not None for s in result.real_scale)
    table = Table(title="Predicted loss scale (shadow GradScaler)" + (" beside the real one" if real else ""))
    table.add_column("iterations")
    table.add_column("predicted scale", justify="right")
    table.add_column("predicted skips", justify="right")
    for first, last, scale, skips in scale_segments(result.scale, result.skipped)[:_ROWS]:
        table.add_row(f"{first}-{last}" if last != first else str(first), f"{scale:g}", str(skips))
    console.print(table)
    if real:
        console.print(
            f"  real scaler: {len(result.real_skipped)} skipped, last scale "
            f"{next((s for s in reversed(result.real_scale) if s is not None), None)}; "
            f"shadow: {len(result.skipped)} skipped, last scale {result.scale[-1] if result.scale else None}",
            highlight=False,
        )
    if result.params:
        grads = Table(title="Gradients at the predicted scale")
        grads.add_column("parameter", overflow="fold")
        grads.add_column("lost", justify="right")
        grads.add_column("< 2**-24", justify="right")
        grads.add_column("max |g|", justify="right")
        grads.caption = "lost: below 2**-20 once scaled, as AMP505 counts it"
        for param in result.params[:_ROWS]:
            grads.add_row(
                escape(param.name),
                f"{param.lost_mean:.2%}",
                f"{param.underflow_mean:.2%}",
                f"{param.max_abs:.3g}",
            )
        console.print(grads)
    if result.overflows:
        acts = Table(title="Activations beyond float16 (65504)")
        acts.add_column("module", overflow="fold")
        acts.add_column("max |x|", justify="right")
        acts.add_column("keep in float32")
        for overflow in result.overflows[:_ROWS]:
            acts.add_row(
                escape(f"{overflow.module} ({overflow.module_class})"),
                f"{overflow.max_abs:.4g}",
                escape(overflow.contained_by or "- (no enclosing module is within range)"),
            )
        console.print(acts)
