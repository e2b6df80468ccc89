"""Nothing of a trace session stays behind: no hook, patch or wrapper in torch or the
interpreter after it, no tensor or module of the traced script kept alive, and memory that does
not grow with the number of iterations."""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import io
import os
import signal
import sys
import threading
import types
import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch

import ampdoctor
import ampdoctor.trace.scaler as traced_scaler
from ampdoctor.trace.deadline import Deadline
from ampdoctor.trace.runner import Target, run_target
from ampdoctor.trace.session import TraceSession, active_session
from ampdoctor.trace.stopping import TraceTimeout

ODD = Path(__file__).resolve().parent / "scripts" / "odd"


# ampdoctor's own files are those under the imported package's folder, wherever the checkout and
# its virtual environment live (a clone named ``ampdoctor`` holds torch under ``ampdoctor/.venv``).
PACKAGE_DIR = os.path.dirname(os.path.realpath(ampdoctor.__file__)) + os.sep


@functools.cache
def _in_package(filename: str) -> bool:
    return os.path.realpath(filename).startswith(PACKAGE_DIR)


def _from_ampdoctor(value) -> bool:
    """A function, method or class defined in ampdoctor (wrappers copy __module__, not code)."""
    if isinstance(value, (staticmethod, classmethod)) or inspect.ismethod(value):
        value = value.__func__
    if isinstance(value, types.FunctionType):
        return _in_package(value.__code__.co_filename)
    return isinstance(value, type) and str(getattr(value, "__module__", "")).startswith("ampdoctor")


def ampdoctor_objects_in_torch() -> list[str]:
    """Every attribute of a torch module, or of a class torch defines, that ampdoctor put there."""
    found = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # reading deprecated aliases warns
        for name, module in list(sys.modules.items()):
            found += _patched_in(name, module)
    return sorted(set(found))


def _patched_in(name: str, module) -> list[str]:
    if not (name == "torch" or name.startswith("torch.")) or not isinstance(module, types.ModuleType):
        return []
    found = []
    for attribute, value in list(vars(module).items()):
        if _from_ampdoctor(value):
            found.append(f"{name}.{attribute}")
        if isinstance(value, type) and str(getattr(value, "__module__", "")).startswith("torch"):
            found += [
                f"{name}.{attribute}.{key}" for key, member in list(vars(value).items()) if _from_ampdoctor(member)
            ]
    return found


def global_hooks() -> dict:
    """torch's global hook registries and mode stacks, and the interpreter's hooks a session touches."""
    from torch.nn.modules import module
    from torch.optim import optimizer

    registries = {
        f"nn.modules.module.{name}": list(value)
        for name, value in vars(module).items()
        if name.startswith("_global_") and isinstance(value, dict)
    }
    registries.update(
        {
            f"optim.optimizer.{name}": list(value)
            for name, value in vars(optimizer).items()
            if name.startswith("_global_")
        }
    )
    return {
        **registries,
        "dispatch modes": torch._C._len_torch_dispatch_stack(),
        "function modes": torch._C._len_torch_function_stack(),
        "sys.excepthook": sys.excepthook,
        "threading.excepthook": threading.excepthook,
        "SIGALRM": signal.getsignal(signal.SIGALRM),
        "itimer": signal.getitimer(signal.ITIMER_REAL),
        "scaler observer": traced_scaler._observer,
        "active session": active_session(),
        "__main__": sys.modules["__main__"],
        "sys.argv": list(sys.argv),
        "sys.path": list(sys.path),
    }


def trace(name: str, *args: str, steps=None, timeout=None) -> TraceSession:
    path = str(ODD / name)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        with TraceSession(steps=steps, script=path) as session:
            with Deadline(timeout, TraceTimeout):
                session.outcome = run_target(Target(script=path, args=args))
    return session


def test_the_checks_see_an_installed_session():
    """The leak checks below would notice: during a session they report what it installed."""
    before = global_hooks()
    with TraceSession():
        during, patched = global_hooks(), ampdoctor_objects_in_torch()
    assert {"torch.amp.GradScaler", "torch.cuda.amp.GradScaler", "torch.autograd.backward"} <= set(patched)
    assert any(name.endswith("autocast.__enter__") for name in patched)
    changed = {key for key in before if before[key] != during[key]}
    assert {"dispatch modes", "threading.excepthook", "scaler observer", "active session"} <= changed
    assert "nn.modules.module._global_forward_hooks" in changed
    assert "optim.optimizer._global_optimizer_pre_hooks" in changed


@pytest.mark.parametrize(
    "name,args,steps,timeout,reason",
    [
        ("eval_between.py", (), 4, None, "steps"),
        ("eval_between.py", (), None, None, "end"),
        ("thread_trainer.py", (), 3, None, "steps"),  # the stop comes from another thread
        ("excepthook.py", ("crash",), None, None, "error"),
        ("argparse_help.py", ("--help",), None, None, "exit"),
        ("never_steps.py", (), None, 2, "timeout"),
        ("keepalive_probe.py", ("1",), 1, None, "steps"),  # stopped inside the census window
    ],
)
@pytest.mark.slow
def test_no_hook_patch_or_wrapper_remains_however_the_script_ends(name, args, steps, timeout, reason):
    before = global_hooks()
    session = trace(name, *args, steps=steps, timeout=timeout)
    assert session.outcome.reason == reason
    assert global_hooks() == before
    assert ampdoctor_objects_in_torch() == []


@pytest.mark.slow
@pytest.mark.parametrize("args,reason", [(("3",), "steps"), (("1",), "end"), (("1", "crash"), "error")])
def test_nothing_the_script_made_outlives_the_trace(args, reason):
    session = trace("keepalive_probe.py", *args, steps=3)
    report = session.report()  # the session and its report are still alive and usable
    assert session.outcome.reason == reason and report.to_dict()["steps"] >= 1
    refs = sys.modules["_tiny"].REFS
    assert len(refs) == 6
    gc.collect()
    assert [ref() for ref in refs] == [None] * 6  # model, weight, optimizer, scaler, batch, loss


def _rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _census() -> tuple[Counter, int, int]:
    """Live objects: ampdoctor's by type, tensors, and all that the garbage collector tracks."""
    gc.collect()
    objects = gc.get_objects()
    ours = Counter(
        type(o).__qualname__ for o in objects if str(getattr(type(o), "__module__", "")).startswith("ampdoctor")
    )
    tensors = sum(1 for o in objects if isinstance(o, torch.Tensor))
    return ours, tensors, len(objects)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="RSS read from /proc")
def test_five_hundred_iterations_hold_memory_flat():
    marks = {}

    def measure(step, total, scale, skipped):
        if step in (100, 500):
            marks[step] = (*_census(), _rss_bytes())

    path = str(ODD / "five_hundred.py")
    with contextlib.redirect_stdout(io.StringIO()):
        with TraceSession(steps=500, script=path, progress=measure) as session:
            session.outcome = run_target(Target(script=path))
    assert session.outcome.reason == "steps" and session.observations.steps == 500
    (ours_100, tensors_100, objects_100, rss_100), (ours_500, tensors_500, objects_500, rss_500) = (
        marks[100],
        marks[500],
    )
    # One plain record of numbers per iteration is the only thing that grows with the run ...
    assert ours_500.pop("IterationRecord") - ours_100.pop("IterationRecord") == 400
    assert ours_500 == ours_100
    # ... no tensor is kept per iteration, and all objects together grow by a few per iteration.
    assert tensors_500 - tensors_100 <= 8
    assert objects_500 - objects_100 <= 10 * 400
    assert rss_500 - rss_100 <= 32 * 2**20
