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
    for attribution, in the pattern of ``torch.utils.flop_counter.FlopCounterMode``. It counts
    ops in a dict keyed by (module, op, input dtypes, output dtype, autocast, phase); nothing is
    logged per call. Matmul-class ops are also counted by their input shapes (``gemms``), which
    say whether a GEMM's dimensions suit tensor cores and let profiled time be attributed. For forward ops it also keeps, on the device, the largest |input| and
    |output| per (module, op), so the op behind a non-finite activation can be named without a
    host sync.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.module_tracker import ModuleTracker

from .opnames import CONVOLUTION_OPS
from .sites import user_site

# aten overload packets (names as ``func.overloadpacket.__name__``) of the ops that autocast
# exists to speed up. ``linear`` and ``matmul`` decompose into these before dispatch.
MATMUL_OPS = frozenset(
    {
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "addbmm",
        "mv",
        "addmv",
        "dot",
        "vdot",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_flash_attention_forward",
        "_efficient_attention_forward",
        "_native_multi_head_attention",
    }
    | CONVOLUTION_OPS
)

# Ops whose accuracy or range suffers in float16; autocast keeps them in float32 on CUDA.
SENSITIVE_OPS = frozenset(
    {
        "_softmax",
        "_log_softmax",
        "softmax",
        "log_softmax",
        "native_layer_norm",
        "layer_norm",
        "native_group_norm",
        "group_norm",
        "native_batch_norm",
        "_native_batch_norm_legit",
        "_native_batch_norm_legit_functional",
        "_native_batch_norm_legit_no_training",
        "batch_norm",
        "_batch_norm_with_update",
        "exp",
        "log",
        "log1p",
        "log2",
        "log10",
        "pow",
        "sum",
        "mean",
        "prod",
        "cumsum",
        "var",
        "std",
        "var_mean",
        "std_mean",
        "norm",
        "linalg_vector_norm",
        "logsumexp",
        "nll_loss_forward",
        "nll_loss2d_forward",
        "nll_loss",
        "cross_entropy_loss",
        "mse_loss",
        "l1_loss",
        "smooth_l1_loss",
        "huber_loss",
        "binary_cross_entropy",
        "binary_cross_entropy_with_logits",
        "kl_div",
        "soft_margin_loss",
        "multilabel_margin_loss_forward",
        "multi_margin_loss",
        "cosine_embedding_loss",
        "poisson_nll_loss",
        "margin_ranking_loss",
        "hinge_embedding_loss",
    }
)

# Ops that only ask about metadata or mark profiler ranges: counting them says nothing about
# precision.
_METADATA_OPS = frozenset(
    {
        "is_contiguous",
        "sym_is_contiguous",
        "is_strides_like_format",
        "is_non_overlapping_and_dense",
        "size",
        "sym_size",
        "stride",
        "sym_stride",
        "storage_offset",
        "sym_storage_offset",
        "numel",
        "sym_numel",
        "dim",
        "layout",
        "_record_function_enter",
        "_record_function_enter_new",
        "_record_function_exit",
    }
)

FORWARD = "forward"
BACKWARD = "backward"

_quiet_depth = 0
# While torch.profiler records the iterations of a ``--compare`` run (stopwatch.py), ampdoctor's
# own ops are marked with this range, so the profile can leave them out.
OWN_RANGE = "ampdoctor::instrumentation"
_marking = False
_open_ranges: list[Any] = []


def mark_own_ops(enabled: bool) -> None:
    global _marking
    _marking = enabled


class _Quiet:
    """Ops run by ampdoctor's own hooks inside this block are not counted by the census.

    A small class rather than a generator context manager: the hooks enter it on every module
    call, and this is a few times cheaper."""

    __slots__ = ()

    def __enter__(self) -> None:
        global _quiet_depth
        _quiet_depth += 1
        if _marking and _quiet_depth == 1:
            _open_ranges.append(torch.autograd.profiler.record_function(OWN_RANGE).__enter__())

    def __exit__(self, *exc_info: Any) -> None:
        global _quiet_depth
        _quiet_depth -= 1
        if _quiet_depth == 0 and _open_ranges:
            _open_ranges.pop().__exit__(None, None, None)


_QUIET = _Quiet()


def quiet() -> _Quiet:
    """Ops run by ampdoctor's own hooks inside this block are not counted by the census."""
    return _QUIET


_DTYPE_NAMES: dict[torch.dtype, str] = {}


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


def innermost(parents: set[str]) -> Optional[str]:
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

    def install(self) -> None:
        autocast_class = torch.amp.autocast_mode.autocast
        original_enter, original_exit = autocast_class.__enter__, autocast_class.__exit__
        self._saved = (original_enter, original_exit)
        tracker = self

        def traced_enter(region):
            result = original_enter(region)
            tracker._entered(region)
            return result

        def traced_exit(region, *exc_info):
            result = original_exit(region, *exc_info)
            tracker._exited(region)
            return result

        autocast_class.__enter__ = traced_enter
        autocast_class.__exit__ = traced_exit

    def remove(self) -> None:
        if self._saved is not None:
            autocast_class = torch.amp.autocast_mode.autocast
            autocast_class.__enter__, autocast_class.__exit__ = self._saved
            self._saved = None

    def _entered(self, region) -> None:
        device, enabled = region.device, bool(region._enabled)
        self._stack.append((device, enabled))
        self._refresh(device)
        if self._on_enter is not None:
            self._on_enter(device, region.fast_dtype, enabled)

    def _exited(self, region) -> None:
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


@dataclass
class OpRange:
    """Largest |input| and |output| of one op in one module, kept on the device."""

    input_max: torch.Tensor
    output_max: torch.Tensor


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
        seen.setdefault(dtype_name(tensor.dtype), None)
    return tuple(seen)


def max_abs(tensors: list[torch.Tensor]) -> Optional[torch.Tensor]:
    """max |x| over the tensors as a device scalar (NaN if any NaN), None if empty.

    The scalar keeps the tensors' dtype when they share one (every float dtype holds its own
    extremes exactly; ``DeviceBatch`` converts to float32 when it reads), otherwise float32.
    """
    # aminmax is one vectorised pass without a temporary; the infinity norm and abs().amax()
    # were several times slower on CPU. Both propagate NaN.
    maxima = []
    for tensor in tensors:
        if tensor.numel() > 0:
            low, high = torch.aminmax(tensor.detach())
            maxima.append(torch.maximum(high, low.neg()))
    if not maxima:
        return None
    if len(maxima) == 1:
        return maxima[0]
    target = maxima[0].device
    return torch.stack([m.to(target, torch.float32) for m in maxima]).amax()


class _CensusMode(TorchDispatchMode):
    def __init__(self, census: OpCensus) -> None:
        super().__init__()
        self.census = census

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        census = self.census
        name = func.overloadpacket.__name__
        if _quiet_depth or census.failed or name in _METADATA_OPS:
            return func(*args, **kwargs)
        try:
            inputs = float_tensors((args, kwargs))
            module = census.current_module()
            probe = census.wants_range(func, inputs, module)
            # Measured before the op runs: an in-place op overwrites its input.
            input_max = max_abs(inputs) if probe else None
        except Exception as exc:  # the census must never break the script
            census.fail(exc)
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        try:
            outputs = float_tensors(out)
            census.count(name, inputs, outputs, module)
            if probe and outputs:
                census.record_range(name, input_max, max_abs(outputs), module)
        except Exception as exc:
            census.fail(exc)
        return out


class OpCensus:
    """Counts ops for as long as it is installed; the session removes it after K iterations."""

    def __init__(self, autocast: AutocastTracker, on_error: Optional[Callable[[Exception], None]] = None) -> None:
        # Keyed by plain tuples while counting (cheaper to build and hash per op than OpKey).
        self._tallies: Counter[tuple] = Counter()
        # Matmul-class ops by (module, op, phase, output dtype, input shapes).
        self.gemms: Counter[tuple] = Counter()
        self.failed = False
        self._on_error = on_error
        self.ranges: dict[tuple[Optional[str], str], OpRange] = {}
        # (module, op, output dtype) -> (file, line) of the user's statement that issued it,
        # captured the first time the combination runs in a forward (sites.py).
        self.sites: dict[tuple[Optional[str], str, Optional[str]], tuple[str, int]] = {}
        self._autocast = autocast
        self._tracker: Optional[ModuleTracker] = None
        self._mode: Optional[_CensusMode] = None

    @property
    def active(self) -> bool:
        return self._mode is not None

    @property
    def counts(self) -> Counter[OpKey]:
        return Counter({OpKey(*key): count for key, count in self._tallies.items()})

    def install(self) -> None:
        self._tracker = ModuleTracker()
        self._tracker.__enter__()
        self._mode = _CensusMode(self)
        self._mode.__enter__()

    def remove(self) -> None:
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
        if self._tracker is not None:
            self._tracker.__exit__()
            self._tracker = None

    def fail(self, exc: Exception) -> None:
        """Stop counting (the mode stays installed until the session removes it)."""
        self.failed = True
        if self._on_error is not None:
            self._on_error(exc)

    def _phase(self) -> str:
        return BACKWARD if self._tracker is not None and self._tracker.is_bw else FORWARD

    def current_module(self) -> Optional[str]:
        """The innermost module running now, as a path; None outside modules."""
        return innermost(self._tracker.parents) if self._tracker is not None else None

    def count(self, op: str, inputs: list[torch.Tensor], outputs: list[torch.Tensor], module: Optional[str]) -> None:
        device = (inputs or outputs)[0].device.type if (inputs or outputs) else "cpu"
        key = (
            module,
            op,
            _ordered_dtypes(inputs),
            dtype_name(outputs[0].dtype) if outputs else None,
            self._autocast.state(device),
            self._phase(),
        )
        if key not in self._tallies and key[5] == FORWARD:
            site_key = (module, op, key[3])
            if site_key not in self.sites:
                site = user_site(skip=2)
                if site is not None:
                    self.sites[site_key] = site
        self._tallies[key] += 1
        if op in MATMUL_OPS:
            shapes = tuple(tuple(t.shape) for t in inputs if t.dim() > 0)
            self.gemms[(module, op, key[5], key[3], shapes)] += 1

    def wants_range(self, func, inputs: list[torch.Tensor], module: Optional[str]) -> bool:
        # Ranges serve to name the op behind a non-finite module output, so only forward ops run
        # inside a module are measured (not the optimizer's, the scaler's or clipping's ops).
        # Views and detach copy no values: they cannot be where a non-finite value appears.
        if module is None or getattr(func, "is_view", False):
            return False
        return bool(inputs) and self._phase() == FORWARD

    def record_range(
        self, op: str, input_max: Optional[torch.Tensor], output_max: Optional[torch.Tensor], module: Optional[str]
    ) -> None:
        if output_max is None:
            return
        if input_max is None:
            input_max = torch.zeros((), dtype=torch.float32, device=output_max.device)
        key = (module, op)
        known = self.ranges.get(key)
        if known is None:
            self.ranges[key] = OpRange(input_max, output_max)
            return
        # torch.maximum propagates NaN, so a NaN seen once stays visible.
        known.input_max = torch.maximum(known.input_max, input_max.to(known.input_max.device))
        known.output_max = torch.maximum(known.output_max, output_max.to(known.output_max.device))


def sorted_census(ops: dict) -> list:
    """The census's (key, count) items: matmul-class ops first, then by count."""
    return sorted(ops.items(), key=lambda item: (item[0].op not in MATMUL_OPS, -item[1], item[0].module or ""))
