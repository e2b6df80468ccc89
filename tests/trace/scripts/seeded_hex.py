"""Seeded AMP training that prints its losses and final weights bit-exactly (float.hex), with
gradient clipping, and a scale that overflows at first so that some steps are skipped."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 16), nn.LayerNorm(16), nn.ReLU(inplace=True), nn.Linear(16, 3))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0**24)
x, y = torch.randn(32, 6), torch.randint(0, 3, (32,))
for step in range(12):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    print(f"loss {loss.item().hex()} scale {scaler.get_scale()}")
print("weights", [float(p.detach().double().sum()).hex() for p in model.parameters()])
