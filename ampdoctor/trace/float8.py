"""float8 training with torchao, seen at run time: what each float8 cast loses and the shapes of
the float8 GEMMs.

torchao's ``Float8Linear`` casts each operand of its three GEMMs (the input and the weight in the
forward, the gradient of the output and the weight again in the backward) with
``hp_tensor_to_float8_dynamic``: it computes a scale from the tensor's amax, multiplies, and
casts to float8 (e4m3 forward, e5m2 for gradients). One large value sets the scale of the whole
tensor (tensorwise) or of its row (rowwise), and every value far enough below it becomes zero.
The GEMMs then go to ``torch._scaled_mm``, which on the GPU needs both dimensions of each operand
divisible by 16 (the CPU kernel checks nothing).

While the op census runs (the first iterations), the watch wraps both (``torchao.float8.
float8_linear.hp_tensor_to_float8_dynamic`` and ``torch._scaled_mm``) and records, per module
and operand role, how many non-zero values each cast flushed to zero, and per module the float8
GEMMs' shapes. The module comes from the census's module tracker (forward and backward). The
wrappers only read: the training step's numbers are unchanged. torchao is never imported here;
the wrappers go in once the training code has imported it (checked at each module call until
then, and only while the op census runs: the watch stops waiting when it ends). It also follows
which module with weights finishes its forward last before the first backward: the output
layer, which float8 training should leave in higher precision. And it wraps the conversion
itself (``convert_to_float8_training``, by an import hook: it runs before any module does) to
count the ``nn.Linear`` layers of each model converted and the float8 layers that came of them.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable, Optional

import torch

from .autocast_state import autocast_off
from .compiled import outside_compiled
from .import_hooks import SwapAfterImport
from .mx_watch import MXWatch
from .observations import CastKey, CastStats, Float8GemmKey, Observations, ShadowStats
from .ops import quiet
from .sites import user_site

if TYPE_CHECKING:
    from .ops import OpCensus

_LINEAR_MODULE = "torchao.float8.float8_linear"
_CAST = "hp_tensor_to_float8_dynamic"
# Where torchao defines the conversion, and the package that re-exports it.
_UTILS_MODULE = "torchao.float8.float8_linear_utils"
_PACKAGE = "torchao.float8"
_CONVERT = "convert_to_float8_training"
# torchao's float8 layer, by its class's name (torchao is not imported here), and the weight of
# an ``nn.Linear`` that ``quantize_`` with ``Float8TrainingOpConfig`` trains in float8.
_FLOAT8_LINEAR = "Float8Linear"
_FLOAT8_WEIGHT = "Float8TrainingWeightWrapperTensor"
# Relative slack above a float8 format's maximum before a scaled value counts as clipped.
_CLIP_TOLERANCE = 1e-5
# Output rows a float32 shadow compares per forward (tokens or samples).
_SHADOW_ROWS = 256
# Tensors a float32 shadow of a layer can be computed from (not FSDP's or torchao's subclasses).
_PLAIN = (torch.Tensor, torch.nn.Parameter)
# Conversions recorded per run (a script converts once, or once per model or block).
_MAX_CONVERSIONS = 64


class Float8Watch:
    """Installed for the op-recording window; measures only while ``census()`` returns an active
    census. ``name(module)`` is a module's path, as the session's registry names it."""

    def __init__(
        self,
        census: Callable[[], Optional[OpCensus]],
        observations: Observations,
        name: Callable[[torch.nn.Module], str],
    ) -> None:
        self._census = census
        self._observations = observations
        self._name = name
        self._waiting: Any = None  # the module pre-hook that waits for torchao's import
        self._forwards: Any = None  # the module post-hook that follows the forward's order
        self._entering: Any = None  # the module pre-hook that wraps MX training once it is imported
        self._last: Optional[torch.nn.Module] = None  # the last module with weights to finish
        self._casts = 0  # float8 casts recorded so far
        self._patched: list[tuple[Any, str, Any]] = []  # (owner, attribute, original)
        # The conversion runs before any module does: it is wrapped as torchao defines it (or at
        # once, when the script imported torchao before the session).
        self._conversion = SwapAfterImport(_UTILS_MODULE, _PACKAGE, _CONVERT, self._counting)
        # MXFP8 training (``quantize_`` with an MX training config): its casts counted alike.
        self._mx = MXWatch(self._active, name, self.tally, observations)

    def install(self) -> None:
        self._conversion.install()
        if self._patch():
            self._follow_forwards()
        else:
            from torch.nn.modules.module import register_module_forward_pre_hook

            self._waiting = register_module_forward_pre_hook(outside_compiled(self._module_called))

    def end_window(self) -> None:
        """The recorded iterations are over: no module call is watched any more."""
        for handle in (self._waiting, self._forwards, self._entering):
            if handle is not None:
                handle.remove()
        self._waiting = self._forwards = self._entering = None
        self._last = None

    def remove(self) -> None:
        self.end_window()
        for owner, name, original in reversed(self._patched):
            setattr(owner, name, original)
        self._patched = []
        self._mx.remove()
        self._conversion.remove()

    def _counting(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """torchao's ``convert_to_float8_training``, recording for each call how many
        ``nn.Linear`` layers the model had and how many became float8 layers."""
        observations = self._observations

        def convert(module: Any, *args: Any, **kwargs: Any) -> Any:
            linears = _count(module, lambda m: isinstance(m, torch.nn.Linear))
            site = user_site(skip=2)
            out = original(module, *args, **kwargs)
            if len(observations.float8_conversions) < _MAX_CONVERSIONS:
                converted = _count(out, lambda m: type(m).__name__ == "Float8Linear")
                observations.float8_conversions.append((site, linears, converted))
            return out

        convert.__wrapped__ = original  # type: ignore[attr-defined]
        return convert

    def _module_called(self, module: torch.nn.Module, inputs: Any) -> None:
        if _LINEAR_MODULE in sys.modules and self._patch():
            if self._waiting is not None:
                self._waiting.remove()
                self._waiting = None
            self._follow_forwards()

    def _follow_forwards(self) -> None:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        if self._forwards is None:
            self._forwards = register_module_forward_hook(outside_compiled(self._forward_done))
            self._entering = register_module_forward_pre_hook(outside_compiled(self._forward_starts))

    def _forward_starts(self, module: torch.nn.Module, args: Any) -> None:
        self._mx.module_starts(module)

    def _forward_done(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        self._mx.module_done(module, output)
        # A module with weights of its own, in a forward that trains: the head is the last one.
        if module._parameters and torch.is_grad_enabled():
            self._last = module
        if _is_float8_layer(module) and args and self._active() is not None:
            try:
                self._shadow(module, args[0], output)
            except Exception as exc:  # an instrument that fails leaves the training step alone
                errors = self._observations.instrument_errors
                if len(errors) < 8:
                    errors.append(f"float8 shadow of {self._name(module)}: {type(exc).__name__}: {exc}")

    def _shadow(self, module: torch.nn.Module, hp_input: Any, output: Any) -> None:
        """Compare the layer's output with the same layer in float32, from the same input and
        the same high-precision weight: what float8 cost this forward. Rows are compared one by
        one, so at most ``_SHADOW_ROWS`` of them, spread over the batch, stand for the rest (a
        float32 copy of a large layer's whole output could exhaust the memory the training step
        was sized to)."""
        weight: Any = getattr(module, "weight", None)
        bias: Any = getattr(module, "bias", None)
        if not all(type(t) in _PLAIN for t in (hp_input, output, weight)) or (
            bias is not None and type(bias) not in _PLAIN
        ):
            return  # a weight sharded or cast by FSDP's float8 all-gather: not one tensor here
        if hp_input.shape[:-1] != output.shape[:-1] or not output.numel() or hp_input.dim() < 1:
            return
        device = hp_input.device.type
        with torch.no_grad(), quiet(), autocast_off([device]):
            inputs = hp_input.reshape(-1, hp_input.shape[-1])
            step = -(-inputs.shape[0] // _SHADOW_ROWS)  # rows spread over the batch, not its start
            rows = inputs[::step].float()
            reference = torch.nn.functional.linear(rows, weight.float(), None if bias is None else bias.float())
            error = output.reshape(-1, output.shape[-1])[::step].float() - reference
            norms = torch.linalg.vector_norm(reference, dim=-1)
            errors = torch.linalg.vector_norm(error, dim=-1)
            kept = norms > 0  # a row of zeros has no relative error
            total = (errors[kept] / norms[kept]).sum()
            read = torch.stack([total, kept.sum().to(total.dtype)]).tolist()
        stats = self._observations.float8_shadows.setdefault(self._name(module), ShadowStats())
        stats.forwards += 1
        stats.error_sum += float(read[0])
        stats.rows += int(read[1])

    def _patch(self) -> bool:
        """Wrap torchao's cast and ``torch._scaled_mm`` once torchao's float8 linear is imported."""
        if self._patched:
            return True
        linear = sys.modules.get(_LINEAR_MODULE)
        cast = getattr(linear, _CAST, None)
        if linear is None or cast is None:
            return False
        self._patched.append((linear, _CAST, cast))
        setattr(linear, _CAST, self._wrap_cast(cast))
        self._observations.float8_imported = True
        scaled_mm = getattr(torch, "_scaled_mm", None)
        if scaled_mm is not None:
            self._patched.append((torch, "_scaled_mm", scaled_mm))
            torch._scaled_mm = self._wrap_mm(scaled_mm)
        return True

    def _active(self) -> Optional[OpCensus]:
        census = self._census()
        return census if census is not None and census.active and not census.failed else None

    def _wrap_cast(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def cast(hp_tensor: Any, float8_dtype: Any, *args: Any, **kwargs: Any) -> Any:
            out = original(hp_tensor, float8_dtype, *args, **kwargs)
            census = self._active()
            if census is not None:
                try:
                    self._record_cast(census, hp_tensor, float8_dtype, out, args, kwargs)
                except Exception as exc:  # an instrument that fails stops; the training goes on
                    census.fail(exc)
            return out

        return cast

    def _record_cast(
        self,
        census: OpCensus,
        hp: torch.Tensor,
        dtype: torch.dtype,
        out: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        data = getattr(out, "_data", None)
        scale = getattr(out, "_scale", None)
        if not isinstance(data, torch.Tensor) or not isinstance(scale, torch.Tensor) or data.shape != hp.shape:
            return
        role = kwargs.get("gemm_input_role", args[2] if len(args) > 2 else None)
        granularity = kwargs.get("scaling_granularity", args[4] if len(args) > 4 else None)
        key = (census.current_module(), _name(role, "input"))
        with torch.no_grad(), quiet():  # the census counts the training step's ops, not these
            nonzero = hp != 0
            # float8 zeros are 0x00 and 0x80 (sign and magnitude): read the bits, not the values.
            zero = (data.view(torch.uint8) & 0x7F) == 0
            # On the scaled tensor, before the cast clips it (a float32 rounding of the largest
            # value is not a clip).
            largest = torch.finfo(data.dtype).max
            limit = largest * (1 + _CLIP_TOLERANCE)
            flushed = nonzero & zero
            if _scales(scale, hp):
                clipped = ((hp.detach().float().abs() * scale.float()) > limit).sum()
                # The scale at its ceiling: the group's amax was under torchao's floor.
                ceiling = largest / _amax_floor() * (1 - _CLIP_TOLERANCE)
                floored = (flushed & (scale.float() >= ceiling)).sum()
            else:  # a scale laid out other than torchao's: not counted
                clipped = floored = torch.zeros((), dtype=torch.long, device=hp.device)
            unusable = (~torch.isfinite(scale) | (scale == 0)).any().long()
            counts = torch.stack([nonzero.sum(), flushed.sum(), unusable, clipped, floored])
            read = counts.tolist()  # one read per cast, in the recorded iterations only
        self.tally(key, str(dtype).replace("torch.", ""), _name(granularity, "tensorwise"), read)

    def tally(self, key: CastKey, dtype: str, granularity: str, read: list[int]) -> None:
        """Add one cast to its layer's and role's counts: ``read`` is [non-zero values, of them
        flushed, whether the scale was unusable, values clipped, values flushed under the amax
        floor] (the last two may be left out)."""
        census = self._active()
        if census is not None and census.phase() == "backward" and self._last is not None:
            # The first backward of the recorded iterations: the forward's last layer is known.
            if self._observations.float8_last_layer is None:
                self._observations.float8_last_layer = self._name(self._last)
            self._last = None
        casts = self._observations.float8_casts
        stats = casts.get(key)
        if stats is None:
            stats = casts[key] = CastStats(dtype, granularity)
        stats.casts += 1
        stats.nonzero += int(read[0])
        stats.flushed += int(read[1])
        stats.nonfinite_scales += int(read[2])
        self._casts += 1
        if read[2] and stats.first_unusable is None:
            stats.first_unusable = self._casts
        if len(read) > 3:
            stats.clipped += int(read[3])
            stats.floored += int(read[4])
        stats.zero_casts += int(read[0]) == 0

    def _wrap_mm(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def scaled_mm(a: Any, b: Any, *args: Any, **kwargs: Any) -> Any:
            census = self._active()
            if census is not None and isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
                key = (census.current_module(), census.phase(), tuple(a.shape), tuple(b.shape))
                gemms: Counter[Float8GemmKey] = self._observations.float8_gemms
                gemms[key] += 1
            return original(a, b, *args, **kwargs)

        return scaled_mm


def _scales(scale: torch.Tensor, hp: torch.Tensor) -> bool:
    """Whether ``scale`` applies to ``hp`` element by element (it broadcasts to its shape)."""
    if scale.dim() > hp.dim():
        return False
    return all(s in (1, h) for s, h in zip(reversed(scale.shape), reversed(hp.shape)))


def _is_float8_layer(module: torch.nn.Module) -> bool:
    """A layer whose GEMMs torchao runs in float8: a ``Float8Linear``, or a layer whose weight
    ``quantize_`` wrapped for float8 training (its linear then runs torchao's float8 GEMMs)."""
    return type(module).__name__ == _FLOAT8_LINEAR or type(module._parameters.get("weight")).__name__ == _FLOAT8_WEIGHT


# torchao's floor under an amax (``float8_utils.EPS``), read from torchao where it is loaded.
_AMAX_FLOOR = 1e-12


def _amax_floor() -> float:
    floor = getattr(sys.modules.get("torchao.float8.float8_utils"), "EPS", _AMAX_FLOOR)
    return float(floor) if isinstance(floor, (int, float)) and floor > 0 else _AMAX_FLOOR


def _count(module: Any, kind: Callable[[torch.nn.Module], bool]) -> int:
    modules = getattr(module, "modules", None)
    return sum(1 for m in modules() if kind(m)) if callable(modules) else 0


def _name(value: Any, default: str) -> str:
    """An enum member's name in lower case (``GemmInputRole.GRAD_OUTPUT`` → ``grad_output``)."""
    name = getattr(value, "name", None)
    return name.lower() if isinstance(name, str) else default


# float8 GEMMs on the GPU (``torch._scaled_mm``) need the first operand's columns and both
# dimensions of the second divisible by this (the first operand's rows, the tokens, may be any).
FLOAT8_ALIGNMENT = 16


def unaligned(first: tuple[int, ...], second: tuple[int, ...]) -> bool:
    """Whether a float8 GEMM of these operand shapes is one the GPU kernels refuse."""
    return bool(first[-1] % FLOAT8_ALIGNMENT) or any(size % FLOAT8_ALIGNMENT for size in second[-2:])
