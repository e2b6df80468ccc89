"""A local module the odd scripts import: a tiny seeded model and one float16 AMP step."""

import torch
from torch import nn

# Weak references a script leaves here, for the tests that check nothing outlives a trace.
REFS: list = []


def make(seed: int = 0, scaler: bool = True):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, optimizer, (torch.amp.GradScaler("cpu") if scaler else None)


def batch(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(8, 4, generator=generator), torch.randint(0, 2, (8,), generator=generator)


def amp_step(model, optimizer, scaler, x, y) -> torch.Tensor:
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss


def hooks_installed() -> int:
    """How many of a trace session's global hooks this process holds (0 when untraced)."""
    from torch.nn.modules import module
    from torch.optim import optimizer

    patched = torch.amp.GradScaler.__module__ != "torch.amp.grad_scaler"
    return (
        len(module._global_forward_hooks)
        + len(module._global_forward_pre_hooks)
        + len(optimizer._global_optimizer_pre_hooks)
        + len(optimizer._global_optimizer_post_hooks)
        + torch._C._len_torch_dispatch_stack()
        + int(patched)
    )
