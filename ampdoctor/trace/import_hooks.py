"""Code that must run right after a library's module is imported, before the code that imported
it binds a name from it: ``AfterImport``, a ``sys.meta_path`` finder that leaves finding and
loading to the others and wraps the loader's ``exec_module`` of one module. The tracer uses it to
wrap torchao's float8 conversion (float8.py) and, in the float32 run of ``--compare``, to switch
it off (compare/float8_off.py), without importing torchao itself.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Optional


class AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``ran(module)`` right after the module named ``name`` has run its code, before the
    module that imported it goes on (the other finders find it; only its loader's
    ``exec_module`` is wrapped). Insert it first in ``sys.meta_path``; remove it when done."""

    def __init__(self, name: str, ran: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.ran = ran
        # Asking the other finders may ask this one again (another AfterImport for the same
        # module does): it answers None while it searches, so that both wrap the one loader.
        self._searching = False

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname != self.name or self._searching:
            return None
        self._searching = True
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._searching = False
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if loader is None or exec_module is None:
            return spec
        ran = self.ran

        def run_then_patch(module: ModuleType) -> None:
            exec_module(module)
            ran(module)

        loader.exec_module = run_then_patch  # type: ignore[method-assign]  # this spec's own loader
        return spec
