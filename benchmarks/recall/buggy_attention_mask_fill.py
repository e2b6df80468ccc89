"""A hand-written attention block under float16 autocast that masks with -1e9, a value float16
cannot hold."""
import math

import torch
import torch.nn as nn


class SelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, mask):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = att.masked_fill(mask == 0, -1e9)  # expect: AMP301
        att = att.softmax(dim=-1)
        out = (att @ v).transpose(1, 2).reshape(b, t, c)
        return self.proj(out)


def train(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for x, mask, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = nn.functional.mse_loss(model(x, mask), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
