"""Whether a function's text names what its value flow is made of (``values.FlowMaker``): a long
function that names none of these words gets no flow."""

from __future__ import annotations

# What a function's text must name for its values to matter: a checkpoint, an optimizer, a
# scaler, a state, an autocast or an amp setting, a clip, the gradients' scale; ``amp`` only
# where no ASCII letter comes before it (the tests hold the same as one expression). Searched
# for word by word (``str.find`` from the most frequent on): on the 4,427
# long functions of the 623 modules the 31-repository tree summarizes, 0.06 s against the
# expression's 0.12 s.
_FLOW_WORDS = (
    "optim",
    "save",
    "backward",
    "state_dict",
    "half",
    "dump",
    "ckpt",
    "checkpoint",
    "snapshot",
    "persist",
    "scaler",
    "Scaler",
    "autocast",
    "Adam",
    "SGD",
    "precision",
    "fp16",
    "clip_grad",
    "unscale_",
)


def names_flow_word(source: str, start: int, end: int) -> bool:
    """Whether ``source[start:end]`` holds one of the flow words (``amp`` with no ASCII letter
    before it, looking before ``start`` too)."""
    find = source.find
    if any(find(word, start, end) >= 0 for word in _FLOW_WORDS):
        return True
    at = find("amp", start, end)
    while at >= 0:
        before = source[at - 1] if at > 0 else ""
        if not ("a" <= before <= "z" or "A" <= before <= "Z"):
            return True
        at = find("amp", at + 1, end)
    return False
