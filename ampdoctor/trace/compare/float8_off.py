"""float8 training switched off for the float32 run of ``--compare float32``.

torchao converts a model's Linear layers with ``convert_to_float8_training``, which the script
imports (``from torchao.float8 import convert_to_float8_training``) before it calls it. While
installed, the conversion returns the model unchanged: the float32 run trains the same model
with the same layers, in float32. The function is replaced where torchao defines it
(``torchao.float8.float8_linear_utils``) as soon as that module has run, before the package
``torchao.float8`` (or the script) binds the name: an import hook (``import_hooks.py``) waits for
it, so torchao is never imported here. Where the module was already imported, both names are
replaced at once.

torchao's later training API converts with ``quantize_(model, config)`` and a training config
(``MXFP8TrainingOpConfig``, ``Float8TrainingOpConfig``: the weights wrapped in a tensor subclass
whose linear runs in MXFP8 or float8). ``quantize_`` is switched the same way, and skips only
those configs: the quantizations it applies otherwise (int8 weights of a frozen part, say) run
as written in both runs.
"""

from __future__ import annotations

from typing import Any, Callable

from ..import_hooks import SwapAfterImport

_DEFINED_IN = "torchao.float8.float8_linear_utils"
_PACKAGE = "torchao.float8"
_NAME = "convert_to_float8_training"
_QUANTIZE_IN = "torchao.quantization.quant_api"
_QUANTIZE_PACKAGE = "torchao.quantization"
_QUANTIZE = "quantize_"
# The configs of ``quantize_`` that train in low precision, by their class's name.
_TRAINING_CONFIGS = frozenset({"MXFP8TrainingOpConfig", "Float8TrainingOpConfig", "MXLinearConfig"})


class Float8Off:
    """``convert_to_float8_training`` made a no-op while installed; ``skipped`` counts the
    conversions the script asked for."""

    def __init__(self) -> None:
        self.skipped = 0
        self._swap = SwapAfterImport(_DEFINED_IN, _PACKAGE, _NAME, lambda original: self._unconverted)
        self._quantize = SwapAfterImport(_QUANTIZE_IN, _QUANTIZE_PACKAGE, _QUANTIZE, self._quantize_unless_training)

    def install(self) -> None:
        self._swap.install()
        self._quantize.install()

    def remove(self) -> None:
        self._quantize.remove()
        self._swap.remove()

    def _unconverted(self, module: Any, *args: Any, **kwargs: Any) -> Any:
        self.skipped += 1
        return module

    def _quantize_unless_training(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def quantize_(model: Any, config: Any = None, *args: Any, **kwargs: Any) -> Any:
            if type(config).__name__ in _TRAINING_CONFIGS:
                self.skipped += 1
                return None  # (``quantize_`` converts in place and returns nothing)
            return original(model, config, *args, **kwargs)

        quantize_.__wrapped__ = original  # type: ignore[attr-defined]
        return quantize_
