"""Prints what Python gives a script: its name, file, argv, path, the local module it imported,
whether the main guard ran, its globals and its warnings filters; then trains three steps."""

import json
import os
import sys

import _tiny

seen = {
    "name": __name__,
    "file": __file__,
    "argv": sys.argv,
    "path0": sys.path[0],
    "local_module": os.path.abspath(_tiny.__file__),
    "main_module_file": getattr(sys.modules["__main__"], "__file__", None),
    "main_is_this": sys.modules["__main__"].__dict__ is globals(),
    "cached": __cached__ if "__cached__" in globals() else "missing",
    "spec": __spec__,
    "package": __package__,
    "builtins": type(__builtins__).__name__,
    "loader": type(__loader__).__name__,
    "main_type": type(sys.modules["__main__"]).__name__,
    "doc": __doc__.split()[0],
    "globals": sorted(name for name in globals() if name.startswith("__")),
    "guard": False,
}

if __name__ == "__main__":
    seen["guard"] = True
    print(json.dumps(seen, default=str), flush=True)
    model, optimizer, scaler = _tiny.make()
    for step in range(3):
        _tiny.amp_step(model, optimizer, scaler, *_tiny.batch(step))
