"""Run a training script (or ``-m module``) as ``__main__`` inside a trace session.

The script runs in this process exactly as ``python SCRIPT ARGS`` (or ``python -m MODULE ARGS``)
would run it: ``sys.argv`` is ``[SCRIPT, *ARGS]``, the script's folder (for ``-m``, the current
directory) is first on ``sys.path``, and it runs as ``__main__``. How it ends becomes an
``Outcome``: stopped after the requested iterations, ended by itself, ``sys.exit(n)``, raised
(its traceback, without ampdoctor's frames), or interrupted with Ctrl-C.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib.machinery
import importlib.util
import os
import runpy
import sys
import traceback
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Optional

from .deadline import stop_landed
from .outcome import Outcome, exit_code_of
from .stopping import StopTracing, TraceTimeout


class UsageError(Exception):
    """The target cannot be run (not found); reported in one line, exit status 2."""


@dataclass(frozen=True)
class Target:
    """A script path or a module name, with the arguments it receives."""

    script: Optional[str] = None
    module: Optional[str] = None
    args: tuple[str, ...] = field(default=())

    @property
    def display(self) -> str:
        return f"-m {self.module}" if self.module else str(self.script)

    def source_path(self) -> Optional[str]:
        """The file findings point at: the script, or the module's source file."""
        if self.script:
            return os.path.abspath(self.script)
        assert self.module is not None  # a target names a script or a module
        try:
            spec = importlib.util.find_spec(self.module)
        except (ImportError, ValueError):
            return None
        if spec is not None and spec.submodule_search_locations:
            main = os.path.join(next(iter(spec.submodule_search_locations)), "__main__.py")
            return main if os.path.exists(main) else spec.origin
        return spec.origin if spec is not None else None


def check_target(target: Target) -> None:
    """Raise ``UsageError`` if the target does not exist, before anything is installed."""
    if target.script is not None:
        if not os.path.exists(target.script):
            raise UsageError(f"can't open file {target.script!r}: No such file or directory")
        if os.path.isdir(target.script) and not os.path.isfile(os.path.join(target.script, "__main__.py")):
            raise UsageError(f"can't find '__main__' module in {target.script!r}")
        return
    assert target.module is not None  # a target names a script or a module
    with _search_path(os.getcwd()):
        try:
            spec = importlib.util.find_spec(target.module)
        except (ImportError, ValueError) as exc:
            raise UsageError(f"error while finding module specification for {target.module!r}: {exc}") from None
    if spec is None:
        raise UsageError(f"No module named {target.module}")


def run_target(target: Target) -> Outcome:
    """Run the target to its end (or until the session stops it) and say how it ended."""
    with _own_excepthook() as hooks:
        outcome = _run(target)
        if outcome.reason == "error" and hooks.replaced:
            # The script installed its own sys.excepthook: Python would show the error through it.
            assert outcome.exception is not None  # an "error" outcome holds its exception
            hooks.show(outcome.exception)
            outcome.traceback = None
        outcome.exception = None
    return outcome


def _run(target: Target) -> Outcome:
    try:
        if target.script is not None and os.path.isfile(target.script):
            with _search_path(_script_folder(target.script)), _argv([target.script, *target.args]):
                _run_file_as_main(os.path.abspath(target.script))
        elif target.script is not None:  # a folder or zip archive with __main__.py
            script = os.path.abspath(target.script)
            with _search_path(script), _argv([target.script, *target.args]):
                runpy.run_path(script, run_name="__main__")
        else:
            assert target.module is not None  # a target names a script or a module
            with _search_path(os.getcwd()), _argv([target.module, *target.args]):
                runpy.run_module(target.module, run_name="__main__", alter_sys=True)
    except StopTracing as stop:
        stop_landed()
        return Outcome("timeout" if isinstance(stop, TraceTimeout) else "steps")
    except SystemExit as exc:
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
        return Outcome("exit", exit_code=exit_code_of(exc))
    except KeyboardInterrupt:
        return Outcome("interrupt", error="KeyboardInterrupt")
    except BaseException as exc:  # the script's own error, reported with its traceback
        return Outcome(
            "error", error=_one_line(exc), traceback=script_traceback(exc), exception=exc, error_site=_user_frame(exc)
        )
    return Outcome("end")


def _script_folder(script: str) -> str:
    """What ``python SCRIPT`` puts first on ``sys.path``: the folder of the script, symbolic
    links resolved."""
    return os.path.dirname(os.path.realpath(script))


def _run_file_as_main(path: str) -> None:
    """Execute a source file in a fresh ``__main__`` module laid out as ``python SCRIPT`` lays it
    out (``runpy.run_path`` differs in small ways scripts can see: ``sys.argv[0]`` made absolute,
    ``__package__ == ""``, no ``__loader__``, ``__builtins__`` a dict)."""
    with open(path, "rb") as handle:
        source = handle.read()
    code = compile(source, path, "exec", dont_inherit=True)
    module = types.ModuleType("__main__")
    module.__dict__.update(
        __file__=path,
        __cached__=None,
        __loader__=importlib.machinery.SourceFileLoader("__main__", path),
        __package__=None,
        __spec__=None,
        __builtins__=builtins,
        __annotations__={},
    )
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = module
    try:
        exec(code, module.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved
        else:  # there was no ``__main__`` before (an interpreter always has one)
            sys.modules.pop("__main__", None)


def script_on_stack(frame: Optional[types.FrameType]) -> bool:
    """Whether ``frame`` runs inside the target (the script's code, or ampdoctor's hooks called
    from it) rather than in ampdoctor's own work before or after it. A signal handler asks this
    of the frame it interrupted: once the target has raised, the code that records how it ended
    runs outside it, and must not be cut short."""
    while frame is not None:
        if frame.f_code in _TARGET_CODES:
            return True
        frame = frame.f_back
    return False


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _user_frame(exc: BaseException) -> Optional[tuple[str, int]]:
    """The innermost frame of the user's code in the traceback of ``exc``."""
    from .sites import is_user_file

    found = None
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if is_user_file(filename):
            found = (os.path.abspath(filename), tb.tb_lineno)
        tb = tb.tb_next
    return found


def script_traceback(exc: BaseException) -> str:
    """The traceback as Python would print it for the script, without ampdoctor's and runpy's
    frames."""
    return "".join(traceback.format_exception(type(exc), exc, _without_runner_frames(exc.__traceback__)))


def _without_runner_frames(tb: Optional[TracebackType]) -> Optional[TracebackType]:
    hidden = {"runpy", __name__}
    while tb is not None and tb.tb_frame.f_globals.get("__name__") in hidden:
        tb = tb.tb_next
    return tb


class _ExceptHooks:
    def __init__(self) -> None:
        self.saved = sys.excepthook

    @property
    def replaced(self) -> bool:
        return sys.excepthook is not self.saved

    def show(self, exc: BaseException) -> None:
        hook = sys.excepthook
        try:
            hook(type(exc), exc, _without_runner_frames(exc.__traceback__))
        except BaseException as hook_error:  # as Python does when the hook itself fails
            print("Error in sys.excepthook:", file=sys.stderr)
            sys.stderr.write(script_traceback(hook_error))
            print("\nOriginal exception was:", file=sys.stderr)
            sys.stderr.write(script_traceback(exc))


@contextlib.contextmanager
def _own_excepthook() -> Iterator[_ExceptHooks]:
    """The script's ``sys.excepthook`` serves the script's own errors; ampdoctor's run after it
    with the hook that was there before."""
    hooks = _ExceptHooks()
    try:
        yield hooks
    finally:
        sys.excepthook = hooks.saved


@contextlib.contextmanager
def _search_path(folder: str) -> Iterator[None]:
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)


@contextlib.contextmanager
def _argv(argv: list[str]) -> Iterator[None]:
    saved = sys.argv
    sys.argv = list(argv)
    try:
        yield
    finally:
        sys.argv = saved


# The functions under which a target's own code runs (``_run`` calls them inside its ``try``).
_TARGET_CODES = frozenset({_run_file_as_main.__code__, runpy.run_path.__code__, runpy.run_module.__code__})
