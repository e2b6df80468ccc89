"""Two models with their own optimizers, evaluated under torch.no_grad between training
iterations; the scaler is created a second time halfway (as when resuming) from the first's
state. Prints the training loss of every iteration."""

import torch
from torch import nn

from _tiny import batch, make

encoder, encoder_opt, scaler = make(seed=0)
head, head_opt, _ = make(seed=1, scaler=False)
head[0] = nn.Linear(2, 8)

for step in range(6):
    if step == 3:
        state = scaler.state_dict()
        scaler = torch.amp.GradScaler("cpu")
        scaler.load_state_dict(state)
    x, y = batch(step)
    encoder_opt.zero_grad()
    head_opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = nn.functional.cross_entropy(head(encoder(x)), y)
    scaler.scale(loss).backward()
    scaler.step(encoder_opt)
    scaler.step(head_opt)
    scaler.update()
    print(f"train {step} {loss.item():.6f}")
    encoder.eval(), head.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
        for _ in range(3):
            head(encoder(batch(100 + step)[0]))
    encoder.train(), head.train()
print("done")
