"""The ``ampdoctor`` console command.

``ampdoctor lint FILE...`` with nothing but file names — what a pre-commit hook runs on every
commit — goes straight to the lint command's work with its default options: importing click
costs more than linting a typical training script. Every other command line, including any
option, goes through the click interface in ``cli.py``, which applies the same defaults.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    # The console command lints and ends: the objects it made need no collection (a last one,
    # over the project pass's leftovers, cost 15-25 ms). The lint paths collect where memory
    # would grow (``lint/gc_budget.py``); ``trace`` runs the user's script as it would run.
    ending = argv is None and args[:1] == ["lint"]
    if ending:
        gc.disable()
        from .lint.gc_budget import ending as lints_and_ends

        lints_and_ends()
    try:
        if _plain_lint(args):
            sys.exit(_lint_files(args[1:]))
        from .cli import main as click_main

        click_main(args=args, prog_name="ampdoctor")
    except SystemExit as done:
        if ending:
            _end_now(done.code)
        raise
    finally:
        if ending:
            gc.freeze()  # nor at exit, where the interpreter would collect what is left


def _end_now(code: object) -> None:
    """End the process with ``code`` without freeing what it holds (``lint/gc_budget.py``: a
    large module's tree is left to the end), once its output is written. Returns where that
    cannot be done as cleanly as a normal exit: a code that is a message, another thread
    running, output that cannot be flushed (a closed pipe): the interpreter's exit then says
    what it says."""
    import threading

    if not (code is None or type(code) is int) or threading.active_count() != 1:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(code or 0)


def _plain_lint(args: list[str]) -> bool:
    """``lint`` followed only by paths, with no environment variable that click would read."""
    if args[:1] != ["lint"] or os.environ.get("AMPDOCTOR_OUTPUT_FORMAT"):
        return False
    return all(arg and not arg.startswith("-") for arg in args[1:])


def _lint_files(paths: list[str]) -> int:
    from pathlib import Path

    from .lint.lint_command import EXIT_ERROR, UsageError, run_lint

    try:
        return run_lint(paths=[Path(p) for p in paths] or [Path(".")])
    except UsageError as exc:
        print(f"ampdoctor: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:
        # The reader went away (``ampdoctor lint . | head``): end quietly with 1, as the click
        # interface does, and let what is still buffered go nowhere instead of failing again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 1
