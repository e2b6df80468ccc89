"""A float16 training loop on CUDA with one of two classic mistakes in it (deliberately).

    python buggy_fp16.py --bug clip --max-steps 12    # clips the gradients while they are still scaled
    python buggy_fp16.py --bug mask --max-steps 12    # masks attention scores with -1e9 under float16
    python buggy_fp16.py --device cpu --size tiny --bug clip

``--bug clip``: ``clip_grad_norm_`` runs between ``scaler.scale(loss).backward()`` and
``scaler.step``, with no ``scaler.unscale_`` first: the norm it measures is the loss scale
(65536) times too large, so every update is shrunk by about that factor and the model barely
learns (``ampdoctor trace``: AMP201, at the ``clip_grad_norm_`` line).

``--bug mask``: the hand-written causal attention fills the masked scores with -1e9; under
float16 autocast the scores are float16, which cannot hold -1e9, and ``masked_fill`` raises
(``ampdoctor trace`` turns the crash into AMP301 at that line; ``ampdoctor lint`` reports the
literal whichever ``--bug`` is chosen). ``--bug none`` runs the corrected loop.

Each iteration prints ``step N loss REPR hex HEX``.
"""

import argparse
import math

import torch
from torch import nn
from torch.nn import functional as F

SIZES = {
    "gpu": {"width": 512, "layers": 4, "heads": 8, "length": 256, "batch": 16, "vocab": 8192},
    "tiny": {"width": 32, "layers": 2, "heads": 2, "length": 16, "batch": 4, "vocab": 64},
}


class MaskedSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, huge_mask_fill: bool) -> None:
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.heads = heads
        self.huge_mask_fill = huge_mask_fill

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        causal = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()
        if self.huge_mask_fill:
            att = att.masked_fill(~causal, -1e9)
        else:
            att = att.masked_fill(~causal, torch.finfo(att.dtype).min)
        out = (att.softmax(dim=-1) @ v).transpose(1, 2).reshape(batch, length, width)
        return self.proj(out)


class Block(nn.Module):
    def __init__(self, width: int, heads: int, huge_mask_fill: bool) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = MaskedSelfAttention(width, heads, huge_mask_fill)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class LanguageModel(nn.Module):
    def __init__(self, size: dict, huge_mask_fill: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(size["vocab"], size["width"])
        self.position = nn.Embedding(size["length"], size["width"])
        self.blocks = nn.Sequential(
            *(Block(size["width"], size["heads"], huge_mask_fill) for _ in range(size["layers"]))
        )
        self.norm = nn.LayerNorm(size["width"])
        self.head = nn.Linear(size["width"], size["vocab"])

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.size(1), device=tokens.device)
        return self.head(self.norm(self.blocks(self.embed(tokens) + self.position(positions))))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--size", choices=sorted(SIZES), default="gpu")
    parser.add_argument("--bug", choices=["clip", "mask", "none"], default="clip")
    parser.add_argument("--max-steps", type=int, default=12)
    parser.add_argument("--deterministic", action="store_true", help="torch.use_deterministic_algorithms")
    args = parser.parse_args()

    if args.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    size = SIZES[args.size]
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = LanguageModel(size, huge_mask_fill=args.bug == "mask").to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device.type)
    tokens = torch.randint(0, size["vocab"], (64, size["length"] + 1))

    for step in range(args.max_steps):
        rows = torch.arange(step * size["batch"], (step + 1) * size["batch"]) % len(tokens)
        batch = tokens[rows].to(device)
        with torch.autocast(device.type, dtype=torch.float16):
            logits = model(batch[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        scaler.scale(loss).backward()
        if args.bug != "clip":
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        value = loss.item()
        print(f"step {step} loss {value!r} hex {value.hex()}", flush=True)


if __name__ == "__main__":
    main()
