"""Runs forwards forever and never steps an optimizer (a hung or misconfigured run)."""

import torch

from _tiny import batch, make

model, _, _ = make()
print("started", flush=True)
while True:
    with torch.autocast("cpu", dtype=torch.float16):
        model(batch(0)[0])
