"""Code that must run right after a library's module is imported, before the code that imported
it binds a name from it: ``AfterImport``, a ``sys.meta_path`` finder that leaves finding and
loading to the others and wraps the loader's ``exec_module`` of one module; and
``SwapAfterImport``, which replaces a function of such a module (and its package's binding of
it) and puts it back. The tracer uses them to wrap torchao's float8 conversion (float8.py) and,
in the baseline runs of ``--compare``, to switch it off (compare/float8_off.py), without
importing torchao itself.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, Optional


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


class SwapAfterImport:
    """Replaces the function ``name`` of the module ``defined_in`` with ``make(original)`` from the
    moment that module has run (at once, when it already has), and in ``package`` too where the
    package already binds the original. ``remove`` puts the originals back, in the package too
    when it bound the replacement meanwhile (a package that imports the name from
    ``defined_in`` binds what is there after its code ran). Two swaps of one function nest: the
    later wraps what the earlier left, and removing them in the reverse order restores each."""

    def __init__(self, defined_in: str, package: str, name: str, make: Callable[[Any], Any]) -> None:
        self.defined_in = defined_in
        self.package = package
        self.name = name
        self.make = make
        self._finder: Optional[AfterImport] = None
        self._original: Any = None
        self._replacement: Any = None
        self._saved: list[Any] = []  # the owners whose binding was replaced

    def install(self) -> None:
        module = sys.modules.get(self.defined_in)
        if module is not None:
            self._swap(module)
        else:
            self._finder = AfterImport(self.defined_in, self._swap)
            sys.meta_path.insert(0, self._finder)

    def remove(self) -> None:
        if self._finder is not None:
            if self._finder in sys.meta_path:
                sys.meta_path.remove(self._finder)
            self._finder = None
        for owner in reversed(self._saved):
            setattr(owner, self.name, self._original)
        self._saved.clear()
        package = sys.modules.get(self.package)
        if (
            self._replacement is not None
            and package is not None
            and getattr(package, self.name, None) is self._replacement
        ):
            setattr(package, self.name, self._original)
        self._original = self._replacement = None

    def _swap(self, module: ModuleType) -> None:
        original = getattr(module, self.name, None)
        if original is None or self._replacement is not None:
            return
        self._original, self._replacement = original, self.make(original)
        owners = [module]
        package = sys.modules.get(self.package)
        if package is not None and package is not module and getattr(package, self.name, None) is original:
            owners.append(package)
        for owner in owners:
            setattr(owner, self.name, self._replacement)
            self._saved.append(owner)
