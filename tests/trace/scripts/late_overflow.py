"""The inputs grow from the 4th iteration on, after the op census window: exp() in the model's
own forward overflows float16 from then on."""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(8, 2)

    def forward(self, x):
        return self.b(torch.exp(self.a(x)))


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
scaler = torch.amp.GradScaler("cpu")
base = torch.randn(8, 4)
for step in range(8):
    x = base * (1.0 if step < 3 else 40.0)
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
