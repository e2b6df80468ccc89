"""Installs its own sys.excepthook, trains, then crashes (with argv[1] == "crash") or runs on."""

import sys

from _tiny import amp_step, batch, make


def hook(kind, value, tb):
    print(f"script hook saw {kind.__name__}", file=sys.stderr)


sys.excepthook = hook
model, optimizer, scaler = make()
for step in range(1000):
    amp_step(model, optimizer, scaler, *batch(step))
    if step == 2 and sys.argv[1:] == ["crash"]:
        raise RuntimeError("diverged")
