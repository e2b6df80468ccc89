"""Trains in a worker thread; the main thread waits for it, then would save a checkpoint."""

import threading

from _tiny import amp_step, batch, make

model, optimizer, scaler = make()


def train() -> None:
    for step in range(1000):
        amp_step(model, optimizer, scaler, *batch(step))


worker = threading.Thread(target=train)
worker.start()
worker.join()
print("saved checkpoint")
