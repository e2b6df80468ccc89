"""Swallows the stop of ``--timeout``: MODE ``del`` spends its time in ``__del__`` methods (an
exception raised there is printed and ignored) while the op census records its float16
forwards; MODE ``except`` catches everything, ``BaseException`` included, around a wait."""

import sys
import time

import torch

from _tiny import batch, make

model, _, _ = make()


class SlowToDelete:
    def __del__(self) -> None:
        end = time.monotonic() + 0.2
        while time.monotonic() < end:
            with torch.autocast("cpu", dtype=torch.float16):
                model(batch(0)[0])


print("started", flush=True)
while True:
    if sys.argv[1] == "del":
        SlowToDelete()
    else:
        try:
            time.sleep(0.05)
        except BaseException:
            pass
