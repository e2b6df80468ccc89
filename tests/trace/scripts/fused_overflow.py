"""A fused Adam under a GradScaler whose first iterations overflow: the scaler calls the fused
step on every iteration, and the kernel skips internally."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(4, 2)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0**40)
x, y = torch.randn(8, 4), torch.randn(8, 2)
for step in range(30):
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    print(f"scale {scaler.get_scale()}")
