"""A non-finite gradient guard that skips the whole step, update() included: the next iteration
unscales again with no update() in between."""
import math

import torch


def train(model, loader, optimizer, epochs, max_grad_norm=5.0):
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(epochs):
        for batch in loader:
            optimizer.zero_grad()
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(batch)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)  # expect: AMP206
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            if not math.isfinite(norm):
                print("skipping step: non-finite gradient norm")
                continue
            scaler.step(optimizer)
            scaler.update()
