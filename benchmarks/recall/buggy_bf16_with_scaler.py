"""A bfloat16 training loop that kept the GradScaler from its float16 days."""
import torch


def train(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")  # expect: AMP209
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(batch).mean()
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
