"""A tiny seeded float16 AMP step shared by the behaviour scripts of the trace tests."""

import torch
from torch import nn


def make(seed: int = 0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    return model, optimizer, scaler, x, y


def amp_step(model, optimizer, scaler, x, y) -> torch.Tensor:
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss
