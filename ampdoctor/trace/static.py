"""Lint the traced code, so that runtime and static findings read as one diagnosis.

A loss scale that collapses at run time next to ``AMP201 clip-before-unscale at train.py:41``
explains itself. After the run, ``ampdoctor trace`` lints the script and the local modules it
imported: the modules first imported during the run whose files lie in the script's folder (or
below it) and outside the Python installation. Linting reads the files only; it runs nothing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Optional

from ..findings import Finding
from .sites import is_user_file

if TYPE_CHECKING:
    from ..lint import LintRun


def imported_local_files(script: Optional[str], modules_before: Iterable[str]) -> list[str]:
    """The script and the ``.py`` files of modules imported since ``modules_before`` that live in
    the script's folder tree."""
    if not script or not os.path.isfile(script):
        return []
    script = os.path.abspath(script)
    root = os.path.dirname(script) + os.sep
    before = set(modules_before)
    files = {script}
    for name, module in list(sys.modules.items()):
        if name in before or module is None:
            continue
        path = getattr(module, "__file__", None)
        if not path or not path.endswith(".py"):
            continue
        path = os.path.abspath(path)
        if path.startswith(root) and is_user_file(path):
            files.add(path)
    return sorted(files)


def lint_files(files: list[str]) -> tuple[list[Finding], Optional[str]]:
    """(findings, None), or ([], a one-line reason) when linting could not run (a bad
    ``[tool.ampdoctor]`` configuration, say): the trace report goes on without them."""
    if not files:
        return [], None
    try:
        run = _lint(files)
    except Exception as exc:  # a configuration error must not lose the trace report
        return [], f"the traced code was not linted: {exc}"
    return sorted(run.findings, key=lambda f: (f.location.path, f.location.line, f.code)), None


def _lint(files: list[str]) -> LintRun:
    """``ampdoctor lint FILES`` with the configuration found from the first file."""
    from pathlib import Path

    from ..config import Settings, find_config, load_settings
    from ..lint import LintRequest, known_codes, lint_paths

    targets = [Path(f) for f in files]
    known = known_codes()
    found = find_config(targets[0])
    settings = load_settings(found, known) if found else Settings(root=Path.cwd())
    return lint_paths(targets, LintRequest(settings=settings, codes=settings.enabled_codes(known)))
