"""The vocabulary of the fact model: the torch names that matter to mixed precision, the dtypes,
float16's limits, and the enumerations the model's records use.

Plain data with no import beyond the standard library, so that the text gate (textscan) and the
rules' declarations can use it without loading the walk.
"""

from __future__ import annotations

import enum

AUTOCAST_NAMES = {
    "torch.autocast": None,
    "torch.amp.autocast": None,
    "torch.amp.autocast_mode.autocast": None,
    "torch.cuda.amp.autocast": "cuda",
    "torch.cuda.amp.autocast_mode.autocast": "cuda",
    "torch.cpu.amp.autocast": "cpu",
    "torch.cpu.amp.autocast_mode.autocast": "cpu",
}
GRAD_SCALER_NAMES = {
    "torch.amp.GradScaler": None,
    "torch.amp.grad_scaler.GradScaler": None,
    "torch.cuda.amp.GradScaler": "cuda",
    "torch.cuda.amp.grad_scaler.GradScaler": "cuda",
    "torch.cpu.amp.GradScaler": "cpu",
    "torch.cpu.amp.grad_scaler.GradScaler": "cpu",
    "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler": None,
    "torch.distributed.fsdp.ShardedGradScaler": None,
}
CUSTOM_FWD_NAMES = {
    "torch.amp.custom_fwd",
    "torch.cuda.amp.custom_fwd",
    "torch.amp.autocast_mode.custom_fwd",
}
CLIP_NAMES = {
    "torch.nn.utils.clip_grad_norm_": "norm",
    "torch.nn.utils.clip_grad.clip_grad_norm_": "norm",
    "torch.nn.utils.clip_grad_norm": "norm",
    "torch.nn.utils.clip_grad_value_": "value",
    "torch.nn.utils.clip_grad.clip_grad_value_": "value",
}
AUTOGRAD_BACKWARD = {"torch.autograd.backward"}
DTYPES = {
    "torch.float16": "float16",
    "torch.half": "float16",
    "torch.bfloat16": "bfloat16",
    "torch.float32": "float32",
    "torch.float": "float32",
    "torch.float64": "float64",
    "torch.double": "float64",
}
# float16's largest finite value and its smallest subnormal (what is nonzero below it is lost).
# The methods by which a ``torch.nn.Module`` subclass decides what its ``state_dict()`` holds.
STATE_METHODS = ("state_dict", "get_extra_state")

from ..float16 import FLOAT16_MAX as FLOAT16_MAX  # noqa: E402  (one definition for both halves)
from ..float16 import FLOAT16_SMALLEST_SUBNORMAL  # noqa: E402

FLOAT16_SMALLEST = FLOAT16_SMALLEST_SUBNORMAL

# Calls whose arguments are fill values or clamp bounds.
FILL_CALLS = frozenset(
    {
        "masked_fill",
        "masked_fill_",
        "fill_",
        "full",
        "full_like",
        "new_full",
        "where",
        "clamp",
        "clamp_",
        "clip",
        "clip_",
        "clamp_min",
        "clamp_max",
    }
)
# What a tensor is converted to float16 with: ``.to(X)``, ``.type(X)``, ``dtype=X``.
FLOAT16_CASTS = ("torch.float16", "torch.half", "torch.HalfTensor", "torch.cuda.HalfTensor")
HALF_TENSOR_TYPES = {
    "torch.HalfTensor": "float16",
    "torch.cuda.HalfTensor": "float16",
    "torch.BFloat16Tensor": "bfloat16",
    "torch.cuda.BFloat16Tensor": "bfloat16",
}


class Enabled(str, enum.Enum):
    ON = "on"
    OFF = "off"
    MAYBE = "maybe"

    @property
    def counts_as_on(self) -> bool:
        return self is not Enabled.OFF


class EventKind(str, enum.Enum):
    BACKWARD = "backward"
    SCALED_BACKWARD = "scaled_backward"
    # ``optimizer.backward(loss)``, ``model_engine.backward(loss)``: a framework scales the loss.
    DELEGATED_BACKWARD = "delegated_backward"
    UNSCALE = "unscale"
    CLIP = "clip"
    SCALER_STEP = "scaler_step"
    OPTIMIZER_STEP = "optimizer_step"
    UPDATE = "update"
    ZERO_GRAD = "zero_grad"
    SCALER_NEW = "scaler_new"
