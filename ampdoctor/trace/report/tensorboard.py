"""``ampdoctor trace --tensorboard DIR``: the trace's curves beside the user's own.

Written as the run goes, one event per iteration (nothing accumulates in memory), through
``torch.utils.tensorboard`` (the optional ``tensorboard`` package; ``pip install
"ampdoctor[tensorboard]"``). Tags, all under ``ampdoctor/``:

- ``loss``: the loss back-propagated in the iteration (unscaled; non-finite values are left out,
  the ``skipped`` flag marks those iterations);
- ``loss_scale``: the scale the iteration's backward used;
- ``skipped``: 1 when the optimizer step was skipped (inf/NaN gradients), else 0;
- ``underflow_share/PARAM``: per parameter, the share of its gradient's elements that float16
  loses at the loss scale (AMP505's measure), on the iterations where it is measured.
"""

from __future__ import annotations

import math
import os
from typing import Any

from ..observations import IterationRecord, Observations

TENSORBOARD_MISSING = "--tensorboard needs the tensorboard package: pip install 'ampdoctor[tensorboard]'"


class TensorBoardUnavailable(Exception):
    """The tensorboard package is not installed (one-line usage error)."""


class TensorBoardLog:
    """An iteration listener of ``TraceSession`` writing TensorBoard scalars."""

    def __init__(self, logdir: str, thresholds: Any) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise TensorBoardUnavailable(TENSORBOARD_MISSING) from None
        # Absolute: the script may os.chdir before the writer flushes.
        self._writer = SummaryWriter(log_dir=os.path.abspath(logdir))
        self._thresholds = thresholds

    def __call__(self, record: IterationRecord, observations: Observations) -> None:
        from ..rules.underflow_rules import lost_share

        writer, step = self._writer, record.step
        if record.loss is not None and math.isfinite(record.loss):
            writer.add_scalar("ampdoctor/loss", record.loss, step)
        if record.scale is not None:
            writer.add_scalar("ampdoctor/loss_scale", record.scale, step)
        writer.add_scalar("ampdoctor/skipped", 1.0 if record.skipped else 0.0, step)
        for stats in observations.gradients.values():
            sampled = stats.last_sampled
            if sampled is None or sampled[0] != step:
                continue
            shares = sampled[1]
            share = lost_share(shares["zero"], shares["below_subnormal"], shares["coarse_subnormal"], self._thresholds)
            writer.add_scalar(f"ampdoctor/underflow_share/{stats.name}", share, step)

    def close(self) -> None:
        self._writer.close()
