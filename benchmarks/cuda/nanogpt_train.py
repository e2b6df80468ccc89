"""A GPT trained the way nanoGPT's train.py trains it: float16 autocast on CUDA with a GradScaler
(enabled for float16 only), gradient accumulation, ``scaler.unscale_`` before clipping, a fused
AdamW on CUDA. Random weights, synthetic tokens.

    python nanogpt_train.py --max-steps 20                      # 8 layers, n_embd 768, block 512
    python nanogpt_train.py --dtype float32 --max-steps 20      # the same run in float32
    python nanogpt_train.py --device cpu --size tiny            # a few seconds on a CPU

Every iteration prints its loss as ``step I loss REPR hex HEX``, so two runs can be compared bit
for bit; the last line gives the median time per iteration (the first three left out).
"""

import argparse
import math
import statistics
import time
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass
class GPTConfig:
    block_size: int
    vocab_size: int
    n_layer: int
    n_head: int
    n_embd: int
    bias: bool = False


SIZES = {
    # vocabulary padded to a multiple of 64, as nanoGPT pads GPT-2's 50257
    "gpu": (GPTConfig(block_size=512, vocab_size=50304, n_layer=8, n_head=12, n_embd=768), 8),
    "tiny": (GPTConfig(block_size=32, vocab_size=64, n_layer=2, n_head=2, n_embd=32), 4),
}


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.n_head = config.n_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        heads = [
            part.view(batch, length, self.n_head, width // self.n_head).transpose(1, 2)
            for part in self.c_attn(x).split(width, dim=2)
        ]
        y = F.scaled_dot_product_attention(*heads, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(batch, length, width))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias),
            nn.GELU(),
            nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying
        for name, param in self.named_parameters():
            if param.dim() >= 2:
                std = 0.02 / math.sqrt(2 * config.n_layer) if name.endswith(("c_proj.weight", "mlp.2.weight")) else 0.02
                nn.init.normal_(param, mean=0.0, std=std)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--size", choices=sorted(SIZES), default="gpu")
    parser.add_argument("--dtype", choices=["float16", "bfloat16", "float32"], default="float16")
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--deterministic", action="store_true", help="torch.use_deterministic_algorithms")
    args = parser.parse_args()

    if args.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    config, batch_size = SIZES[args.size]
    gradient_accumulation_steps = 2
    grad_clip = 1.0
    device_type = "cuda" if "cuda" in args.device else "cpu"
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
    ctx = torch.amp.autocast(device_type=device_type, dtype=ptdtype, enabled=args.dtype != "float32")

    torch.manual_seed(1337)
    data = torch.randint(0, config.vocab_size, (200_000,), dtype=torch.int64)

    def get_batch() -> tuple[torch.Tensor, torch.Tensor]:
        ix = torch.randint(len(data) - config.block_size, (batch_size,))
        x = torch.stack([data[i : i + config.block_size] for i in ix])
        y = torch.stack([data[i + 1 : i + 1 + config.block_size] for i in ix])
        if device_type == "cuda":
            return x.pin_memory().to(args.device, non_blocking=True), y.pin_memory().to(args.device, non_blocking=True)
        return x.to(args.device), y.to(args.device)

    model = GPT(config).to(args.device)
    scaler = torch.amp.GradScaler(device_type, enabled=args.dtype == "float16")
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), fused=device_type == "cuda")
    print(f"parameters {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M, {args.dtype} on {args.device}")

    durations = []
    X, Y = get_batch()
    for iter_num in range(args.max_steps):
        t0 = time.perf_counter()
        for _micro_step in range(gradient_accumulation_steps):
            with ctx:
                loss = model(X, Y) / gradient_accumulation_steps
            X, Y = get_batch()
            scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        lossf = loss.item() * gradient_accumulation_steps  # .item() waits for the device
        durations.append(time.perf_counter() - t0)
        print(f"step {iter_num} loss {lossf!r} hex {lossf.hex()} scale {scaler.get_scale()!r}", flush=True)
    timed = durations[3:]
    if timed:
        print(f"median {statistics.median(timed) * 1e3:.2f} ms/iteration over {len(timed)} iterations ({args.dtype})")


if __name__ == "__main__":
    main()
