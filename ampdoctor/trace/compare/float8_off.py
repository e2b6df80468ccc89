"""float8 training switched off for the float32 run of ``--compare float32``.

torchao converts a model's Linear layers with ``convert_to_float8_training``, which the script
imports (``from torchao.float8 import convert_to_float8_training``) before it calls it. While
installed, the conversion returns the model unchanged: the float32 run trains the same model
with the same layers, in float32. The function is replaced where torchao defines it
(``torchao.float8.float8_linear_utils``) as soon as that module has run, before the package
``torchao.float8`` (or the script) binds the name: an import hook (``import_hooks.py``) waits for
it, so torchao is never imported here. Where the module was already imported, both names are
replaced at once.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any, Optional

from ..import_hooks import AfterImport

_DEFINED_IN = "torchao.float8.float8_linear_utils"
_PACKAGE = "torchao.float8"
_NAME = "convert_to_float8_training"


class Float8Off:
    """``convert_to_float8_training`` made a no-op while installed; ``skipped`` counts the
    conversions the script asked for."""

    def __init__(self) -> None:
        self.skipped = 0
        self._finder: Optional[AfterImport] = None
        self._saved: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        defined = sys.modules.get(_DEFINED_IN)
        if defined is not None:
            self._replace(defined)
            package = sys.modules.get(_PACKAGE)
            if package is not None and getattr(package, _NAME, None) is not None:
                self._save(package)
            return
        self._finder = AfterImport(_DEFINED_IN, self._replace)
        sys.meta_path.insert(0, self._finder)

    def remove(self) -> None:
        if self._finder is not None:
            if self._finder in sys.meta_path:
                sys.meta_path.remove(self._finder)
            self._finder = None
        originals = [original for _owner, _name, original in self._saved]
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()
        # The package bound the replacement when it imported the name: give it the original.
        package = sys.modules.get(_PACKAGE)
        if originals and package is not None and getattr(package, _NAME, None) == self._unconverted:
            setattr(package, _NAME, originals[0])

    def _replace(self, module: ModuleType) -> None:
        if getattr(module, _NAME, None) is not None:
            self._save(module)

    def _save(self, owner: Any) -> None:
        self._saved.append((owner, _NAME, getattr(owner, _NAME)))
        setattr(owner, _NAME, self._unconverted)

    def _unconverted(self, module: Any, *args: Any, **kwargs: Any) -> Any:
        self.skipped += 1
        return module
