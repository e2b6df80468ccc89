"""Mixed precision switched off, nothing else changed: the float32 run of ``--compare float32``.

While installed, every autocast region is entered disabled (``torch.autocast``, the decorator
form and the deprecated ``torch.cuda.amp``/``torch.cpu.amp`` spellings all run
``torch.amp.autocast_mode.autocast.__init__``) and every GradScaler is made disabled (its
``scale`` returns the loss unchanged, ``step`` calls ``optimizer.step()``, ``update`` does
nothing), which is exactly what ``enabled=False`` does. torchao's float8 conversion returns the model
unchanged (float8_off.py). Tensors the script casts itself
(``.half()``, ``.to(torch.bfloat16)``) stay as they are: that is not something a switch can undo,
and the comparison says so.

Install it inside an active trace session: the GradScaler classes it wraps are the session's.
"""

from __future__ import annotations

from typing import Any, Callable

import torch


class PrecisionOff:
    def __init__(self) -> None:
        from .float8_off import Float8Off

        self.autocast_regions_disabled = 0  # entered disabled that would have been enabled
        self.scalers_disabled = 0
        self.float8 = Float8Off()  # torchao's float8 conversion, skipped (float8_off.py)
        self._saved: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        from ..scaler import TracedGradScaler, _TorchGradScaler

        self.float8.install()

        autocast_class = torch.amp.autocast_mode.autocast
        self._wrap(autocast_class, self._disable_region)
        self._count_entries(autocast_class)
        # The session's observed GradScaler and torch's own class (which the session has made
        # observing, for subclasses and names bound before the session) both lead here.
        for scaler_class in (TracedGradScaler, _TorchGradScaler):
            self._wrap(scaler_class, self._disable_scaler)

    def remove(self) -> None:
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()
        self.float8.remove()

    def __enter__(self) -> PrecisionOff:
        self.install()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.remove()

    def _wrap(self, owner: type, after_init: Callable[[Any], None]) -> None:
        original = owner.__dict__["__init__"]

        def init(instance: Any, *args: Any, **kwargs: Any) -> None:
            original(instance, *args, **kwargs)
            after_init(instance)

        init.__wrapped__ = original  # type: ignore[attr-defined]
        self._saved.append((owner, "__init__", original))
        owner.__init__ = init  # type: ignore[misc]  # the class's own __init__, patched until remove()

    def _count_entries(self, autocast_class: type) -> None:
        """Count the regions entered that would have been enabled (a context object made once,
        as nanoGPT's ``ctx``, is entered on every micro-step)."""
        original = autocast_class.__dict__["__enter__"]
        switch = self

        def enter(region: Any) -> Any:
            if getattr(region, "_ampdoctor_switched_off", False):
                switch.autocast_regions_disabled += 1
            return original(region)

        self._saved.append((autocast_class, "__enter__", original))
        autocast_class.__enter__ = enter  # type: ignore[attr-defined]  # torch's autocast, patched until remove()

    def _disable_region(self, region: Any) -> None:
        if getattr(region, "_enabled", False):
            region._ampdoctor_switched_off = True
        region._enabled = False

    def _disable_scaler(self, scaler: Any) -> None:
        if getattr(scaler, "_enabled", False):
            self.scalers_disabled += 1
        scaler._enabled = False

    def to_dict(self) -> dict[str, int]:
        return {
            "autocast_regions_disabled": self.autocast_regions_disabled,
            "scalers_disabled": self.scalers_disabled,
            "float8_conversions_skipped": self.float8.skipped,
        }
