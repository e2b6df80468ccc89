"""The statistics the tracer measures on the device, and how they are read: once per iteration.

Every statistic is a small tensor on the device of the tensor it describes. They are collected
in a ``PendingIteration`` and read with one transfer per device when the iteration closes
(``DeviceBatch.read``): tracing never waits for the device in the middle of a forward or
backward pass. Reductions of a few numbers (the largest magnitude among a tensor's min and max,
shares from counts) are left to the host at that read rather than spent as device ops.

What is measured: activations (``activations.py``) and gradients (``gradients.py``). This
module holds what both share: the names of modules and parameters (``ModuleRegistry``; the
tracer keeps names, never the modules), the device batch and the pending iteration.
"""

from __future__ import annotations

import math
import re
import weakref
from collections.abc import MutableMapping
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Optional

import torch
from torch.utils.weak import WeakIdKeyDictionary

from .autocast_state import autocast_off
from .ops import WRAPPER_PREFIXES, dtype_name, quiet

# The values of ``gradients.gradient_row``, in order: shares of elements, then max |g|.
GRADIENT_FIELDS = ("zero", "below_subnormal", "subnormal", "nonfinite", "coarse_subnormal", "max_abs")
GRADIENT_SHARES = GRADIENT_FIELDS[:-1]


@dataclass
class ModuleInfo:
    """What ampdoctor remembers about a module: names and its class, never the module."""

    path: str
    cls: type
    is_root: bool = False  # the module named by its class: every other is a path under it

    @property
    def class_name(self) -> str:
        return self.cls.__name__


@dataclass
class ParamInfo:
    name: str
    module: Optional[ModuleInfo]
    shape: tuple[int, ...]
    dtype: str
    # A parameter shared by several modules (weight tying): its other names; and whether the
    # module it is now named after ran in low precision (see ModuleRegistry.used_tied).
    aliases: list[str] = field(default_factory=list)
    low_precision_user: bool = False


class ModuleRegistry:
    """Names modules and parameters as ``named_modules()``/``named_parameters()`` of the first
    module seen running without a known parent (a root module's own path is its class name)."""

    def __init__(self) -> None:
        self._modules: weakref.WeakKeyDictionary[torch.nn.Module, ModuleInfo] = weakref.WeakKeyDictionary()
        self._params: MutableMapping[torch.Tensor, ParamInfo] = WeakIdKeyDictionary()
        # id(param) -> (weak reference, info): the per-iteration lookup, without building a
        # weak key per call; the weak reference tells a reused id from the parameter.
        self._param_ids: dict[int, tuple[Any, ParamInfo]] = {}
        self.class_files: dict[type, Optional[str]] = {}
        # id(module) -> [(info, the parameter's name under that module)] for tied parameters.
        self.tied: dict[int, list[tuple[ParamInfo, str, ModuleInfo]]] = {}

    def module(self, module: torch.nn.Module) -> ModuleInfo:
        info = self._modules.get(module)
        if info is None:
            self._register_root(module)
            info = self._modules[module]
        return info

    def param(self, param: torch.Tensor, fallback: Callable[[], str]) -> ParamInfo:
        """The parameter's info; ``fallback()`` names one that no registered module owns."""
        known = self._param_ids.get(id(param))
        if known is not None and known[0]() is param:
            return known[1]
        info = self._params.get(param)
        if info is None:
            info = ParamInfo(fallback(), None, tuple(param.shape), dtype_name(param.dtype))
            self._params[param] = info
        key = id(param)

        def forget(_: object, key: int = key) -> None:
            self._param_ids.pop(key, None)

        self._param_ids[key] = (weakref.ref(param, forget), info)
        return info

    def _register_root(self, root: torch.nn.Module) -> None:
        for path, sub in root.named_modules(remove_duplicate=False):
            if sub not in self._modules:
                path = strip_wrappers(path)
                self._modules[sub] = ModuleInfo(path or type(sub).__name__, type(sub), is_root=not path)
                self._remember_class_file(type(sub))
        first_owner: dict[int, torch.nn.Module] = {}
        for name, param in root.named_parameters(remove_duplicate=False):
            owner_path = name.rpartition(".")[0]
            owner = root.get_submodule(owner_path) if owner_path else root
            info = self._params.get(param)
            name = strip_wrappers(name)
            if info is None:
                self._params[param] = ParamInfo(name, self._modules[owner], tuple(param.shape), dtype_name(param.dtype))
                first_owner[id(param)] = owner
                continue
            if id(param) not in first_owner or name == info.name or name in info.aliases:
                continue
            # Tied: the gradient is the sum of every user's; it is named after the module that
            # used it in the forward pass (used_tied), not after where it was registered first.
            if not info.aliases:
                first = first_owner[id(param)]
                self.tied.setdefault(id(first), []).append((info, info.name, self._modules[first]))
            info.aliases.append(name)
            self.tied.setdefault(id(owner), []).append((info, name, self._modules[owner]))

    def used_tied(self, module: torch.nn.Module, low_precision: bool) -> None:
        """``module`` ran its forward: the tied parameters it holds are named after it, unless
        a module that ran in low precision (where an overflow of their gradient is born) already
        named them in this pass."""
        for info, name, owner in self.tied[id(module)]:
            if low_precision or not info.low_precision_user or info.module is owner:
                if info.name != name:
                    info.aliases = [n for n in [info.name, *info.aliases] if n != name]
                    info.name = name
                info.module = owner
                info.low_precision_user = low_precision

    def _remember_class_file(self, cls: type) -> None:
        # Resolved while the script runs: a class defined in the script lives in a __main__
        # module that is gone by the time the report is written.
        if cls in self.class_files:
            return
        import inspect

        try:
            self.class_files[cls] = inspect.getsourcefile(cls)
        except (TypeError, OSError):
            self.class_files[cls] = None


def strip_wrappers(path: str) -> str:
    """``path`` without the leading wrapper attributes (``module.0.weight`` -> ``0.weight``)."""
    parts = path.split(".") if path else []
    while parts and parts[0] in WRAPPER_PREFIXES:
        parts.pop(0)
    return ".".join(parts)


def class_source(cls: type, class_files: dict[type, Optional[str]]) -> tuple[Optional[str], Optional[int]]:
    """(file, line) where ``cls`` is defined, found by text search: cheap and needs no module."""
    path = class_files.get(cls)
    if not path:
        return None, None
    pattern = re.compile(rf"^\s*class\s+{re.escape(cls.__name__)}\b")
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if pattern.match(line):
                    return path, number
    except OSError:
        return path, None
    return path, None


class DeviceBatch:
    """Device tensors read back together as flat lists of floats, one transfer per device.

    Parts keep their dtype until the read, where each (device, dtype) group is gathered with one
    op and converted to float32 once (exact for every float dtype), rather than one conversion
    per part.
    """

    def __init__(self) -> None:
        self._parts: list[torch.Tensor] = []
        # slot -> the parts whose largest absolute value the slot reads as (see add_abs_max)
        self._abs_max: dict[int, range] = {}

    def add(self, tensor: torch.Tensor, copy: bool = False) -> int:
        """A slot that reads as ``tensor``'s values; ``copy``: as they are now (a value the script
        changes in place later, as the loss scale). The tracer's ops, left out of the census."""
        with quiet():
            part = tensor.detach()
            self._parts.append(part.clone() if copy else part)
        return len(self._parts) - 1

    def add_abs_max(self, extremes: list[torch.Tensor]) -> int:
        """A slot that reads as ``[max |v|]`` over the values of ``extremes`` (NaN if any is NaN):
        the reduction of a few numbers is left to the host, rather than costing device ops."""
        parts = self._parts
        first = len(parts)
        for tensor in extremes:
            parts.append(tensor.detach() if tensor.requires_grad else tensor)
        self._abs_max[first] = range(first, len(parts))
        return first

    def read(self) -> list[list[float]]:
        """The values, read as the tracer's own ops: not counted by the census, and outside any
        autocast region the script has open (``autocast_state.autocast_off``)."""
        with quiet(), autocast_off({part.device.type for part in self._parts}):
            return self._read()

    def _read(self) -> list[list[float]]:
        parts = self._parts
        groups: dict[tuple[torch.device, torch.dtype, bool], list[int]] = {}
        for index, part in enumerate(parts):
            key = (part.device, part.dtype, part.dim() == 0)
            indices = groups.get(key)
            if indices is None:
                groups[key] = [index]
            else:
                indices.append(index)
        by_device: dict[torch.device, list[tuple[bool, list[int], torch.Tensor]]] = {}
        for (device, _, scalars), indices in groups.items():
            tensors = [parts[i] for i in indices]
            gathered = torch.stack(tensors) if scalars else torch.cat([p.reshape(-1) for p in tensors])
            by_device.setdefault(device, []).append((scalars, indices, gathered.to(torch.float32)))
        values: list[list[float]] = [[]] * len(parts)
        for groups_on_device in by_device.values():
            flat = torch.cat([gathered for _, _, gathered in groups_on_device]).tolist()  # the host sync
            offset = 0
            for scalars, indices, _ in groups_on_device:
                if scalars:
                    for position, index in enumerate(indices, start=offset):
                        values[index] = [flat[position]]
                    offset += len(indices)
                    continue
                for index in indices:
                    size = parts[index].numel()
                    values[index] = flat[offset : offset + size]
                    offset += size
        for slot, members in self._abs_max.items():
            if len(members) == 2 and len(values[members[0]]) == len(values[members[1]]) == 1:
                # The common case, one tensor's [min] and [max].
                low, high = values[members[0]][0], values[members[1]][0]
                # NaN != NaN: a NaN anywhere makes the slot NaN, as the device reduction would.
                values[slot] = [math.nan if low != low or high != high else max(abs(low), abs(high))]
                continue
            numbers = [v for part in members for v in values[part]]
            values[slot] = [math.nan if any(v != v for v in numbers) else max(map(abs, numbers))]
        return values


@dataclass
class PendingIteration:
    """Everything one iteration produced, still on the device.

    An iteration may be made of segments that share one batch (``after``, ``merged``): what
    happened before and after a plain ``optimizer.step()`` while it is not yet known whether
    that step ended the iteration. ``first_part`` is where this segment's parts begin.
    """

    batch: DeviceBatch = field(default_factory=DeviceBatch)
    loss_slots: list[int] = field(default_factory=list)
    scale_slots: Optional[tuple[int, int]] = None
    used_scale_slot: Optional[int] = None
    found_inf_slots: list[tuple[str, int]] = field(default_factory=list)
    activations: list[Any] = field(default_factory=list)  # activations.ActivationRow
    gradients: list[Any] = field(default_factory=list)  # gradients.GradientChunks
    gradient_checks: list[Any] = field(default_factory=list)  # gradients.GradientCheck
    # (module, number of gradient elements, slot of boundary_row)
    boundaries: list[tuple[ModuleInfo, int, int]] = field(default_factory=list)
    # backward.GradEvent: gradients entering and leaving module calls, on watched iterations
    backward: list[Any] = field(default_factory=list)
    first_part: int = 0

    @property
    def empty(self) -> bool:
        return len(self.batch._parts) == self.first_part

    def after(self) -> PendingIteration:
        """A new segment that adds to the same batch, from this point on."""
        return PendingIteration(batch=self.batch, first_part=len(self.batch._parts))

    @staticmethod
    def merged(segments: list[PendingIteration]) -> PendingIteration:
        """One pending iteration of segments that share a batch, in order."""
        first = segments[0]
        whole = PendingIteration(batch=first.batch, first_part=first.first_part)
        for segment in segments:
            whole.loss_slots += segment.loss_slots
            whole.found_inf_slots += segment.found_inf_slots
            whole.activations += segment.activations
            whole.gradients += segment.gradients
            whole.gradient_checks += segment.gradient_checks
            whole.boundaries += segment.boundaries
            whole.backward += segment.backward
            whole.scale_slots = segment.scale_slots or whole.scale_slots
            if whole.used_scale_slot is None:
                whole.used_scale_slot = segment.used_scale_slot
            # Rows other instruments hang on a segment (whatif.py), kept in order.
            for name, value in vars(segment).items():
                if name not in _PENDING_FIELDS and isinstance(value, list):
                    setattr(whole, name, getattr(whole, name, []) + value)
        return whole


_PENDING_FIELDS = frozenset(f.name for f in fields(PendingIteration))
