"""Inference only: forwards under autocast, never a backward or an optimizer step."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
    for batch in range(5):
        model(torch.randn(8, 4))
print("predicted")
