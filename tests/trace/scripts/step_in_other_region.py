"""A float16 model (``.half()``) stepped inside a bfloat16 autocast region: its float16 gradients
are measured while the region is open."""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).half()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(5):
    inputs = torch.randn(8, 16, dtype=torch.float16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(inputs).float().pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
