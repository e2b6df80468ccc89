"""A producer thread (not a daemon) fills a queue forever; the main thread trains from it."""

import queue
import threading

from _tiny import amp_step, batch, make

batches: "queue.Queue" = queue.Queue(maxsize=2)


def produce() -> None:
    seed = 0
    while True:
        batches.put(batch(seed))
        seed += 1


threading.Thread(target=produce, name="producer").start()
model, optimizer, scaler = make()
while True:
    amp_step(model, optimizer, scaler, *batches.get())
