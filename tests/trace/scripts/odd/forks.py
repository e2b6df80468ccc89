"""Forks a child after one iteration; the child ends with sys.exit(3), the parent trains on."""

import os
import sys

from _tiny import amp_step, batch, make

model, optimizer, scaler = make()
amp_step(model, optimizer, scaler, *batch(0))
child = os.fork()
if child == 0:
    print("child ends", flush=True)
    sys.exit(3)
_, status = os.waitpid(child, 0)
print(f"child status {os.waitstatus_to_exitcode(status)}", flush=True)
amp_step(model, optimizer, scaler, *batch(1))
