"""Trains from a DataLoader with two worker processes (start method from argv[1]).

The workers report, inside every batch, whether their process holds any trace hook."""

import os
import sys

import torch
from torch.utils.data import DataLoader, Dataset

from _tiny import amp_step, hooks_installed, make

# One write per announcement (print would write the text and its newline separately, and two
# workers starting together could then interleave them).
os.write(2, f"imported as {__name__}\n".encode())


class Pairs(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, index):
        generator = torch.Generator().manual_seed(index)
        x, y = torch.randn(4, generator=generator), torch.randint(0, 2, (), generator=generator)
        return x, y, torch.tensor(hooks_installed())


def main(start_method: str) -> None:
    model, optimizer, scaler = make()
    loader = DataLoader(Pairs(), batch_size=8, num_workers=2, multiprocessing_context=start_method)
    for epoch in range(100):
        for x, y, hooked in loader:
            print(f"worker hooks {int(hooked.sum())}", flush=True)
            amp_step(model, optimizer, scaler, x, y)
    print("finished")


if __name__ == "__main__":
    main(sys.argv[1])
