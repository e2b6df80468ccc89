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

from typing import Any

from ..import_hooks import SwapAfterImport

_DEFINED_IN = "torchao.float8.float8_linear_utils"
_PACKAGE = "torchao.float8"
_NAME = "convert_to_float8_training"


class Float8Off:
    """``convert_to_float8_training`` made a no-op while installed; ``skipped`` counts the
    conversions the script asked for."""

    def __init__(self) -> None:
        self.skipped = 0
        self._swap = SwapAfterImport(_DEFINED_IN, _PACKAGE, _NAME, lambda original: self._unconverted)

    def install(self) -> None:
        self._swap.install()

    def remove(self) -> None:
        self._swap.remove()

    def _unconverted(self, module: Any, *args: Any, **kwargs: Any) -> Any:
        self.skipped += 1
        return module
