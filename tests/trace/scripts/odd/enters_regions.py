"""Enters and leaves autocast regions in a tight loop, never stepping: a ``--timeout`` stop
nearly always arrives while torch's own enter or exit of a region runs."""

import torch

while True:
    with torch.autocast("cpu", dtype=torch.float16):
        pass
