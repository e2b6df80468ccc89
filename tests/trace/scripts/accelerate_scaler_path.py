"""Accelerate's float16 path (GradScaler in ``accelerator.backward`` and ``AcceleratedOptimizer``)
driven on the CPU.

On a GPU, ``Accelerator(mixed_precision="fp16")`` makes a ``torch.amp.GradScaler`` and hands it
to every ``AcceleratedOptimizer``; on the CPU it makes none. This script gives the Accelerator a
CPU scaler before ``prepare`` and enters float16 autocast itself, so the same wrapper code runs:
``accelerator.backward`` scales, ``AcceleratedOptimizer.step`` calls ``scaler.step`` (which skips
the inner ``optimizer.step`` when it finds inf) and ``scaler.update``. A large initial scale makes
the first steps skip. Two batches are accumulated per optimizer step.
"""

import argparse

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--init-scale", type=float, default=2.0**24)
    args = parser.parse_args()

    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
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
