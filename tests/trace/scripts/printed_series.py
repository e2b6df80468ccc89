"""Prints, per optimizer step, what the trace report's per-iteration series must hold: the loss
(the sum of the losses back-propagated for that step), whether the step was skipped, and the
iterations at which a module's output spiked and became non-finite.

    python printed_series.py MODE [ITERATIONS]

MODE: bf16 (bfloat16 autocast, no GradScaler), fp16 (float16 autocast with a GradScaler),
accumulation (bfloat16, no scaler, 3 micro-batches per step), gan (two optimizers per
iteration, no scaler).
"""

import sys

import torch
from torch import nn

SPIKE_AT = 3  # the Spike module's output peaks at this iteration (1-based)
NONFINITE_AT = 5  # and is inf at this one


class Spike(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.factor = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


def main() -> None:
    mode = sys.argv[1]
    iterations = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    torch.manual_seed(0)
    spike = Spike()
    model = nn.Sequential(nn.Linear(8, 16), spike, nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    critic = nn.Linear(1, 1)
    critic_optimizer = torch.optim.SGD(critic.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", enabled=mode == "fp16")
    dtype = torch.float16 if mode == "fp16" else torch.bfloat16
    micro_steps = 3 if mode == "accumulation" else 1
    data = torch.randn(64, 8)
    for iteration in range(1, iterations + 1):
        spike.factor = {SPIKE_AT: 100.0, NONFINITE_AT: float("inf")}.get(iteration, 1.0)
        optimizer.zero_grad()
        total = 0.0
        for micro in range(micro_steps):
            x = data[(iteration * micro_steps + micro) % 8 :: 8]
            with torch.autocast("cpu", dtype=dtype):
                loss = model(x).float().pow(2).mean()
            scaler.scale(loss / micro_steps).backward()
            total += (loss / micro_steps).item()
        scale_before = scaler.get_scale() if scaler.is_enabled() else None
        scaler.step(optimizer)
        scaler.update()
        skipped = scale_before is not None and scaler.get_scale() < scale_before
        if mode == "gan":
            critic_optimizer.zero_grad()
            critic_loss = critic(torch.ones(4, 1)).pow(2).mean()
            critic_loss.backward()
            critic_optimizer.step()
            total += critic_loss.item()
        print(f"iteration {iteration} loss {total!r} skipped {int(skipped)}", flush=True)


if __name__ == "__main__":
    main()
