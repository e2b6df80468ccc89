"""Which aten ops ran in which dtype, under which autocast state, in which module.

Two pieces:

``AutocastTracker``
    Autocast state cannot be read inside ``__torch_dispatch__``: by the time an op reaches the
    Python dispatch key, autocast has already excluded its own dispatch key, so
    ``torch.is_autocast_enabled()`` answers False for every op. The tracker therefore follows
    ``torch.autocast.__enter__`` / ``__exit__`` (the decorator form and the deprecated
    ``torch.cuda.amp.autocast`` go through them too) and keeps the state per device type:
    ``"on"``, ``"off"``, or ``"disabled"`` (inside ``autocast(enabled=False)`` nested in an
    enabled region, the documented way to run a region in float32 on purpose).

``OpCensus``
    A ``TorchDispatchMode`` used for the first K iterations only, with torch's ``ModuleTracker``
    for attribution (``module_tracking.py``: its backward follows the autograd graph), in the pattern of ``torch.utils.flop_counter.FlopCounterMode``. It counts
    ops in a dict keyed by (module, op, input dtypes, output dtype, autocast, phase); nothing is
    logged per call. Matmul-class ops are also counted by their input shapes (``gemms``), which
    say whether a GEMM's dimensions suit tensor cores and let profiled time be attributed. For forward ops it also keeps, on the device, the largest |input| and
    |output| per (module, op), so the op behind a non-finite activation can be named without a
    host sync.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Callable, Optional, overload

import torch
from torch.utils import _python_dispatch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .deadline import holding_stops
from .module_tracking import GraphModuleTracker
from .opnames import MATMUL_OPS, METADATA_OPS, SENSITIVE_OPS  # noqa: F401 (the vocabulary, named here too)
from .sites import user_site

FORWARD = "forward"
BACKWARD = "backward"

# Sets of running modules remembered by the census before it starts again (a bound for scripts
# that call modules in ever new combinations).
_MAX_MODULE_SETS = 4096

_quiet_depth = 0
# While torch.profiler records the iterations of a ``--compare`` run (stopwatch.py), ampdoctor's
# own ops are marked with this range, so the profile can leave them out.
OWN_RANGE = "ampdoctor::instrumentation"
_marking = False
_open_ranges: list[Any] = []


def mark_own_ops(enabled: bool) -> None:
    global _marking
    _marking = enabled


# The census's dispatch mode while it is installed (OpCensus.install). A quiet block takes it off
# the top of this thread's mode stack for the block's duration, so ampdoctor's own ops skip the
# Python dispatch altogether (several microseconds each) rather than being passed through it.
_census_mode: Optional[TorchDispatchMode] = None
_stepped_aside = threading.local()
_stack_length: Any = getattr(torch._C, "_len_torch_dispatch_stack", None)
_stack_at: Any = getattr(torch._C, "_get_dispatch_stack_at", None)
_stack_pop: Any = getattr(torch._C, "_pop_torch_dispatch_stack", None)
_stack_push: Any = getattr(torch._C, "_push_on_torch_dispatch_stack", None)
_CAN_STEP_ASIDE = None not in (_stack_length, _stack_at, _stack_pop, _stack_push)


def _step_aside() -> Optional[TorchDispatchMode]:
    """Pop the census mode when it is the top of this thread's mode stack; the mode popped."""
    mode = _census_mode
    if mode is None or not _CAN_STEP_ASIDE:
        return None
    length = _stack_length()
    if length == 0 or _stack_at(length - 1) is not mode:
        return None
    _stack_pop(None)
    popped: TorchDispatchMode = mode
    return popped


class _Quiet:
    """Ops run by ampdoctor's own hooks inside this block are not counted by the census.

    A small class rather than a generator context manager: the hooks enter it on every module
    call, and this is a few times cheaper."""

    __slots__ = ()

    def __enter__(self) -> None:
        global _quiet_depth
        _quiet_depth += 1
        # Per thread, what each open block popped (None: nothing), so nested blocks and blocks
        # on other threads put back only their own.
        aside = getattr(_stepped_aside, "modes", None)
        if aside is None:
            aside = _stepped_aside.modes = []
        aside.append(_step_aside())
        if _marking and _quiet_depth == 1:
            _open_ranges.append(torch.autograd.profiler.record_function(OWN_RANGE).__enter__())  # type: ignore[no-untyped-call]

    def __exit__(self, *exc_info: Any) -> None:
        global _quiet_depth
        _quiet_depth -= 1
        if _quiet_depth == 0 and _open_ranges:
            _open_ranges.pop().__exit__(None, None, None)
        aside = getattr(_stepped_aside, "modes", None)
        mode = aside.pop() if aside else None
        if mode is not None and mode is _census_mode:  # not if the census ended in the block
            _stack_push(mode)


_QUIET = _Quiet()


def reset_quiet() -> None:
    """Forget the quiet blocks left open on this thread: a stop (``--timeout``) that lands inside
    a block's start or end leaves its count behind, and a later census would count nothing. Only
    when no session is active (its hooks are the only ones that open quiet blocks)."""
    global _quiet_depth
    _quiet_depth = 0
    _open_ranges.clear()
    _stepped_aside.modes = []


def quiet() -> _Quiet:
    """Ops run by ampdoctor's own hooks inside this block are not counted by the census."""
    return _QUIET


_DTYPE_NAMES: dict[torch.dtype, str] = {}


@overload
def dtype_name(dtype: torch.dtype) -> str: ...
@overload
def dtype_name(dtype: Optional[torch.dtype]) -> Optional[str]: ...


def dtype_name(dtype: Optional[torch.dtype]) -> Optional[str]:
    if dtype is None:
        return None
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).replace("torch.", "")
    return name


# The attribute under which wrappers hold the user's model: DistributedDataParallel and
# DataParallel (``module``), torch.compile (``_orig_mod``), Lightning Fabric (``_forward_module``,
# ``_original_module``). Names are shown as the user's own model names them.
WRAPPER_PREFIXES = frozenset({"module", "_orig_mod", "_forward_module", "_original_module"})


def tracker_path(tracker_name: str) -> str:
    """``ModuleTracker`` names a module ``Root.child.sub``; ampdoctor uses ``named_modules()``
    paths (``child.sub``) and the class name for a root module."""
    root, _, rest = tracker_name.partition(".")
    parts = rest.split(".") if rest else []
    while parts and parts[0] in WRAPPER_PREFIXES:  # as numerics.strip_wrappers
        parts.pop(0)
    return ".".join(parts) or root


def innermost(parents: AbstractSet[str]) -> Optional[str]:
    """The deepest module among ModuleTracker's parents, as a path; None outside modules."""
    names = [name for name in parents if name != "Global"]
    if not names:
        return None
    return tracker_path(max(names, key=lambda name: (name.count("."), len(name))))


class AutocastTracker:
    """Follows autocast regions by wrapping ``torch.autocast.__enter__``/``__exit__``."""

    def __init__(self, on_enter: Optional[Callable[[str, torch.dtype, bool], None]] = None) -> None:
        self._on_enter = on_enter
        self._stack: list[tuple[str, bool]] = []
        self._states: dict[str, str] = {}
        self._saved: Optional[tuple[Any, Any]] = None

    def state(self, device_type: str) -> str:
        return self._states.get(device_type, "off")

    def enabled_depth(self, device_type: str) -> int:
        """How many enabled regions are open on ``device_type``, the innermost included."""
        return sum(1 for device, enabled in self._stack if device == device_type and enabled)

    def install(self) -> None:
        autocast_class = torch.amp.autocast_mode.autocast
        original_enter, original_exit = autocast_class.__enter__, autocast_class.__exit__
        self._saved = (original_enter, original_exit)
        tracker = self

        def traced_enter(region: Any) -> Any:
            result = original_enter(region)  # type: ignore[no-untyped-call]
            tracker._entered(region)
            return result

        def traced_exit(region: Any, *exc_info: Any) -> Any:
            result = original_exit(region, *exc_info)
            tracker._exited(region)
            return result

        # torch's autocast class itself is patched while the session runs (``remove`` restores it).
        autocast_class.__enter__ = traced_enter  # type: ignore[method-assign]
        autocast_class.__exit__ = traced_exit  # type: ignore[method-assign]

    def remove(self) -> None:
        if self._saved is not None:
            autocast_class = torch.amp.autocast_mode.autocast
            autocast_class.__enter__, autocast_class.__exit__ = self._saved  # type: ignore[method-assign]
            self._saved = None

    def _entered(self, region: Any) -> None:
        device, enabled = region.device, bool(region._enabled)
        self._stack.append((device, enabled))
        self._refresh(device)
        if self._on_enter is not None:
            self._on_enter(device, region.fast_dtype, enabled)

    def _exited(self, region: Any) -> None:
        # Regions exit in reverse order of entry; search from the top to stay robust if a
        # script leaves one open.
        for index in range(len(self._stack) - 1, -1, -1):
            if self._stack[index][0] == region.device:
                del self._stack[index]
                break
        self._refresh(region.device)

    def _refresh(self, device: str) -> None:
        flags = [enabled for dev, enabled in self._stack if dev == device]
        if not flags:
            self._states[device] = "off"
        elif flags[-1]:
            self._states[device] = "on"
        else:
            self._states[device] = "disabled" if any(flags) else "off"


@dataclass(frozen=True)
class OpKey:
    module: Optional[str]
    op: str
    input_dtypes: tuple[str, ...]
    output_dtype: Optional[str]
    autocast: str
    phase: str

    def to_dict(self, count: int) -> dict[str, Any]:
        return {
            "op": self.op,
            "module": self.module,
            "autocast": self.autocast,
            "phase": self.phase,
            "input_dtypes": list(self.input_dtypes),
            "output_dtype": self.output_dtype,
            "count": count,
        }

    @property
    def is_matmul(self) -> bool:
        return self.op in MATMUL_OPS


# A range keeps at most this many device scalars per side before folding them into one.
_RANGE_PARTS = 64


@dataclass
class OpRange:
    """Largest |input| and |output| of one op in one module, kept on the device as the minima and
    maxima of the tensors measured (``DeviceBatch.add_abs_max`` reduces them on the host when
    the window ends: no device op per call beyond the ``aminmax`` that measures)."""

    inputs: list[torch.Tensor]
    outputs: list[torch.Tensor]

    def add(self, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        self.inputs += inputs
        self.outputs += outputs
        if len(self.inputs) > _RANGE_PARTS:
            self.inputs = [_fold(self.inputs)]
        if len(self.outputs) > _RANGE_PARTS:
            self.outputs = [_fold(self.outputs)]


def _fold(parts: list[torch.Tensor]) -> torch.Tensor:
    """max |v| over the device scalars ``parts``, as one float32 scalar (NaN if any is NaN)."""
    device = parts[0].device
    return torch.stack([part.to(device, torch.float32) for part in parts]).abs().amax()


def float_tensors(tree: Any) -> list[torch.Tensor]:
    """The floating-point tensors in a nest of tuples, lists and dicts (hooks and the census call
    this for every module and op: a plain walk of the common shapes is several times cheaper than
    a general pytree flatten, which remains the fallback for other containers)."""
    if isinstance(tree, torch.Tensor):
        return [tree] if tree.is_floating_point() else []
    found: list[torch.Tensor] = []
    _collectfloat_tensors(tree, found)
    return found


def _collectfloat_tensors(tree: Any, found: list[torch.Tensor]) -> None:
    kind = type(tree)
    if kind is tuple or kind is list:
        for item in tree:
            if isinstance(item, torch.Tensor):
                if item.is_floating_point():
                    found.append(item)
            elif isinstance(item, (tuple, list, dict)) or not _is_leaf(item):
                _collectfloat_tensors(item, found)
    elif kind is dict:
        _collectfloat_tensors(list(tree.values()), found)
    elif isinstance(tree, torch.Tensor):
        if tree.is_floating_point():
            found.append(tree)
    elif not _is_leaf(tree):
        leaves, _ = tree_flatten(tree)
        found.extend(t for t in leaves if isinstance(t, torch.Tensor) and t.is_floating_point())


_LEAF_TYPES = (int, float, bool, str, bytes, type(None), torch.dtype, torch.device, torch.memory_format, torch.layout)


def _is_leaf(value: Any) -> bool:
    return isinstance(value, _LEAF_TYPES)


def _ordered_dtypes(tensors: list[torch.Tensor]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for tensor in tensors:
        name = dtype_name(tensor.dtype)
        if name is not None:
            seen.setdefault(name, None)
    return tuple(seen)


def max_abs(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Device scalars whose largest absolute value is max |x| over the tensors: the minimum and
    maximum of each non-empty one, from one ``aminmax`` pass (NaN propagates). Read them with
    ``numerics.DeviceBatch.add_abs_max``; an empty list if there is nothing to measure."""
    found: list[torch.Tensor] = []
    for tensor in tensors:
        # float8 (one byte a value) has no ``aminmax`` on the CPU, and a cast to it saturates:
        # its range says nothing of an overflow (float8.py measures what its casts lose).
        if tensor.numel() == 0 or tensor.element_size() == 1:
            continue
        if type(tensor) is torch.Tensor or type(tensor) is torch.nn.Parameter:
            found.extend(torch.aminmax(tensor.detach()))
            continue
        try:
            found.extend(torch.aminmax(tensor.detach()))
        except (NotImplementedError, RuntimeError):
            pass  # a tensor subclass that has no ``aminmax`` (torchao's float8 training tensor)
    return found


# Per op overload, what the census needs to know of it: (name of its overload packet, whether
# it is a metadata op that is not counted, whether it is a view). Found once per overload.
_OP_FACTS: dict[Any, tuple[str, bool, bool]] = {}


def _op_facts(func: Any) -> tuple[str, bool, bool]:
    name = func.overloadpacket.__name__
    facts = _OP_FACTS[func] = (name, name in METADATA_OPS, bool(getattr(func, "is_view", False)))
    return facts


class _CensusMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    def __init__(self, census: OpCensus) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.census = census

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Optional[dict[str, Any]] = None
    ) -> Any:
        if kwargs is None:
            kwargs = {}
        census = self.census
        facts = _OP_FACTS.get(func) or _op_facts(func)
        if _quiet_depth or census.failed or facts[1]:
            return func(*args, **kwargs)
        try:
            inputs = float_tensors((args, kwargs) if kwargs else args)
            module = census.current_module()
            phase = census.phase()
            # Ranges serve to name the op behind a non-finite module output, so only forward
            # ops run inside a module are measured (not the optimizer's, the scaler's or
            # clipping's ops). Views and detach copy no values: they cannot be where a
            # non-finite value appears. Inputs are measured before the op runs: an in-place op
            # overwrites them.
            probe = module is not None and not facts[2] and phase == FORWARD and bool(inputs)
            input_extremes = max_abs(inputs) if probe else None
        except Exception as exc:  # the census must never break the script
            census.fail(exc)
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        try:
            outputs = float_tensors(out)
            census.count(facts[0], inputs, outputs, module, phase)
            if probe and outputs:
                census.record_range(facts[0], input_extremes, max_abs(outputs), module)
        except Exception as exc:
            census.fail(exc)
        return out


# A matmul-class op of the census: (module, op, phase, output dtype, input shapes).
GemmKey = tuple[Optional[str], str, str, Optional[str], tuple[tuple[int, ...], ...]]


class OpCensus:
    """Counts ops for as long as it is installed; the session removes it after K iterations."""

    def __init__(self, autocast: AutocastTracker, on_error: Optional[Callable[[Exception], None]] = None) -> None:
        # Keyed by plain tuples while counting (cheaper to build and hash per op than OpKey).
        self._tallies: Counter[tuple[Any, ...]] = Counter()
        # Matmul-class ops by (module, op, phase, output dtype, input shapes).
        self.gemms: Counter[GemmKey] = Counter()
        self.failed = False
        self._on_error = on_error
        self.ranges: dict[tuple[Optional[str], str], OpRange] = {}
        # (module, op, output dtype) -> (file, line) of the user's statement that issued it,
        # captured the first time the combination runs in a forward (sites.py).
        self.sites: dict[tuple[Optional[str], str, Optional[str]], tuple[str, int]] = {}
        self._autocast = autocast
        # frozenset of the tracker's running modules -> the innermost one's path (current_module)
        self._modules: dict[frozenset[str], Optional[str]] = {}
        self._tracker: Optional[GraphModuleTracker] = None
        self._mode: Optional[_CensusMode] = None

    @property
    def active(self) -> bool:
        return self._mode is not None

    @property
    def counts(self) -> Counter[OpKey]:
        return Counter({OpKey(*key): count for key, count in self._tallies.items()})

    def install(self) -> None:
        global _census_mode
        with holding_stops():  # a ``--timeout`` stop lands before or after, never between
            self._tracker = GraphModuleTracker(quiet)
            self._tracker.__enter__()  # type: ignore[no-untyped-call]
            self._mode = _CensusMode(self)
            self._mode.__enter__()  # type: ignore[no-untyped-call]
            _census_mode = self._mode

    def remove(self) -> None:
        global _census_mode
        with holding_stops():
            mode = self._mode
            if mode is not None:
                if _census_mode is mode:
                    _census_mode = None
                if _pushed(mode):  # popped already where a training thread ended the window
                    mode.__exit__(None, None, None)  # type: ignore[no-untyped-call]
                self._mode = None
            if self._tracker is not None:
                self._tracker.__exit__()
                self._tracker = None

    def fail(self, exc: Exception) -> None:
        """Stop counting (the mode stays installed until the session removes it)."""
        self.failed = True
        if self._on_error is not None:
            self._on_error(exc)

    def phase(self) -> str:
        return BACKWARD if self._tracker is not None and self._tracker.is_bw else FORWARD

    def current_module(self) -> Optional[str]:
        """The innermost module running now, as a path; None outside modules. The tracker's set
        of running modules changes only on module calls: its path is found once per set."""
        if self._tracker is None:
            return None
        if self._tracker.is_bw:
            # The module whose forward made the autograd node running: exact where siblings
            # share an input and the tracker holds them all as running.
            made_by = self._tracker.node_module()
            if made_by is not None:
                return tracker_path(made_by)
        parents = frozenset(self._tracker.parents)
        if parents in self._modules:
            return self._modules[parents]
        if len(self._modules) >= _MAX_MODULE_SETS:
            self._modules.clear()
        module = self._modules[parents] = innermost(parents)
        return module

    def count(
        self, op: str, inputs: list[torch.Tensor], outputs: list[torch.Tensor], module: Optional[str], phase: str
    ) -> None:
        first = inputs[0] if inputs else outputs[0] if outputs else None
        output_dtype = dtype_name(outputs[0].dtype) if outputs else None
        key = (
            module,
            op,
            _ordered_dtypes(inputs),
            output_dtype,
            self._autocast.state(first.device.type if first is not None else "cpu"),
            phase,
        )
        tallies = self._tallies
        known = tallies.get(key)
        if known is None:
            known = 0
            if phase == FORWARD:
                site_key = (module, op, output_dtype)
                if site_key not in self.sites:
                    site = user_site(skip=2)
                    if site is not None:
                        self.sites[site_key] = site
        tallies[key] = known + 1
        if op in MATMUL_OPS:
            shapes = tuple(tuple(t.shape) for t in inputs if t.dim() > 0)
            self.gemms[(module, op, phase, output_dtype, shapes)] += 1

    def record_range(
        self, op: str, inputs: Optional[list[torch.Tensor]], outputs: list[torch.Tensor], module: Optional[str]
    ) -> None:
        """Fold the minima and maxima of one call's inputs and outputs (``max_abs``) into the
        range of (module, op)."""
        if not outputs:
            return
        key = (module, op)
        known = self.ranges.get(key)
        if known is None:
            self.ranges[key] = OpRange(list(inputs or ()), outputs)
        else:
            known.add(inputs or [], outputs)


def sorted_census(ops: dict[OpKey, int]) -> list[tuple[OpKey, int]]:
    """The census's (key, count) items: matmul-class ops first, then by count."""
    return sorted(ops.items(), key=lambda item: (item[0].op not in MATMUL_OPS, -item[1], item[0].module or ""))


def _pushed(mode: TorchDispatchMode) -> bool:
    """Whether ``mode`` is on this thread's dispatch mode stack (torch has no public name for the
    stack; with a torch that has none, every mode is taken as pushed)."""
    stack = getattr(_python_dispatch, "_get_current_dispatch_mode_stack", None)
    return stack is None or any(current is mode for current in stack())
