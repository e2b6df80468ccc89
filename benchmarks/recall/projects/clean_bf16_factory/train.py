import torch

from precision import autocast_dtype, make_scaler


def train(model, loader, optimizer, precision="bf16"):
    scaler = make_scaler(precision)
    dtype = autocast_dtype(precision)
    for epoch in range(3):
        for x, y in loader:
            with torch.autocast("cuda", dtype=dtype):
                loss = torch.nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
