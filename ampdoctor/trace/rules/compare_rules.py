"""Why mixed precision is not paying off: AMP512, AMP513, AMP514, and AMP507's share of GEMM time.

These rules are registered in the scope "compare": they take the observations, the
``Comparison``, the profile (profile.ProfileShares or None), the hardware verdicts, the
thresholds and a locator. They run in the mixed-precision run of ``--compare float32`` once the
comparison says the speed-up is under ``compare_speedup`` or the memory saving under
``compare_memory_saving``, and their findings are ranked by the share of time each cause costs
(from ``torch.profiler`` over the profiled iterations, attributed to the census's modules by
profile.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from ...findings import Finding
from ..compare.comparison import LOW_PRECISION, Cause, Comparison
from ..compare.hardware import Hardware
from ..compare.profile import ProfileShares, gemm_time_by_module
from ..observations import Observations
from ..opnames import CONVOLUTION_OPS
from ..rulebase import Locator, Thresholds, make_finding, module_location, registered, rule

if TYPE_CHECKING:
    from ...findings import Location
    from ..compare.profile import Shapes
    from ..ops import GemmKey

ALIGNMENT = 8
# Dimensions below this are not worth padding (a 3-channel image, a 2-class head).
SMALL_DIMENSION = 16


def gemm_dimensions(op: str, shapes: Shapes) -> Optional[dict[str, int]]:
    """The dimensions that tensor cores want in multiples of 8: M, N, K of a matmul, input and
    output channels of a convolution; None for ops without such a reading (attention, mv)."""
    try:
        if op in ("mm",) and len(shapes) >= 2:
            (m, k), (_, n) = shapes[0], shapes[1]
        elif op in ("addmm",) and len(shapes) >= 3:
            (m, k), (_, n) = shapes[-2], shapes[-1]
        elif op == "bmm" and len(shapes) >= 2:
            (_, m, k), (_, _, n) = shapes[0], shapes[1]
        elif op in ("baddbmm",) and len(shapes) >= 3:
            (_, m, k), (_, _, n) = shapes[-2], shapes[-1]
        elif op in CONVOLUTION_OPS and len(shapes) >= 2:
            weight = shapes[1]
            return {"out_channels": weight[0], "in_channels": shapes[0][1]}
        else:
            return None
    except (ValueError, IndexError, TypeError):
        return None
    return {"M": m, "N": n, "K": k}


def misaligned(dims: dict[str, int]) -> dict[str, int]:
    return {name: size for name, size in dims.items() if size >= SMALL_DIMENSION and size % ALIGNMENT}


def padded(size: int) -> str:
    """What to pad a dimension to: the next multiple of 8, and of 64 where that differs and the
    dimension is large (a vocabulary of 50257: 50264, better 50304)."""
    to8 = -(-size // 8) * 8
    to64 = -(-size // 64) * 64
    if size >= 1024 and to64 != to8:
        return f"{to8} (a multiple of 8) or {to64} (of 64)"
    return f"{to8}"


def _aligned_units(hw: Hardware) -> bool:
    """Whether the device has units that want GEMM sizes in multiples of 8: tensor cores (CUDA
    from 7.0), AMX tiles (``amx_bf16``/``amx_fp16``), or hardware assumed to have them
    (``hardware.ASSUME_VARIABLE``)."""
    if not hw.fast:
        return False
    return hw.device == "cuda" or any(flag.startswith("amx") or flag == "tensor-cores" for flag in hw.flags)


def _low_precision_gemms(observations: Observations) -> dict[GemmKey, int]:
    return {key: count for key, count in observations.gemms.items() if key[3] in LOW_PRECISION}


def _share_text(share: Optional[float], basis: str) -> str:
    return f"{share:.0%} of {basis}" if share is not None else f"share of {basis} not measured"


@dataclass(frozen=True)
class Compared:
    """``--compare float32`` as the mixed-precision run's findings see it: the comparison of the
    two runs, this run's profile (None where profiling failed) and the hardware of its autocast
    dtypes (``compare_child.py`` makes it; ``rules.evaluate`` takes it)."""

    comparison: Comparison
    profile: Optional[ProfileShares]
    hardware: list[Hardware]


def evaluate_compare(
    observations: Observations, compared: Compared, thresholds: Thresholds, locator: Locator
) -> list[Finding]:
    """The findings that explain a mixed-precision run that does not pay off, ranked by share."""
    comparison = compared.comparison
    if not comparison.compared or comparison.paying_off is not False:
        return []
    if comparison.against != "float32":
        return []  # AMP512-AMP514 explain low precision against float32, not float8 against bfloat16
    findings = [
        finding
        for entry in registered("compare")
        for finding in entry.check(observations, comparison, compared.profile, compared.hardware, thresholds, locator)
    ]
    # The hardware first: without fast arithmetic nothing else the causes name can pay off.
    findings.sort(key=lambda f: (f.code != "AMP514", -(f.extra.get("time_share") or 0.0)))
    comparison.causes = [
        Cause(f.code, f.extra.get("time_share"), f.extra.get("share_of", "iteration time"), f.extra.get("module"))
        for f in findings
    ]
    return findings


def _gemm_seconds(profile: Optional[ProfileShares], observations: Observations) -> dict[Optional[str], float]:
    if profile is None:
        return {}
    return gemm_time_by_module(profile, dict(observations.gemms))


@rule("AMP514", scope="compare")
def no_fast_hardware(
    observations: Observations,
    comparison: Comparison,
    profile: Optional[ProfileShares],
    hardware: list[Hardware],
    thresholds: Thresholds,
    locator: Locator,
) -> Iterator[Finding]:
    slow = [hw for hw in hardware if not hw.fast]
    if not slow:
        return
    share = profile.share(profile.gemm_seconds) if profile is not None else None
    for hw in slow:
        what = "slower than" if comparison.speedup is not None and comparison.speedup < 1 else "no faster than"
        message = (
            f"{hw.dtype} autocast on {hw.device} ({hw.name}): {hw.reason}, so {hw.dtype} matmuls are "
            f"emulated and this run is {what} float32"
        )
        if comparison.speedup is not None and comparison.speedup > 0:
            message += f" ({_ratio_words(comparison.speedup)})"
        message += f"; matmul-class ops took {_share_text(share, 'iteration time')} of the mixed-precision run."
        yield make_finding(
            "AMP514",
            message,
            _autocast_location(observations, hw.dtype, locator),
            _hardware_help(hw),
            device=hw.device,
            dtype=hw.dtype,
            hardware=hw.to_dict(),
            time_share=share,
            share_of="iteration time",
        )


@rule("AMP514")
def no_fast_hardware_seen(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    """Every trace: an autocast dtype the device has no fast arithmetic for (a cheap check of
    the hardware). Without ``--compare`` nothing measured the slow-down, so it is said as what
    to expect, at severity info; ``--compare`` replaces it with the measured finding."""
    import os

    from ...severity import Severity
    from ..compare.hardware import hardware_for

    if os.environ.get("AMPDOCTOR_HARDWARE_CHECK", "1") == "0":
        return  # a CI that traces on a CPU for correctness, not speed, turns the note off
    for device, dtype in sorted(observations.autocast_dtypes):
        if dtype not in LOW_PRECISION:
            continue
        hw = hardware_for(device, dtype)
        if hw is None or hw.fast:
            continue
        finding = make_finding(
            "AMP514",
            f"{dtype} autocast on {device} ({hw.name}): {hw.reason}, so {dtype} matmuls are emulated and "
            "likely slower than float32 (`ampdoctor trace --compare float32` measures by how much)",
            _autocast_location(observations, dtype, locator),
            _hardware_help(hw),
            device=device,
            dtype=dtype,
            hardware=hw.to_dict(),
        )
        yield finding.replace(severity=Severity.INFO)


def _hardware_help(hw: Hardware) -> str:
    if hw.device == "cuda":
        return (
            "Use float16 autocast with a GradScaler on a GPU below compute capability 8.0 (bfloat16 "
            "needs Ampere or newer), or train in float32 on a GPU without tensor cores (below 7.0)."
        )
    return (
        f"Train in float32 on this CPU (drop the {hw.dtype} autocast or enable it only where "
        f"the hardware has {'AVX512-BF16/AMX' if hw.dtype == 'bfloat16' else 'AVX512-FP16/AMX-FP16'}), "
        "or run mixed precision on a GPU with tensor cores."
    )


def _autocast_location(observations: Observations, dtype: str, locator: Locator) -> Location:
    """The autocast region that chose ``dtype`` (the training step's), else the first matmul in it."""
    from ...findings import Location

    site = observations.autocast_sites.get(dtype)
    if site is not None:
        return Location(site[0], site[1])
    return _first_low_precision_matmul(observations, dtype) or locator.location()


@rule("AMP512", scope="compare")
def gemm_not_aligned(
    observations: Observations,
    comparison: Comparison,
    profile: Optional[ProfileShares],
    hardware: list[Hardware],
    thresholds: Thresholds,
    locator: Locator,
) -> Iterator[Finding]:
    if not any(_aligned_units(hw) for hw in hardware):
        return  # no tensor cores or AMX tiles: the sizes do not choose the kernel
    seconds = _gemm_seconds(profile, observations)
    total = sum(seconds.values())
    per_module: dict[Optional[str], dict[tuple[str, Shapes], dict[str, int]]] = defaultdict(dict)
    flops: dict[Optional[str], float] = defaultdict(float)
    shapes: Any  # a GEMM's input shapes here, then a module's misaligned GEMMs below
    for (module, op, phase, _dtype, shapes), count in _low_precision_gemms(observations).items():
        dims = gemm_dimensions(op, shapes)
        if dims and phase == "forward":
            bad = misaligned(dims)
            if bad:
                per_module[module][(op, shapes)] = bad
        if dims and "M" in dims:
            flops[module] += 2.0 * dims["M"] * dims["N"] * dims["K"] * count
    for module, shapes in per_module.items():
        share: Optional[float]
        if total > 0:
            share, basis = seconds.get(module, 0.0) / total, "GEMM time"
        else:  # no profile: the module's share of the GEMM arithmetic
            all_flops = sum(flops.values())
            share, basis = (flops[module] / all_flops if all_flops else None), "GEMM arithmetic"
        if share is not None and share < thresholds.align_share:
            continue
        described = []
        fixes = {}
        for (op, op_shapes), bad in shapes.items():
            sizes = " x ".join(str(list(s)) for s in op_shapes)
            described.append(f"{op} {sizes} ({', '.join(f'{n}={v}' for n, v in bad.items())})")
            for size in bad.values():
                fixes[size] = padded(size)
        label = f"`{module}`" if module else "code outside any module"
        message = (
            f"{label} runs low-precision GEMMs whose dimensions are not multiples of {ALIGNMENT}: "
            f"{'; '.join(described[:3])}; {_share_text(share, basis)}."
        )
        help = (
            "Tensor cores (and AMX tiles) take GEMM dimensions in multiples of 8; others fall back to "
            "slower kernels or padding on every call. Pad the sizes you choose: "
            + ", ".join(f"{size} to {to}" for size, to in sorted(fixes.items()))
            + " (hidden sizes, vocabulary, channels; batch x sequence for M)."
        )
        yield make_finding(
            "AMP512",
            message,
            module_location(locator, observations, module),
            help,
            module=module,
            ops={op: 1 for op, _ in shapes},
            time_share=share,
            share_of=basis,
            shapes=[
                {"op": op, "shapes": [list(s) for s in op_shapes], "misaligned": bad}
                for (op, op_shapes), bad in shapes.items()
            ],
        )


@rule("AMP513", scope="compare")
def cast_overhead(
    observations: Observations,
    comparison: Comparison,
    profile: Optional[ProfileShares],
    hardware: list[Hardware],
    thresholds: Thresholds,
    locator: Locator,
) -> Iterator[Finding]:
    """Conversions above ``cast_share`` of iteration time, reported where some of them can be
    avoided: autocast entered several times per optimizer step (each entry re-casts every
    weight), or float64 data converted. One cast of each weight per step is autocast's price."""
    regions_per_step = comparison.mixed.regions_per_step
    if profile is None or profile.wall_seconds <= 0:
        return
    share = profile.share(profile.cast_seconds)
    if share is None or share < thresholds.cast_share:
        return
    steps = max(observations.op_steps, 1)
    conversions: dict[tuple[Optional[str], str, str], int] = defaultdict(int)
    for key, count in observations.ops.items():
        if key.op == "_to_copy" and key.input_dtypes and key.output_dtype and key.input_dtypes[0] != key.output_dtype:
            conversions[(key.module, key.input_dtypes[0], key.output_dtype)] += count
    per_micro_step = regions_per_step is not None and regions_per_step >= 1.5
    float64 = [key for key in conversions if key[1] == "float64"]
    if not per_micro_step and not float64:
        return
    ranked = sorted(conversions.items(), key=lambda item: (item[0][1] != "float64", -item[1]))
    listed = "; ".join(
        f"{_where(module)}: {source} → {target} ×{count / steps:g} per step"
        for (module, source, target), count in ranked[:4]
    )
    module = ranked[0][0][0] if ranked else None
    causes = []
    if per_micro_step:
        causes.append(
            f"autocast is entered {regions_per_step:g} times per optimizer step, and each entry casts every weight again"
        )
    if float64:
        causes.append("float64 tensors are converted on every step")
    message = (
        f"dtype conversions took {share:.0%} of iteration time in the mixed-precision run: {'; '.join(causes)}"
        + (f" ({listed})" if listed else "")
        + "."
    )
    help = (
        "Enter autocast once around the whole forward (its weight casts are cached per region, so a "
        "region per micro-step re-casts every weight each time), feed float32 rather than float64 "
        "data, and drop `.float()`/`.half()` round trips between modules."
    )
    yield make_finding(
        "AMP513",
        message,
        _cast_location(observations, locator, float64, per_micro_step),
        help,
        module=module,
        time_share=share,
        share_of="iteration time",
        autocast_regions_per_step=regions_per_step,
        conversions=[{"module": m, "from": s, "to": t, "per_step": c / steps} for (m, s, t), c in ranked],
    )


def _cast_location(
    observations: Observations, locator: Locator, float64: list[tuple[Optional[str], str, str]], per_micro_step: bool
) -> Location:
    """Where AMP513 points: the statement that converted float64 data (its module's class when
    the census has no statement for it); else, for autocast entered per micro-step, the autocast
    region of the training step."""
    from ...findings import Location

    if float64:
        module, _source, target = float64[0]
        site = observations.op_sites.get((module, "_to_copy", target))
        if site is not None:
            return Location(site[0], site[1])
        return module_location(locator, observations, module)
    for dtype in ("float16", "bfloat16"):
        site = observations.autocast_sites.get(dtype)
        if site is not None:
            return Location(site[0], site[1])
    return module_location(locator, observations, None)


def with_gemm_share(
    findings: list[Finding], observations: Observations, profile: Optional[ProfileShares]
) -> list[Finding]:
    """AMP507's findings gain their module's share of GEMM time."""
    seconds = _gemm_seconds(profile, observations)
    total = sum(seconds.values())
    if total <= 0:
        return findings
    result = []
    for finding in findings:
        module = finding.extra.get("module")
        if finding.code == "AMP507" and module in seconds:
            share = seconds[module] / total
            extra = dict(finding.extra, gemm_time_share=share)
            finding = finding.replace(
                message=finding.message.rstrip(".") + f"; {share:.0%} of the run's GEMM time.", extra=extra
            )
        result.append(finding)
    return result


def _first_low_precision_matmul(observations: Observations, dtype: str) -> Optional[Location]:
    """Where the user's code first issued a ``dtype`` matmul (the forward under autocast)."""
    from ...findings import Location
    from ..opnames import MATMUL_OPS

    for (_module, op, output_dtype), site in observations.op_sites.items():
        if op in MATMUL_OPS and output_dtype == dtype:
            return Location(site[0], site[1])
    return None


def _where(module: Optional[str]) -> str:
    return f"`{module}`" if module else "outside modules"


def _ratio_words(speedup: float) -> str:
    return f"{speedup:.2f}x faster" if speedup >= 1 else f"{1 / speedup:.2f}x slower"
