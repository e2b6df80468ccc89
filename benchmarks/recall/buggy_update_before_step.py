"""A refactor moved the scaler update above the step."""
import torch


def train_step(model, batch, optimizer, scaler):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(batch)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.update()  # expect: AMP207
    scaler.step(optimizer)
    return loss.item()
