"""What a module's bytes must hold to take part in the project pass: tested before any parse,
and importable without the fact model (the lint pass asks ``wanted_without_rules`` of files no
rule of their own needs to parse)."""

from __future__ import annotations

import re

# What float16 autocast set up elsewhere asks about: a module's fills and BCE (and, below, the
# ``forward`` through which a model reaches them).
_FLOAT16_RISK_TOKENS = (b"binary_cross_entropy", b"BCELoss")
_FILL_TOKENS = (b"masked_fill", b"fill_", b"new_full", b"full_like", b"torch.where", b".where(")
# What a module's bytes must hold to take part in a cross-module rule, by role: it makes or uses
# a GradScaler ("scaler": its calls may carry one, or write a checkpoint beside one), runs
# autocast, loops over epochs, or clips gradients (an update helper).
TOKEN_CLASSES = {
    "scaler": (b"GradScaler", b".scale("),
    "autocast": (b"autocast",),
    "epoch": (b"epoch",),
    "clip": (b"clip_grad",),
    # Lightning's float16 mixed precision as a literal: ``precision="16-mixed"``, ``precision=16``.
    "precision": (b"16-mixed", b"precision=16", b'precision="16', b"precision='16"),
    # What float16 autocast set up elsewhere breaks: a BCE, a fill (``float16_risk`` is exact).
    "half_risk": (*_FLOAT16_RISK_TOKENS, *_FILL_TOKENS),
}
# Without a match, a function runs no backward (``loss.backward()``, ``torch.autograd.backward``
# however imported, ``accelerator.backward(loss)``, Lightning's ``self.manual_backward(loss)``).
BACKWARD_TEXT = re.compile(rb"\bbackward\b|manual_backward")
# Bytes without which a module's functions do nothing the cross-module rules ask about.
HELPER_TOKENS = (
    b"save",
    b"clip_grad",
    b"backward",
    b"step",
    b"forward",
    *_FLOAT16_RISK_TOKENS,
    *_FILL_TOKENS,
    *(t for ts in TOKEN_CLASSES.values() for t in ts),
)


def wanted_without_rules(data: bytes) -> bool:
    """Whether a module that no rule of its own needs to parse is still worth a summary in the
    lint pass, since the project pass judges it from its callers: it clips gradients (an update
    helper). A module that only holds what float16 autocast breaks (``float16_risk``) is
    summarized later, and only when an autocast set up elsewhere reaches it."""
    return b"clip_grad" in data


def float16_risk(data: bytes) -> bool:
    """Whether the module holds what float16 autocast set up in another module breaks: a BCE,
    or a fill with a constant past float16's range."""
    if any(token in data for token in _FLOAT16_RISK_TOKENS):
        return True
    if not any(token in data for token in _FILL_TOKENS):
        return False
    from ..textscan.literals import literal_flags

    return "big-fill" in literal_flags(data, ("big-fill",))
