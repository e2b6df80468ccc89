import torch

from .update import clip_and_step, step_unscaled


def compute_loss(model, batch):
    x, y = batch
    return torch.nn.functional.cross_entropy(model(x), y)


def train_epoch(model, loader, optimizer, scaler, max_norm=1.0):
    for i, batch in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = compute_loss(model, batch)
        scaler.scale(loss).backward()
        if i % 2:
            clip_and_step(model, optimizer, scaler, max_norm)
        else:
            scaler.unscale_(optimizer)
            step_unscaled(model, optimizer, scaler, max_norm)
        optimizer.zero_grad(set_to_none=True)
