"""A script that died of a mixed-precision mistake: the error torch raised names it, the
traceback's innermost line of the user's code says where. Reported with lint's codes.

- AMP301: a constant that does not fit float16 written into a float16 tensor (``masked_fill``
  with ``-1e9``): torch refuses, "value cannot be converted to type c10::Half without overflow";
- AMP105: ``binary_cross_entropy``/``nn.BCELoss`` under CUDA autocast, which torch refuses as
  unsafe to autocast.
"""

from __future__ import annotations

from collections.abc import Iterator

from ...findings import Finding
from ..observations import Observations
from ..rulebase import Locator, Thresholds, died_of, make_finding, rule


@rule("AMP301")
def constant_beyond_float16(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    error = died_of(observations, "to type c10::Half without overflow")
    if error is None:
        return
    message = (
        f"the script died because a constant does not fit float16 ({error[0]}): a fill, mask or "
        "clamp value beyond float16's range (±65504), such as -1e9 or 1e10, written into a float16 "
        "tensor (autocast makes attention scores float16)."
    )
    help_text = (
        "Use a value the tensor's dtype can hold: `torch.finfo(scores.dtype).min` (or "
        "`float('-inf')` for a mask before softmax) instead of the literal."
    )
    yield make_finding("AMP301", message, locator.at(error[1]), help_text, at_run_time=True)


@rule("AMP105")
def refused_under_autocast(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    error = died_of(observations, "are unsafe to autocast")
    if error is None:
        return
    message = (
        f"the script died because binary_cross_entropy ran under autocast ({error[0]}): torch refuses "
        "it there, since the probabilities it takes saturate to 0 or 1 in low precision."
    )
    help_text = (
        "Drop the final sigmoid and use `nn.BCEWithLogitsLoss()` (or "
        "`F.binary_cross_entropy_with_logits`), which is stable and autocast-safe."
    )
    yield make_finding("AMP105", message, locator.at(error[1]), help_text, at_run_time=True)
