"""MXFP8 training with torchao, seen at run time: what each layer's MX casts lose.

``quantize_(model, MXFP8TrainingOpConfig(...))`` leaves the model's ``nn.Linear`` layers in
place and wraps their weights (``MXFP8TrainingWeightWrapperTensor``), whose linear runs torchao's
autograd function ``mx_mm``: it casts the input and the weight in the forward, the output
gradient, the weight and the input again in the backward, each with ``MXTensor.to_mx``: one
power-of-two scale (e8m0) per block of 32 values along a row, so a value flushes to zero only
when it lies about 2**17 below its block's largest. The same counts as for torchao's float8
layers (``float8.py``) go into the observations' float8 casts, so that AMP515 and AMP521 and the
float8 tables read them alike, with the granularity ``block32``.

``to_mx`` is not told which operand it casts. The wrapped ``mx_mm`` hands over its operands (the
forward's input and weight; in the backward the output gradient and the tensors it saved); a
cast is of the operand that shares its storage, or, for the backward's copies, of the one it
equals or whose transpose it equals. The layer is the op census's module (``ops.py``), in the
backward the one whose forward made the running node. A cast of anything else (a later
torchao's) is not counted rather than guessed. Installed and removed with the float8 watch
(``Float8Watch`` calls ``module_starts``/``module_done`` and ``patch``), measuring only while
the op census runs; torchao is never imported here.

It also checks that each MX layer's bias takes part in its output: torchao 0.18's MX linear
override computes ``input @ weight.T`` and leaves out the bias ``F.linear`` was given, so a
layer built with one trains without it (AMP522).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable, Optional

import torch

from .ops import quiet

if TYPE_CHECKING:
    from .observations import CastKey, Observations
    from .ops import OpCensus

# Where torchao defines MXFP8 training's autograd function and the MX tensor's cast.
_GEMM_MODULE = "torchao.prototype.moe_training.mxfp8_linear"
_GEMM = "mx_mm"
_TENSOR_MODULE = "torchao.prototype.mx_formats.mx_tensor"
_TENSOR = "MXTensor"
_CAST = "to_mx"
# The wrapped weight of a layer converted to MXFP8 training, by its class's name.
_WEIGHT = "MXFP8TrainingWeightWrapperTensor"
# The e8m0 scale's NaN: all exponent bits set.
_E8M0_NAN = 0xFF
_FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)
# Where ``mx_mm.forward``'s kernel preference comes, after its input and weight.
_PREFERENCE = 4
# How far, and how wide, the search for a layer's bias under its output goes.
_BIAS_DEPTH = 4
_BIAS_BREADTH = 16
# Layers whose dropped bias is recorded (a model has a few dozen kinds at most).
_MAX_LAYERS = 256

Tally = Callable[["CastKey", str, str, list[int]], None]


class MXWatch:
    """``census()`` the active op census (None: nothing is measured), ``name(module)`` a
    module's path, ``tally`` the float8 watch's count of one cast."""

    def __init__(
        self,
        census: Callable[[], Optional[OpCensus]],
        name: Callable[[torch.nn.Module], str],
        tally: Tally,
        observations: Observations,
    ) -> None:
        self._census = census
        self._name = name
        self._tally = tally
        self._observations = observations
        # The operands, by role, of the ``mx_mm`` call running.
        self._gemm: Optional[dict[str, torch.Tensor]] = None
        self._patched: list[tuple[Any, str, Any]] = []  # (owner, attribute, original)

    def module_starts(self, module: torch.nn.Module) -> None:
        if not self._patched and _GEMM_MODULE in sys.modules:
            self.patch()

    def module_done(self, module: torch.nn.Module, output: Any) -> None:
        if not self._patched or type(module._parameters.get("weight")).__name__ != _WEIGHT:
            return
        layer = self._name(module)
        bias = module._parameters.get("bias")
        dropped = self._observations.mx_bias_dropped
        if bias is None or not bias.requires_grad or layer in dropped or self._active() is None:
            return
        if len(dropped) < _MAX_LAYERS and not _in_graph(getattr(output, "grad_fn", None), bias):
            dropped.append(layer)

    def patch(self) -> None:
        gemm = getattr(sys.modules.get(_GEMM_MODULE), _GEMM, None)
        tensor = getattr(sys.modules.get(_TENSOR_MODULE), _TENSOR, None)
        if gemm is None or tensor is None or self._patched:
            return
        forward, backward = gemm.__dict__.get("forward"), gemm.__dict__.get("backward")
        cast = tensor.__dict__.get(_CAST)
        if not all(isinstance(f, staticmethod) for f in (forward, backward, cast)):
            return  # a torchao laid out otherwise: nothing is wrapped
        for owner, attribute, original, wrapper in (
            (gemm, "forward", forward, self._wrap_forward(forward.__func__)),
            (gemm, "backward", backward, self._wrap_backward(backward.__func__)),
            (tensor, _CAST, cast, self._wrap_cast(cast.__func__)),
        ):
            self._patched.append((owner, attribute, original))
            setattr(owner, attribute, staticmethod(wrapper))

    def remove(self) -> None:
        for owner, attribute, original in reversed(self._patched):
            setattr(owner, attribute, original)
        self._patched = []
        self._gemm = None

    def _active(self) -> Optional[OpCensus]:
        census = self._census()
        return census if census is not None and census.active and not census.failed else None

    def _wrap_forward(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def forward(ctx: Any, input_hp: Any, weight_hp: Any, *args: Any) -> Any:
            if self._active() is None:
                return original(ctx, input_hp, weight_hp, *args)
            if self._observations.mx_device is None and isinstance(input_hp, torch.Tensor):
                # (the GEMMs' device and kernels, for a run that dies of them: AMP519)
                preference = args[_PREFERENCE] if len(args) > _PREFERENCE else None
                name = getattr(preference, "name", None)
                device = input_hp.device
                self._observations.mx_device = (device.type, device.index, name if isinstance(name, str) else "")
            outer, self._gemm = self._gemm, {"input": input_hp, "weight": weight_hp}
            try:
                return original(ctx, input_hp, weight_hp, *args)
            finally:
                self._gemm = outer

        return forward

    def _wrap_backward(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def backward(ctx: Any, grad_output: Any) -> Any:
            if self._active() is None:
                return original(ctx, grad_output)
            input_hp, weight_hp = ctx.saved_tensors
            operands = {"grad_output": grad_output, "weight": weight_hp, "input": input_hp}
            outer, self._gemm = self._gemm, operands
            try:
                return original(ctx, grad_output)
            finally:
                self._gemm = outer

        return backward

    def _wrap_cast(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def to_mx(data_hp: Any, elem_dtype: Any, *args: Any, **kwargs: Any) -> Any:
            gemm = self._gemm
            try:
                out = original(data_hp, elem_dtype, *args, **kwargs)
            except Exception:  # a size the blocks do not divide: the layer, for the report
                census = self._active()
                if census is not None and self._observations.mx_refused is None and isinstance(data_hp, torch.Tensor):
                    self._observations.mx_refused = (census.current_module(), tuple(data_hp.shape))
                raise
            census = self._active()
            if census is not None and gemm is not None and isinstance(data_hp, torch.Tensor):
                try:
                    self._record(census.current_module(), gemm, data_hp, out)
                except Exception as exc:  # an instrument that fails stops; the training goes on
                    census.fail(exc)
            return out

        return to_mx

    def _record(self, layer: Optional[str], operands: dict[str, torch.Tensor], hp: torch.Tensor, out: Any) -> None:
        data = getattr(out, "qdata", None)
        scale = getattr(out, "scale", None)
        if not isinstance(data, torch.Tensor) or not isinstance(scale, torch.Tensor):
            return
        if data.dtype not in _FLOAT8 or data.shape != hp.shape:
            return  # packed four-bit elements: not counted here
        with torch.no_grad(), quiet():  # the census counts the training step's ops, not these
            role = _role(hp, operands)
            if role is None:
                return
            nonzero = hp != 0
            zero = (data.view(torch.uint8) & 0x7F) == 0  # +0 and -0
            if "e8m0" in str(scale.dtype):
                unusable = (scale.view(torch.uint8) == _E8M0_NAN).any()
            else:
                unusable = (~torch.isfinite(scale.float())).any()
            read = torch.stack([nonzero.sum(), (nonzero & zero).sum(), unusable.long()]).tolist()
        block = getattr(out, "block_size", 32)
        self._tally((layer, role), str(data.dtype).replace("torch.", ""), f"block{block}", read)


def _role(hp: torch.Tensor, operands: dict[str, torch.Tensor]) -> Optional[str]:
    """Which operand ``hp`` is: the one whose storage it views, else the one it equals or whose
    transpose it equals (the backward casts copies: a contiguous one of a strided gradient, and
    transposed ones along the other dimension)."""
    try:
        storage = hp.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # a tensor without storage of its own
        return None
    for role, tensor in operands.items():
        if isinstance(tensor, torch.Tensor) and _storage(tensor) == storage:
            return role
    if hp.dim() != 2:
        return None
    for role, tensor in operands.items():
        if not isinstance(tensor, torch.Tensor) or tensor.dim() < 1:
            continue
        rows = tensor.reshape(-1, tensor.shape[-1])
        if rows.shape == hp.shape and torch.equal(rows, hp):
            return role
        if rows.shape[::-1] == hp.shape and torch.equal(rows.t(), hp):
            return role
    return None


def _in_graph(node: Any, parameter: torch.Tensor) -> bool:
    """Whether the gradient of an output whose autograd node is ``node`` reaches ``parameter``
    within a few nodes (a layer's bias is added last: its accumulator lies right under the
    output, or under a cast of it)."""
    nodes = [node]
    for _ in range(_BIAS_DEPTH):
        below: list[Any] = []
        for current in nodes:
            if current is None:
                continue
            if getattr(current, "variable", None) is parameter:
                return True
            below.extend(n for n, _ in current.next_functions)
        if not below:
            return False
        nodes = below[:_BIAS_BREADTH]
    return False


def _storage(tensor: torch.Tensor) -> Optional[int]:
    try:
        return int(tensor.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return None
