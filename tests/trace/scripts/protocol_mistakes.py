"""GradScaler protocol mistakes that only show at run time (the clip sits in a helper module,
where lint of this file cannot follow it). MODE:

clip_scaled     clip_grad_norm_ in a helper, before unscale_          -> AMP201 at the helper's line
clip_unscaled   the same helper after scaler.unscale_(opt)            -> nothing
backward_in     backward() inside the autocast region                 -> AMP101
bypass          opt.step() on scaled gradients, no scaler.step        -> AMP203
no_update       scaler.step(opt) every iteration, update() never     -> AMP202 (torch then raises)
two_models      a scaled model and a plain float32 one, each clipped  -> nothing
"""

import sys

import torch
from torch import nn

from protocol_helpers import clip

mode = sys.argv[1]
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
plain_model = nn.Linear(8, 1)
plain_opt = torch.optim.SGD(plain_model.parameters(), lr=0.01)
amp_scaler = torch.amp.GradScaler("cpu")
x, y = torch.randn(64, 8), torch.randn(64, 1)
for step in range(4):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = nn.functional.mse_loss(model(x).float(), y)
        if mode == "backward_in":
            amp_scaler.scale(loss).backward()
    if mode != "backward_in":
        amp_scaler.scale(loss).backward()
    if mode == "clip_unscaled":
        amp_scaler.unscale_(opt)
    if mode in ("clip_scaled", "clip_unscaled"):
        clip(model)
    if mode == "bypass":
        opt.step()  # bypass
        continue
    if mode == "two_models":
        plain_opt.zero_grad()
        nn.functional.mse_loss(plain_model(x), y).backward()
        clip(plain_model)
        plain_opt.step()
    amp_scaler.step(opt)
    if mode != "no_update":
        amp_scaler.update()
    print(f"step {step} loss {loss.item():.4f}", flush=True)
