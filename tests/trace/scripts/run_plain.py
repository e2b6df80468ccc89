"""Run several training scripts plainly, one after another, in this one process (no ampdoctor):
``python run_plain.py '[["script.py", "--arg", "1"], ...]'`` prints a JSON list with each run's
stdout. One process pays the frameworks' import time once."""

import contextlib
import io
import json
import runpy
import sys


def reset_framework_state() -> None:
    """Accelerate keeps its process-wide state in singletons; a new script starts afresh."""
    state = sys.modules.get("accelerate.state")
    if state is not None:
        state.AcceleratorState._reset_state(True)
        state.GradientState._reset_state()


def run(script: str, args: list[str]) -> str:
    reset_framework_state()
    out = io.StringIO()
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *args]
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(script, run_name="__main__")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return out.getvalue()


if __name__ == "__main__":
    runs = json.loads(sys.argv[1])
    print(json.dumps([run(script, args) for script, *args in runs]))
