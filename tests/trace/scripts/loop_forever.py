"""Trains forever; prints how many optimizer steps were applied after each one."""

from _common import amp_step, make

model, optimizer, scaler, x, y = make()
applied = 0
while True:
    try:
        amp_step(model, optimizer, scaler, x, y)
    except Exception:  # must not swallow ampdoctor's stop
        print("swallowed")
        raise SystemExit(99)
    applied += 1
    print(f"applied {applied}", flush=True)
