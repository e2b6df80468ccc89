"""Where in the user's code something happened: the innermost frame that is the user's.

Runtime findings point at code the user can change: the statement in a ``forward`` that issued
an op, the line of ``scaler.step(...)`` or of ``loss.backward()``. A frame is the user's when its
file lies outside the Python installation (standard library, site-packages) and outside
ampdoctor; torch, frameworks and ampdoctor itself are all installed packages, so the first frame
outside them, walking outward from the current one, is the user's statement.

Captured once per distinct thing (per (module, op, dtype) during op recording, once per scaler
step site): a frame walk costs a few microseconds, never paid per op.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from types import FrameType
from typing import Optional

_AMPDOCTOR_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _installed_prefixes() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    prefixes = {os.path.abspath(paths[key]) for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    prefixes.update(os.path.abspath(p) for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    prefixes.add(_AMPDOCTOR_DIR)
    return tuple(sorted(p.rstrip(os.sep) + os.sep for p in prefixes))


_PREFIXES = _installed_prefixes()
# code object -> whether its file is the user's (files are few; this saves the prefix checks)
_USER_CODE: dict[object, bool] = {}


def is_user_file(filename: str) -> bool:
    if not filename or filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    return not path.startswith(_PREFIXES)


def user_site(skip: int = 1, limit: int = 64) -> Optional[tuple[str, int]]:
    """(file, line) of the innermost frame in the user's code, skipping ``skip`` frames; None
    when the stack holds none within ``limit`` frames (backward ops run from the autograd
    engine, with no Python caller)."""
    frame: Optional[FrameType] = sys._getframe(skip)
    for _ in range(limit):
        if frame is None:
            return None
        code = frame.f_code
        mine = _USER_CODE.get(code)
        if mine is None:
            mine = _USER_CODE[code] = is_user_file(code.co_filename)
        if mine:
            return os.path.abspath(code.co_filename), frame.f_lineno
        frame = frame.f_back
    return None


def construction_site(limit: int = 64) -> Optional[tuple[str, int]]:
    """Where the user's code made an object: the innermost user frame that is not an
    ``__init__`` (a scaler made in a wrapper class's ``__init__`` is made where the wrapper is)."""
    frame: Optional[FrameType] = sys._getframe(1)
    innermost = None
    for _ in range(limit):
        if frame is None:
            break
        code = frame.f_code
        mine = _USER_CODE.get(code)
        if mine is None:
            mine = _USER_CODE[code] = is_user_file(code.co_filename)
        if mine:
            site = (os.path.abspath(code.co_filename), frame.f_lineno)
            innermost = innermost or site
            if code.co_name != "__init__":
                return site
        frame = frame.f_back
    return innermost


def format_site(site: Optional[tuple[str, int]]) -> Optional[str]:
    return f"{site[0]}:{site[1]}" if site else None
