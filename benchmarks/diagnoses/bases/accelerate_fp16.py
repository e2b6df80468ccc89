"""Accelerate's float16 path (GradScaler in ``accelerator.backward``, ``clip_grad_norm_`` and
``AcceleratedOptimizer``) driven on the CPU.

    python accelerate_fp16.py --max-steps 4

On a GPU, ``Accelerator(mixed_precision="fp16")`` sets ``native_amp`` and makes a
``torch.amp.GradScaler``; on the CPU it does neither. This script sets both by hand right after
making the Accelerator, so the same wrapper code runs as on a GPU: ``accelerator.backward``
scales, ``accelerator.clip_grad_norm_`` unscales before it clips, and ``AcceleratedOptimizer``
calls ``scaler.step`` and ``scaler.update``. The script enters float16 autocast itself. Two
batches are accumulated per optimizer step.
"""

import argparse

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--init-scale", type=float, default=2.0**16)
    args = parser.parse_args()

    accelerator = Accelerator(mixed_precision="fp16", cpu=True, gradient_accumulation_steps=2)
    accelerator.native_amp = True
    accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=args.init_scale)
    set_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    inputs = torch.randn(64, 16)
    targets = inputs[:, :4].argmax(dim=1)

    batch = 0
    for _ in range(args.max_steps * 2):
        rows = slice((batch * 8) % 64, (batch * 8) % 64 + 8)
        batch += 1
        with accelerator.accumulate(model):
            with torch.autocast("cpu", dtype=torch.float16):
                loss = nn.functional.cross_entropy(model(inputs[rows]), targets[rows])
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
        if accelerator.sync_gradients:
            print(f"loss {loss.item()!r} skipped {accelerator.optimizer_step_was_skipped}", flush=True)


if __name__ == "__main__":
    main()
