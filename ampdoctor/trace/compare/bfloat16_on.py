"""float8 switched off, bfloat16 kept or added: the baseline run of ``--compare bfloat16``.

A float8 run is measured against what its author would train otherwise: the same script in
bfloat16. While installed, torchao's conversion returns the model unchanged (float8_off.py), and
where a model's forward starts with no autocast enabled for its device (the float8 script
trained its float32 master weights without autocast), the forward runs in a bfloat16 autocast
region that closes with it. A script that already enters a bfloat16 autocast region keeps its
own; one that enters float16 keeps it too (the comparison names it). GradScalers are left as
they are: bfloat16 needs none, and a script that has one runs it either way.

Install it inside an active trace session, like ``precision_off.PrecisionOff``. The hooks that
find a forward's start are global for the first iteration (2.2 µs per module call on the
development machine: 2 ms an iteration for a model of a thousand modules, which the run as
written does not pay); ``settle()``, called once that iteration is over, moves them to the
modules whose forwards were outermost, and the rest of the run pays two hooks per step.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from ..compiled import outside_compiled


class Bfloat16On:
    def __init__(self) -> None:
        from .float8_off import Float8Off

        self.float8 = Float8Off()
        self.regions_added = 0  # outermost forwards run in an autocast region of this switch's
        self._depth = 0
        self._open: list[Optional[torch.autocast]] = []  # per open forward: the region it entered
        self._handles: list[Any] = []
        self._roots: dict[int, torch.nn.Module] = {}  # modules whose forwards were outermost
        self._settled = False
        # As the session's hooks: skipped while Dynamo traces a frame (compiled.py), so that a
        # compiled model's region opens around the compiled call, never inside its graph.
        self._hook_before = outside_compiled(self._before)
        self._hook_after = outside_compiled(self._after)

    def install(self) -> None:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self.float8.install()
        self._handles = [
            register_module_forward_pre_hook(self._hook_before),
            register_module_forward_hook(self._hook_after, always_call=True),
        ]

    def settle(self) -> None:
        """The first iteration is over: hook only the modules whose forwards were outermost."""
        if self._settled or not self._roots or not self._handles:
            return
        self._settled = True
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for module in self._roots.values():
            self._handles.append(module.register_forward_pre_hook(self._hook_before))
            self._handles.append(module.register_forward_hook(self._hook_after, always_call=True))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        while self._open:  # a forward that never returned (the run was stopped inside it)
            region = self._open.pop()
            if region is not None:
                region.__exit__(None, None, None)
        self._depth = 0
        self.float8.remove()

    def __enter__(self) -> Bfloat16On:
        self.install()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.remove()

    def to_dict(self) -> dict[str, int]:
        return {"float8_conversions_skipped": self.float8.skipped, "bfloat16_regions_added": self.regions_added}

    def _before(self, module: torch.nn.Module, args: Any) -> None:
        self._depth += 1
        region = None
        if self._depth == 1 and torch.is_grad_enabled():
            if not self._settled:
                self._roots.setdefault(id(module), module)
            device = _device_of(module, args)
            if device is not None and not torch.is_autocast_enabled(device):
                region = torch.autocast(device, dtype=torch.bfloat16)
                region.__enter__()  # type: ignore[no-untyped-call]  # untyped in torch
                self.regions_added += 1
        self._open.append(region)

    def _after(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not self._open:
            return  # a forward that began before the switch was installed
        self._depth -= 1
        region = self._open.pop()
        if region is not None:
            region.__exit__(None, None, None)


def _device_of(module: torch.nn.Module, args: Any) -> Optional[str]:
    """The device type a forward runs on: its first tensor argument's, else its first
    parameter's; None where autocast does not support it."""
    device = None
    for value in args if isinstance(args, tuple) else (args,):
        if isinstance(value, torch.Tensor):
            device = value.device.type
            break
    if device is None:
        parameter = next(module.parameters(), None)
        device = parameter.device.type if parameter is not None else None
    if device is None or not torch.amp.is_autocast_available(device):
        return None
    return device
