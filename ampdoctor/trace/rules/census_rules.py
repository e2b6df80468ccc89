"""AMP507, AMP508, AMP509: what the op census saw (float32 matmuls inside autocast, sensitive
ops run in float16 by hand, a scaled loss whose forward ran outside autocast)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Callable, Optional

from ...findings import Finding
from ..observations import Observations
from ..rulebase import Locator, Thresholds, make_finding, module_class_of, module_location, rule

if TYPE_CHECKING:
    from ..ops import OpKey


def _ops_by_module(observations: Observations, keep: Callable[[OpKey], bool]) -> dict[Optional[str], dict[str, int]]:
    grouped: dict[Optional[str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for key, count in observations.ops.items():
        if keep(key):
            grouped[key.module][key.op] += count
    return grouped


def _op_list(ops: dict[str, int]) -> str:
    return ", ".join(f"{op} ×{count}" for op, count in sorted(ops.items(), key=lambda item: -item[1]))


def module_label(module: Optional[str], observations: Optional[Observations] = None) -> str:
    if not module:
        return "code outside any module"
    cls = module_class_of(observations, module) if observations is not None else None
    return f"`{module}` ({cls})" if cls and cls != module else f"`{module}`"


@rule("AMP507")
def float32_matmul_in_autocast(
    observations: Observations, thresholds: Thresholds, locator: Locator
) -> Iterator[Finding]:
    grouped = _ops_by_module(
        observations,
        # Under an enabled region autocast casts float32 inputs itself, so float32 there is
        # torch's own choice (e.g. the CPU attention math path); the user's float32 shows up in
        # regions disabled inside an enabled one, and float64 anywhere autocast is on.
        lambda k: (
            k.is_matmul
            and k.phase == "forward"
            and (
                (k.autocast == "disabled" and k.output_dtype in ("float32", "float64"))
                or (k.autocast == "on" and k.output_dtype == "float64")
            )
        ),
    )
    for module, ops in grouped.items():
        message = (
            f"{module_label(module, observations)} ran matmul-class ops in float32 inside an autocast region "
            f"({_op_list(ops)} in {observations.op_steps or 1} recorded iteration(s)): no low-precision speed-up there."
        )
        help = (
            "If float32 is not needed here, drop the `autocast(enabled=False)` region or the "
            "`.float()`/`.double()` casts so autocast can run these ops in low precision."
        )
        yield make_finding(
            "AMP507",
            message,
            module_location(locator, observations, module),
            help,
            module=module,
            ops=dict(ops),
        )


@rule("AMP508")
def sensitive_op_in_low_precision(
    observations: Observations, thresholds: Thresholds, locator: Locator
) -> Iterator[Finding]:
    from ..opnames import SENSITIVE_OPS

    grouped = _ops_by_module(
        observations,
        lambda k: (
            k.op in SENSITIVE_OPS
            and k.phase == "forward"
            and k.autocast != "on"
            and (k.output_dtype == "float16" or "float16" in k.input_dtypes)
        ),
    )
    for module, ops in grouped.items():
        message = (
            f"{module_label(module, observations)} ran precision-sensitive ops in float16 with autocast off "
            f"({_op_list(ops)}): autocast would have kept them in float32; float16 loses their "
            "accuracy and range."
        )
        help = (
            "Do not make the model or its activations float16 by hand (`.half()`, `.to(torch.float16)`): "
            "keep float32 weights and run the forward under `torch.autocast(device, dtype=torch.float16)`, "
            "or cast these inputs back with `.float()`."
        )
        yield make_finding(
            "AMP508",
            message,
            module_location(locator, observations, module),
            help,
            module=module,
            ops=dict(ops),
        )


@rule("AMP509")
def forward_outside_autocast(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    if not observations.uses_scaler:
        return
    grouped = _ops_by_module(
        observations,
        lambda k: k.is_matmul and k.phase == "forward" and k.autocast == "off" and k.output_dtype == "float32",
    )
    if not grouped:
        return
    modules = list(grouped)
    total = sum(sum(ops.values()) for ops in grouped.values())
    listed = ", ".join(module_label(m, observations) for m in modules[:6]) + (
        f" and {len(modules) - 6} more" if len(modules) > 6 else ""
    )
    message = (
        f"a GradScaler scales the loss, but {total} matmul-class forward op(s) ran in float32 with "
        f"autocast off, in {listed}: the forward gets no mixed precision."
    )
    help = (
        "Run the model's forward inside the autocast region, not only the loss: "
        "`with torch.autocast(device, dtype=...): output = model(x); loss = criterion(output, y)`."
    )
    yield make_finding(
        "AMP509",
        message,
        module_location(locator, observations, modules[0]),
        help,
        module=modules[0],
        modules={str(m): sum(ops.values()) for m, ops in grouped.items()},
    )


@rule("AMP105")
def binary_cross_entropy_under_autocast(
    observations: Observations, thresholds: Thresholds, locator: Locator
) -> Iterator[Finding]:
    """binary_cross_entropy ran inside an enabled autocast region: CUDA autocast refuses it, and
    the probabilities it takes were computed in low precision, where a sigmoid saturates."""
    grouped = _ops_by_module(
        observations, lambda k: k.op == "binary_cross_entropy" and k.phase == "forward" and k.autocast == "on"
    )
    for module, ops in grouped.items():
        message = (
            f"{module_label(module, observations)} ran binary_cross_entropy inside an enabled autocast region "
            f"({_op_list(ops)}): autocast on CUDA refuses it (it is unsafe to autocast), and the "
            "probabilities it reads come from a low-precision sigmoid, which rounds to exactly 0 or 1."
        )
        help = (
            "Drop the final sigmoid and use `nn.BCEWithLogitsLoss()` (or "
            "`F.binary_cross_entropy_with_logits(logits, target)`), which is stable and autocast-safe."
        )
        yield make_finding(
            "AMP105",
            message,
            module_location(locator, observations, module),
            help,
            module=module,
            ops=dict(ops),
        )
