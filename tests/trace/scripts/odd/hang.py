"""Waits forever in a blocking call, before any training."""

import threading

print("waiting", flush=True)
threading.Event().wait()
