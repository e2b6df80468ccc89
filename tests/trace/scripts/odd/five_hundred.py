"""A tiny float16 model trained for as long as it is let."""

from _tiny import amp_step, batch, make

model, optimizer, scaler = make()
x, y = batch(0)
while True:
    amp_step(model, optimizer, scaler, x, y)
