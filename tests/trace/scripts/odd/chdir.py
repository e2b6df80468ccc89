"""Changes the working directory (to the folder given in argv[1]) before training."""

import os
import sys

from _tiny import amp_step, batch, make

os.chdir(sys.argv[1])
model, optimizer, scaler = make()
for step in range(1000):
    amp_step(model, optimizer, scaler, *batch(step))
