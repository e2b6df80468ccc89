"""AMP515-AMP522: torchao float8 and MXFP8 training as the run saw it (float8.py,
mx_watch.py): casts that flush an operand's values to zero, float8 GEMMs the GPU kernels refuse,
an output layer that ran in float8, a conversion that converted nothing, a GPU without float8
GEMMs, float8 layers that never ran, scales that went wrong (an operand with inf or NaN, an
amax under torchao's floor or zero), and MX layers that ran without their bias."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Optional

from ...findings import Finding
from ..compare.hardware import CUDA_MIN, Hardware, cuda_hardware
from ..float8 import FLOAT8_ALIGNMENT, unaligned
from ..observations import Observations
from ..rulebase import Locator, Thresholds, died_of, make_finding, module_location, rule
from .census_rules import module_label

# What each operand role is, in the words of the training step.
_ROLES = {"input": "input", "weight": "weight", "grad_output": "output gradient"}


@rule("AMP515")
def float8_flushed_to_zero(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    for (module, role), stats in sorted(observations.float8_casts.items(), key=lambda item: -item[1].flushed_share):
        # What a scale stopped at torchao's ceiling flushed, and casts of an operand that held
        # inf or NaN, are AMP521's: a finer scale would not have kept them.
        if stats.nonfinite_scales or stats.nonzero < thresholds.float8_min_values:
            continue
        if (stats.flushed - stats.floored) / stats.nonzero < thresholds.float8_flush_share:
            continue
        what = _ROLES.get(role, role)
        block = stats.granularity.startswith("block")  # MX: a scale per block of 32 values in a row
        if block:
            keep_out = "Keep this layer out of MX training (the config's `filter_fn`)"
            cure = "normalize the features whose values stand 2**17 above their neighbours in a block"
        else:
            keep_out = "Keep this layer out of float8 (`module_filter_fn`)"
            cure = (
                'use the recipe `Float8LinearConfig.from_recipe_name("rowwise_with_gw_hp")`: a scale per row, and '
                "the weight-gradient GEMM (which casts the input column by column) in high precision"
                if stats.granularity == "tensorwise" or role == "input"
                else "normalize the outliers that set its rows' scales"
            )
        # The layer's output against float32, as data: not in the message, because an outlier in
        # every row (a feature left unnormalized) swamps the float32 output as much, and a small
        # error there would read as harmless while the other features are gone.
        shadow = observations.float8_shadows.get(module)
        error = shadow.relative_error if shadow is not None else None
        yield make_finding(
            "AMP515",
            f"{module_label(module, observations)}: its float8 casts flushed {stats.flushed_share:.1%} of the non-zero "
            f"values of its {what} to zero ({stats.flushed:,} of {stats.nonzero:,} in {observations.op_steps or 1} "
            f"recorded iteration(s); {stats.dtype}, {stats.granularity} scale): a few large values set the scale, "
            "and everything more than about 2**17 (e4m3) below them is lost",
            module_location(locator, observations, module),
            f"{keep_out}, or {cure}",
            module=module,
            role=role,
            share=round(stats.flushed_share, 6),
            granularity=stats.granularity,
            output_error=round(error, 6) if error is not None else None,
        )


@rule("AMP516")
def float8_gemm_unaligned(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    shapes: dict[Optional[str], set[tuple[tuple[int, ...], tuple[int, ...]]]] = defaultdict(set)
    for (module, _phase, a, b), _count in observations.float8_gemms.items():
        if unaligned(a, b):
            shapes[module].add((a, b))
    for module, found in shapes.items():
        listed = ", ".join(f"{_shape(a)} @ {_shape(b)}" for a, b in sorted(found)[:3])
        yield make_finding(
            "AMP516",
            f"{module_label(module, observations)} ran float8 GEMMs whose sizes are not multiples of "
            f"{FLOAT8_ALIGNMENT} ({listed}): the CPU kernel accepts them, but on the GPU `torch._scaled_mm` "
            "refuses them and the layer fails at its first forward",
            module_location(locator, observations, module),
            f"Pad the layer's sizes to multiples of {FLOAT8_ALIGNMENT} (a vocabulary, a class count), or keep it "
            "out of float8 with `module_filter_fn`; the tokens per step count too (the weight-gradient GEMM "
            "multiplies along them)",
            module=module,
            shapes=[[list(a), list(b)] for a, b in sorted(found)],
        )
    if not shapes and observations.script_error is not None:
        yield from _died_unaligned(observations, locator)


# What torch raises on the GPU for an unaligned float8 GEMM (``_scaled_mm``'s size checks).
_ALIGNMENT_ERRORS = ("to be divisible by 16", "must be divisible by 16")


# What torchao's MX cast raises for a size its blocks do not divide, on any device.
_MX_BLOCK_ERRORS = ("must be divisible by block_size",)


def _died_unaligned(observations: Observations, locator: Locator) -> Iterator[Finding]:
    """The run died of it on the GPU before any GEMM was recorded (the first forward), or, in
    MXFP8 training, wherever it ran."""
    mx = died_of(observations, *_MX_BLOCK_ERRORS)
    if mx is not None and observations.mx_refused is not None:
        error, site = mx
        layer, shape = observations.mx_refused
        yield make_finding(
            "AMP516",
            f"the script died because {module_label(layer, observations)}, converted to MXFP8 training, has an "
            f"operand of shape {_shape(shape)} ({error}): MX formats scale blocks of 32 values, and torchao refuses "
            "a size they do not divide, on every device",
            locator.at(site),
            "Pad the layer's sizes to multiples of 32 (a vocabulary, a class count, the input features), or keep it "
            "out of MX training (the config's `filter_fn`); the tokens per step count too (the weight's gradient "
            "is cast along them)",
            at_run_time=True,
            module=layer,
            shape=list(shape),
        )
        return
    died = died_of(observations, *_ALIGNMENT_ERRORS)
    if died is None or not observations.float8_imported:
        return
    error, site = died
    yield make_finding(
        "AMP516",
        f"the script died because a float8 GEMM has a size that is not a multiple of {FLOAT8_ALIGNMENT} ({error}): "
        "the GPU's float8 kernels refuse it",
        locator.at(site),
        f"Pad the layer's sizes to multiples of {FLOAT8_ALIGNMENT} (a vocabulary, a class count), or keep it out of "
        "float8 with `module_filter_fn`",
        at_run_time=True,
    )


def _shape(shape: tuple[int, ...]) -> str:
    return "×".join(str(size) for size in shape)


@rule("AMP517")
def float8_output_layer(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    layer = observations.float8_last_layer
    stats = observations.float8_casts.get((layer, "input"))
    if layer is None or stats is None:
        return
    mx = stats.granularity.startswith("block")  # MXFP8 training's layer, its filter the config's
    yield make_finding(
        "AMP517",
        f"the output layer {module_label(layer, observations)}, the last layer with weights before the loss, ran its "
        f"GEMMs in {'MXFP8' if mx else 'float8'}: its logits are rounded to 3 mantissa bits (e4m3) right where the "
        "loss reads them, which costs accuracy (a loss gap or divergence against bfloat16)",
        module_location(locator, observations, layer),
        f"Leave it in higher precision: a `{'filter_fn' if mx else 'module_filter_fn'}` that returns False for "
        f'`fqn == "{layer}"`',
        module=layer,
    )


@rule("AMP518")
def float8_nothing_converted(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    for site, linears, converted in observations.float8_conversions:
        if converted:
            continue
        why = (
            f"its `module_filter_fn` refused all {linears} of the model's `nn.Linear` layers"
            if linears
            else "the model has no `nn.Linear` layer (torchao converts only those: not HF's `Conv1D`, fused or "
            "Transformer Engine layers)"
        )
        yield make_finding(
            "AMP518",
            f"`convert_to_float8_training` converted no layer: {why}. The run trains as if float8 had never "
            "been asked for, with none of its speed-up",
            locator.at(site),
            "Check the names the filter tests against `[n for n, m in model.named_modules() if isinstance(m, "
            "nn.Linear)]` (a `Sequential` names its layers `0`, `1` ...), or convert the module that holds the "
            "model's Linear layers",
            linears=linears,
        )


# What torch raises where the GPU has no float8 GEMMs: ``_scaled_mm`` below compute capability
# 8.9 (its older wording said 9.0), ``_scaled_grouped_mm`` (MoE experts) off 9.0 and 10.0.
_HARDWARE_ERRORS = ("_scaled_mm is only supported on", "_scaled_grouped_mm is only supported on")
# What it raises for rowwise scales where the GPU, or the build of PyTorch, has no rowwise
# kernel (aten's RowwiseScaledMM: Windows wheels, and GPUs outside sm89, sm9x-sm12x).
_ROWWISE_ERRORS = ("Rowwise scaling is not currently supported on your device",)
_FLOAT8_NEED = CUDA_MIN["float8"]


@rule("AMP519")
def float8_unsupported_gpu(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    if not observations.float8_imported:
        return
    device = cuda_device()
    where = f"this GPU ({device})" if device else "this GPU"
    died = died_of(observations, *_HARDWARE_ERRORS)
    if died is not None:
        error, site = died
        yield make_finding(
            "AMP519",
            f"the script died at its first float8 GEMM ({error}): {where} has no float8 GEMMs. They need compute "
            f"capability {_FLOAT8_NEED[0]}.{_FLOAT8_NEED[1]} (Ada: L4, L40, RTX 40xx) or 9.0 (Hopper) and "
            "later; the CPU runs them, so the script works on a laptop and fails here",
            locator.at(site),
            "Train in bfloat16 on this GPU: convert to float8 only where `torch.cuda.get_device_capability() >= "
            "(8, 9)`, or run on a GPU that has float8",
            at_run_time=True,
            device=device,
        )
        return
    died = died_of(observations, *_ROWWISE_ERRORS)
    if died is not None:
        error, site = died
        yield make_finding(
            "AMP519",
            f"the script died at its first rowwise-scaled float8 GEMM ({error}): {where}, with this build of "
            "PyTorch, has float8 GEMMs with one scale per tensor only, not the per-row scales of the `rowwise` "
            "recipes; the CPU runs them, so the script works on a laptop and fails here",
            locator.at(site),
            'Use the tensorwise recipe here (`Float8LinearConfig.from_recipe_name("tensorwise")`), or a PyTorch '
            "build with the rowwise kernels (the Linux CUDA wheels, on compute capability 8.9 and 9.0 to 12.x)",
            at_run_time=True,
            device=device,
            recipe="rowwise",
        )
        return
    yield from _mx_off_blackwell(observations, locator)


_MXFP8_NEED = CUDA_MIN["mxfp8"]


def _mx_off_blackwell(observations: Observations, locator: Locator) -> Iterator[Finding]:
    """MXFP8 training's GEMMs ran on a CUDA GPU below compute capability 10.0 with torchao's
    kernels (not its emulation), and the script died before its first optimizer step: whatever
    the kernel's own words, MXFP8 has no GEMMs there."""
    mx = observations.mx_device
    error = observations.script_error
    if mx is None or error is None or observations.steps or mx[0] != "cuda" or mx[2] == "EMULATED":
        return
    hardware = mx_hardware(mx[1] or 0)
    if hardware is None or hardware.fast:
        return
    yield make_finding(
        "AMP519",
        f"the script died at its first MXFP8 training GEMM ({error[0]}): this GPU ({hardware.name}, compute "
        f"capability {hardware.capability}) has no MXFP8 GEMMs, which need compute capability "
        f"{_MXFP8_NEED[0]}.{_MXFP8_NEED[1]} (Blackwell: B200, GB200) or later",
        locator.at(error[1]),
        "Train in float8 (`convert_to_float8_training`, compute capability 8.9 and later) or bfloat16 on this GPU, "
        "and MXFP8 where `torch.cuda.get_device_capability() >= (10, 0)`",
        at_run_time=True,
        device=f"{hardware.name}, compute capability {hardware.capability}",
        recipe="mxfp8",
    )


def mx_hardware(index: int) -> Optional[Hardware]:
    """Whether CUDA device ``index`` has MXFP8 GEMMs; None where it cannot be asked."""
    try:
        return cuda_hardware("mxfp8", index=index)
    except Exception:  # no CUDA here, or a driver that answers oddly
        return None


def cuda_device() -> Optional[str]:
    """The current CUDA device's name and compute capability ("NVIDIA A100, compute capability
    8.0"); None without CUDA."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        hardware = cuda_hardware("float8", index=torch.cuda.current_device())
        return f"{hardware.name}, compute capability {hardware.capability}"
    except Exception:  # a driver that answers oddly must not break the report
        return None


@rule("AMP520")
def float8_never_ran(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    converted = [(site, count) for site, _linears, count in observations.float8_conversions if count]
    if not converted or observations.float8_casts or observations.float8_gemms:
        return
    # The recorded iterations trained (a forward and a backward, outside torch.compile, whose
    # graphs the watch cannot see): a float8 layer of the trained model would have cast there.
    if observations.compiled or not observations.op_steps or not observations.ops:
        return
    site = converted[0][0]
    total = sum(number for _site, number in converted)
    yield make_finding(
        "AMP520",
        f"`convert_to_float8_training` made {total} float8 layer{'s' if total != 1 else ''}, and none of them ran in "
        f"the {observations.op_steps} recorded iteration(s): the model that trains is not the one converted (a "
        "copy, another instance), or it calls those layers' weights around their forward (`F.linear(x, "
        "layer.weight)`); the run trains without float8",
        locator.at(site),
        "Convert the model that the optimizer trains (before wrapping it in DDP, FSDP or torch.compile), and call "
        "its Linear layers as modules",
        layers=total,
    )


@rule("AMP521")
def float8_scale_anomaly(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    casts = observations.float8_casts
    unusable = sorted((stats.first_unusable, key) for key, stats in casts.items() if stats.first_unusable is not None)
    if unusable:
        # An inf or NaN spreads through every later GEMM: the first cast it reached is the news.
        _first, (module, role) = unusable[0]
        yield _unusable_scale(observations, locator, module, role, len(unusable) - 1)
    for (module, role), stats in sorted(casts.items(), key=lambda item: str(item[0])):
        if stats.first_unusable is not None:
            continue
        what = _ROLES.get(role, role)
        label = module_label(module, observations)
        if stats.nonzero >= thresholds.float8_min_values and stats.floored >= thresholds.float8_flush_share * (
            stats.nonzero
        ):
            share = stats.floored / stats.nonzero
            yield make_finding(
                "AMP521",
                f"{label}: its {what} is so small that its amax fell under torchao's floor (1e-12), so the scale "
                f"stopped at its ceiling and {share:.1%} of its non-zero values flushed to zero ({stats.floored:,} of "
                f"{stats.nonzero:,}): no scaling granularity keeps them",
                module_location(locator, observations, module),
                f"Make the {what} larger where it is made (a loss divided by a large constant, a feature left in tiny "
                "units), or keep this layer out of float8 (`module_filter_fn`)",
                module=module,
                role=role,
                anomaly="floored",
                share=round(share, 6),
            )
        elif role == "input" and stats.casts >= 2 and stats.zero_casts == stats.casts:
            yield make_finding(
                "AMP521",
                f"{label}: its input was all zeros in every one of its {stats.casts} float8 casts "
                f"({observations.op_steps or 1} recorded iteration(s)): "
                + (
                    ""
                    if stats.granularity.startswith("block")
                    else "with an amax of zero the scale sits at torchao's ceiling, "
                )
                + "the GEMM multiplies zeros, and the layer's weight gets no gradient",
                module_location(locator, observations, module),
                "Find why the layer's input is zero (a feature the data never fills, a mask applied twice, units that "
                "died before it), or remove the layer",
                module=module,
                role=role,
                anomaly="zero_amax",
                casts=stats.casts,
            )


def _unusable_scale(
    observations: Observations, locator: Locator, module: Optional[str], role: str, later: int
) -> Finding:
    stats = observations.float8_casts[(module, role)]
    what = _ROLES.get(role, role)
    spread = f"; after it, {later} more operand(s) of the float8 layers had such scales" if later else ""
    return make_finding(
        "AMP521",
        f"{module_label(module, observations)}: {stats.nonfinite_scales} of the {stats.casts} float8 casts of its "
        f"{what} had a scale of NaN or zero, because the {what} held a NaN or an inf: the amax is that value, and "
        f"the cast turns its whole {_GROUP.get(stats.granularity, 'group')} into NaN or zeros, not only the bad "
        f"value{spread}",
        module_location(locator, observations, module),
        f"Find where the {what} turns non-finite (AMP503 and AMP504 name the loss and the module)"
        + (
            "; a scale per row (the `rowwise` recipe) keeps one bad value from taking the whole tensor with it"
            if stats.granularity == "tensorwise"
            else ""
        ),
        module=module,
        role=role,
        anomaly="nonfinite",
        casts=stats.casts,
        bad_casts=stats.nonfinite_scales,
        later=later,
    )


# What one scale covers, by granularity.
_GROUP = {"tensorwise": "tensor", "axiswise": "row", "block32": "block of 32 values"}


@rule("AMP522")
def mx_bias_dropped(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    layers = observations.mx_bias_dropped
    if not layers:
        return
    named = ", ".join(f"`{layer}`" for layer in layers[:4]) + (
        f" and {len(layers) - 4} more" if len(layers) > 4 else ""
    )
    yield make_finding(
        "AMP522",
        f"the MXFP8 training layer{'s' if len(layers) > 1 else ''} {named} ran without {'their' if len(layers) > 1 else 'its'} "
        "bias: torchao's MX linear computes `input @ weight.T` and leaves out the bias `F.linear` was given, so the "
        "output lacks it and the bias never trains (the model is not the one written)",
        module_location(locator, observations, layers[0]),
        "Build the layers MXFP8 converts without a bias (`nn.Linear(..., bias=False)`), keep the layers that have one "
        "out of the conversion (`filter_fn`), or use a torchao release whose MX linear adds the bias",
        layers=list(layers),
        module=layers[0],
    )
