"""Does this machine have fast float16/bfloat16 arithmetic? (AMP514)

CUDA: tensor cores run float16 from compute capability 7.0 (Volta) and bfloat16 from 8.0
(Ampere); below that, autocast still casts, and the casts cost time that nothing pays back.

CPU: torch's own kernels are chosen by ``torch.backends.cpu.get_cpu_capability()`` (what the
build and the operating system allow), and oneDNN's low-precision matmuls by the instruction set:
bfloat16 needs AVX512-BF16 or AMX-BF16, float16 AVX512-FP16 or AMX-FP16 (x86), ``bf16`` /
``fphp`` on Arm. Without them low-precision matmuls are emulated, and mixed precision is slower
than float32, often many times slower. The capability, the flags and oneDNN's instruction-set
ceiling (``ONEDNN_MAX_CPU_ISA``) are all read: a CPU may list a flag that the capability in use
does not reach.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field
from typing import Any, Optional

# Instruction-set flags (as /proc/cpuinfo names them) that make each dtype fast.
_X86_FAST = {
    "bfloat16": ("avx512_bf16", "amx_bf16"),
    "float16": ("avx512_fp16", "amx_fp16"),
}
_ARM_FAST = {"bfloat16": ("bf16",), "float16": ("fphp", "asimdhp")}
# The compute capability whose tensor cores run each dtype's GEMMs (float8: Ada and Hopper on).
CUDA_MIN = {"float16": (7, 0), "bfloat16": (8, 0), "float8": (8, 9), "mxfp8": (10, 0)}


@dataclass
class Hardware:
    """What one device offers for one low-precision dtype."""

    device: str  # "cpu" or "cuda"
    name: str
    dtype: str
    fast: bool
    # CPU: torch's capability and the relevant flags found; CUDA: (major, minor).
    capability: Optional[str] = None
    flags: list[str] = field(default_factory=list)
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "name": self.name,
            "dtype": self.dtype,
            "fast": self.fast,
            "capability": self.capability,
            "flags": list(self.flags),
            "reason": self.reason,
        }


def _cpuinfo() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def cpu_model() -> str:
    for line in _cpuinfo().splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == "model name":
            return value.strip()
    return platform.processor() or platform.machine()


def cpu_flags(cpuinfo_text: Optional[str] = None) -> set[str]:
    """The CPU's feature flags (``flags`` on x86, ``Features`` on Arm) from /proc/cpuinfo."""
    if cpuinfo_text is None:
        cpuinfo_text = _cpuinfo()
    for line in cpuinfo_text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in ("flags", "features"):
            return set(value.split())
    return set()


def onednn_isa_limit() -> str:
    """oneDNN's instruction-set ceiling (``ONEDNN_MAX_CPU_ISA``, formerly ``DNNL_MAX_CPU_ISA``)."""
    return (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "ALL").upper()


def _isa_allows(isa: str, dtype: str) -> bool:
    if isa in ("", "ALL") or "AVX10" in isa:
        return True
    if dtype == "float16":
        return "FP16" in isa
    return "BF16" in isa or "AMX" in isa or "FP16" in isa


def cpu_hardware(
    dtype: str,
    capability: Optional[str] = None,
    flags: Optional[set[str]] = None,
    machine: Optional[str] = None,
    name: Optional[str] = None,
    isa_limit: Optional[str] = None,
) -> Hardware:
    """Whether this CPU runs ``dtype`` matmuls in hardware (arguments override what is read)."""
    if capability is None:
        import torch

        capability = torch.backends.cpu.get_cpu_capability()
    flags = cpu_flags() if flags is None else flags
    machine = (machine or platform.machine()).lower()
    name = name or cpu_model()
    arm = machine in ("aarch64", "arm64")
    wanted = (_ARM_FAST if arm else _X86_FAST).get(dtype, ())
    found = sorted(flag for flag in wanted if flag in flags)
    isa = onednn_isa_limit() if isa_limit is None else isa_limit
    if arm:
        fast = bool(found)
    else:
        # torch and oneDNN use these instructions only with AVX512 in reach.
        fast = bool(found) and capability == "AVX512" and _isa_allows(isa, dtype)
    needed = " or ".join(flag.upper().replace("_", "-") for flag in wanted) or "hardware support"
    if fast:
        reason = f"the CPU has {', '.join(found)} (torch capability {capability})"
    elif found and capability == "AVX512":
        reason = f"the CPU lists {', '.join(found)} but ONEDNN_MAX_CPU_ISA={isa} keeps oneDNN from them"
    elif found:
        reason = f"the CPU lists {', '.join(found)} but torch runs at capability {capability}, which does not use them"
    else:
        reason = f"the CPU has no {needed} (torch capability {capability})"
    return Hardware("cpu", name, dtype, fast, capability, found, reason)


def cuda_hardware(
    dtype: str, capability: Optional[tuple[int, int]] = None, name: Optional[str] = None, index: int = 0
) -> Hardware:
    """Whether CUDA device ``index`` has tensor cores for ``dtype``."""
    if capability is None or name is None:
        import torch

        capability = capability or torch.cuda.get_device_capability(index)
        name = name or torch.cuda.get_device_name(index)
    minimum = CUDA_MIN.get(dtype, (7, 0))
    fast = tuple(capability) >= minimum
    text = f"{capability[0]}.{capability[1]}"
    need = f"{minimum[0]}.{minimum[1]}"
    reason = (
        f"{name} has compute capability {text} (tensor cores for {dtype} from {need})"
        if fast
        else f"{name} has compute capability {text}; {dtype} tensor cores need {need} or newer"
    )
    return Hardware("cuda", name, dtype, fast, text, [], reason)


# Set to ``tensor-cores`` to judge a run as if it ran where GEMMs have tiled units (tensor cores,
# AMX): a trace on a CPU box of a script meant for a GPU then gets the GPU's advice (AMP512's
# padding) and not the CPU's (AMP514).
ASSUME_VARIABLE = "AMPDOCTOR_ASSUME_HARDWARE"
TENSOR_CORES = "tensor-cores"


def hardware_for(device: str, dtype: str) -> Optional[Hardware]:
    """The hardware verdict for an autocast region's device type and dtype; None when unknown."""
    assumed = os.environ.get(ASSUME_VARIABLE, "").strip().lower()
    if assumed == TENSOR_CORES:
        reason = f"assumed by {ASSUME_VARIABLE}={TENSOR_CORES}: {dtype} matmuls run on tensor cores or AMX tiles"
        return Hardware(device, "assumed hardware", dtype, True, "assumed", [TENSOR_CORES], reason)
    try:
        if device == "cpu":
            return cpu_hardware(dtype)
        if device == "cuda":
            import torch

            if torch.cuda.is_available():
                return cuda_hardware(dtype)
    except Exception:  # an odd platform must not break the report
        return None
    return None
