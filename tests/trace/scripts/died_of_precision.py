"""Mixed-precision mistakes the tracer names at run time with lint's codes. MODE:

new_scaler      a GradScaler made anew every iteration                       -> AMP205
half            a float16 model stepped by Adam                              -> AMP303
mask            masked_fill(-1e9) on float16 scores: torch raises            -> AMP301
bce             nn.BCELoss on sigmoid outputs under autocast                 -> AMP105
plain_backward  loss.backward() unscaled, then scaler.step                   -> AMP204
"""

import sys

import torch
from torch import nn

mode = sys.argv[1]
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
if mode == "half":
    model = model.half()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)  # the optimizer
scaler = torch.amp.GradScaler("cpu", enabled=mode != "half")
criterion = nn.BCELoss() if mode == "bce" else nn.MSELoss()
x = torch.randn(32, 8)
y = (torch.rand(32, 1) > 0.5).float()
for step in range(4):
    if mode == "new_scaler":
        scaler = torch.amp.GradScaler("cpu")  # made anew
    opt.zero_grad()
    if mode == "half":
        loss = criterion(model(x.half()).float(), y)
        loss.backward()
        opt.step()
        continue
    with torch.autocast("cpu", dtype=torch.float16):
        out = model(x)
        if mode == "mask":
            out = out.masked_fill(out > 0, -1e9)  # the mask
        if mode == "bce":
            out = torch.sigmoid(out)
        loss = criterion(out, y)  # the loss
    if mode == "plain_backward":
        loss.backward()  # unscaled
    else:
        scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
