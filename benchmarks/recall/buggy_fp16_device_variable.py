"""The device type is held in a module constant; autocast uses its default dtype (float16 on
CUDA) and the backward pass is plain."""
import torch

DEVICE_TYPE = "cuda"


def train(model, loader, optimizer):
    for tokens, targets in loader:
        with torch.autocast(device_type=DEVICE_TYPE):  # expect: AMP210
            loss = model(tokens.to(DEVICE_TYPE), targets.to(DEVICE_TYPE))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
