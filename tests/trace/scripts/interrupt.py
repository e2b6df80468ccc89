"""Simulates Ctrl-C after four iterations."""

import os
import signal

from _common import amp_step, make

model, optimizer, scaler, x, y = make()
for step in range(100):
    amp_step(model, optimizer, scaler, x, y)
    if step == 3:
        os.kill(os.getpid(), signal.SIGINT)
