"""Trains argv[1] steps, leaving weak references to what it made in the local module, so a test
can check that nothing of the script outlives the trace; with argv[2] == "crash" it then raises."""

import sys
import weakref

import _tiny

model, optimizer, scaler = _tiny.make()
x, y = _tiny.batch(0)
loss = _tiny.amp_step(model, optimizer, scaler, x, y)
_tiny.REFS[:] = [weakref.ref(thing) for thing in (model, model[0].weight, optimizer, scaler, x, loss)]
for step in range(int(sys.argv[1])):
    _tiny.amp_step(model, optimizer, scaler, x, y)
if sys.argv[2:] == ["crash"]:
    raise RuntimeError("after training")
