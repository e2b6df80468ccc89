"""Trains with autograd anomaly detection switched on."""

import torch

from _tiny import amp_step, batch, make

torch.autograd.set_detect_anomaly(True)
model, optimizer, scaler = make()
for step in range(1000):
    amp_step(model, optimizer, scaler, *batch(step))
