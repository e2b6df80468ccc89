"""An older script: the deprecated CUDA autocast chosen by a conditional expression, and a scaler
that may be None. The backward runs inside the region."""
from contextlib import suppress

import torch


def run(model, loader, optimizer, amp=True):
    autocast = torch.cuda.amp.autocast if amp else suppress  # expect: AMP401
    scaler = torch.cuda.amp.GradScaler() if amp else None  # expect: AMP401
    for x, y in loader:
        optimizer.zero_grad()
        with autocast():
            loss = torch.nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()  # expect: AMP101
        scaler.step(optimizer)
        scaler.update()
