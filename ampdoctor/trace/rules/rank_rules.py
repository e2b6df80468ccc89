"""AMP511: the ranks of a torchrun job disagree on the loss scale or on which steps to skip.

A rule of the merged report (``distributed.py``): it reads every rank's JSON report, not one
run's observations.
"""

from __future__ import annotations

from typing import Any, Optional

from ...findings import Finding, Location
from ..rulebase import format_scale, make_finding, rule


def _decisions(report: dict[str, Any]) -> list[tuple[Any, bool]]:
    """Per iteration: (loss scale used, step skipped)."""
    skipped = set(report.get("skipped") or ())
    return [(scale, step in skipped) for step, scale in enumerate(report.get("scale") or (), start=1)]


def _describe(decision: tuple[Any, bool]) -> str:
    scale, skipped = decision
    if scale is None:
        return "no loss scale"
    text = format_scale(scale) if isinstance(scale, (int, float)) else str(scale)
    return f"scale {text}, step {'skipped' if skipped else 'applied'}"


def _rank_list(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


@rule("AMP511", scope="ranks")
def scale_disagreement(reports: dict[int, dict[str, Any]], location: Location) -> Optional[Finding]:
    """AMP511: the first iteration at which the ranks' loss scales or skip decisions differ."""
    series = {rank: _decisions(report) for rank, report in sorted(reports.items())}
    if len(series) < 2 or all(scale is None for s in series.values() for scale, _ in s):
        return None
    common = min(len(s) for s in series.values())
    differing = [i for i in range(common) if len({s[i] for s in series.values()}) > 1]
    if not differing:
        return None
    first = differing[0]
    groups: dict[tuple[Any, bool], list[int]] = {}
    for rank, decisions in series.items():
        groups.setdefault(decisions[first], []).append(rank)
    parts = [f"{_rank_list(ranks)}: {_describe(decision)}" for decision, ranks in groups.items()]
    # With a strict majority, the others went their own way; without one, all ranks are named.
    largest = max(groups.values(), key=len)
    if len(largest) * 2 > len(series):
        odd = sorted(rank for ranks in groups.values() if ranks is not largest for rank in ranks)
    else:
        odd = sorted(series)
    message = (
        f"The ranks' loss scaling disagrees from iteration {first + 1} on ({'; '.join(parts)}); "
        f"{len(differing)} of the {common} iterations all ranks traced differ. Under DDP every rank "
        "sees the same all-reduced gradients, so all ranks skip together and keep one scale."
    )
    help_text = (
        "Synchronise the gradients before scaler.step: wrap the model in DistributedDataParallel "
        "and leave no_sync() for the micro-steps before the last; with FSDP use ShardedGradScaler; "
        "check that every rank computes the same kind of loss."
    )
    per_rank = {str(rank): _describe(decisions[first]) for rank, decisions in series.items()}
    return make_finding(
        "AMP511",
        message,
        location,
        help_text,
        step=first + 1,
        ranks=odd,
        decisions=per_rank,
        iterations=len(differing),
    )
