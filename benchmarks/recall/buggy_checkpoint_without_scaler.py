"""A script that resumes training from checkpoints holding the model and optimizer but not the
scaler: every resume restarts the loss scale at 65536."""
import os

import torch


def train(model, optimizer, loader, epochs, ckpt_dir):
    scaler = torch.amp.GradScaler("cuda")
    start = 0
    path = os.path.join(ckpt_dir, "last.pt")
    if os.path.exists(path):
        state = torch.load(path, map_location="cpu")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
    for epoch in range(start, epochs):
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, path)  # expect: AMP211
