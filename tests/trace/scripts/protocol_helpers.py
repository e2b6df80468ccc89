"""A helper module beside the script, as training code often has."""

import torch


def clip(model, max_norm: float = 1.0):
    return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
