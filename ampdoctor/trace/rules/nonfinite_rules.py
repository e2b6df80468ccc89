"""AMP503 (the loss is not finite) and AMP504 (where the first inf/NaN was born, in the forward
or in the backward pass)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Optional

from ...findings import Finding
from ...float16 import FLOAT16_MAX
from ..backward import INSIDE, OUTPUT, PARAMETER, BackwardOrigin, halvings_needed
from ..observations import IterationRecord, Observations
from ..rulebase import Locator, Thresholds, defined_at, format_scale, make_finding, rule


@rule("AMP503")
def non_finite_loss(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    bad = [r.step for r in observations.iterations if r.loss is not None and not math.isfinite(r.loss)]
    unfinished = observations.unfinished_loss
    if unfinished is not None and not math.isfinite(unfinished):
        bad.append(observations.steps + 1)
    if not bad:
        return
    first = bad[0]
    value = next(
        (r.loss for r in observations.iterations if r.step == first),
        unfinished,
    )
    measured = sum(1 for r in observations.iterations if r.loss is not None) + (unfinished is not None)
    message = (
        f"the loss was {_nonfinite_name(value)} at iteration {first}; {len(bad)} of {measured} losses were not finite."
    )
    origin = observations.origin
    if origin is not None and origin.step <= first:
        message += f" It started in `{origin.module}` ({origin.module_class}), see AMP504."
    help = (
        "Compute the loss in float32 (inside autocast, or `criterion(output.float(), target)`), "
        "add an eps to log/div/sqrt, and check the inputs for inf/NaN; a GradScaler skips these "
        "steps but cannot repair the loss."
    )
    yield make_finding(
        "AMP503",
        message,
        locator.location(),
        help,
        step=first,
        module=origin.module if origin is not None and origin.step <= first else None,
        count=len(bad),
    )


def _nonfinite_name(value: Optional[float]) -> str:
    if value is None or math.isnan(value):
        return "NaN"
    return "inf" if value > 0 else "-inf"


@rule("AMP504")
def overflow_origin(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    origin = observations.origin
    if origin is None:
        return
    class_path, class_line = locator.class_source(origin.cls)
    defined = defined_at(class_path, class_line)
    inputs = (
        f"its inputs were finite (max |x| {origin.input_max:.6g})"
        if origin.input_max is not None
        else "it had no floating inputs"
    )
    op = ""
    if origin.op is not None:
        op = f"; the op was `{origin.op}`"
        if origin.op_input_max is not None:
            op += f" with inputs up to |x| {origin.op_input_max:.6g}"
    message = (
        f"`{origin.module}` ({origin.module_class}{defined}) produced the first inf/NaN output at "
        f"iteration {origin.step} while {inputs}{op}."
    )
    help = (
        f"float16 cannot hold values above {FLOAT16_MAX:g}: keep `{origin.module}` in float32 "
        "(`with torch.autocast(device, enabled=False):` around it, inputs `.float()`), scale its "
        "inputs or weights down (normalisation, smaller init), or use bfloat16 autocast."
    )
    yield make_finding(
        "AMP504",
        message,
        locator.location(origin.cls),
        help,
        step=origin.step,
        phase="forward",
        module=origin.module,
        module_class=origin.module_class,
        class_file=class_path,
        class_line=class_line,
        op=origin.op,
        input_max=origin.input_max,
        op_input_max=origin.op_input_max,
    )


@rule("AMP504")
def backward_overflow_origin(observations: Observations, thresholds: Thresholds, locator: Locator) -> Iterator[Finding]:
    """AMP504, backward: a skipped step whose forward was finite."""
    origin = observations.backward_origin
    if origin is None:
        return
    skipped = observations.backward_skips
    if skipped < thresholds.origin_skips:
        return
    class_path, class_line = locator.class_source(origin.cls)
    defined = defined_at(class_path, class_line)
    scale = f"loss scale {format_scale(origin.scale)}" if origin.scale else "no loss scale"
    nan = math.isnan(origin.value)
    if origin.side == OUTPUT:
        born = (
            "became NaN outside every module, in the loss or in code between the model's output and "
            "the loss (an invalid operation: 0/0, inf - inf, or sqrt/pow at 0, whose derivative is "
            "infinite; a lower loss scale does not cure it)"
            if nan
            else "overflowed outside every module, in the loss or in code between the model's output and the loss"
        )
        message = (
            f"the gradient reaching the output of `{origin.module}` ({origin.module_class}{defined}) was "
            f"already {'NaN' if nan else 'inf'} at iteration {origin.step} ({scale}), with a finite forward "
            f"pass: it {born}."
        )
        help = (
            "Make the loss's backward finite: an eps inside sqrt/log/div (`(d + 1e-12).sqrt()`), a clamp; "
            "compute the loss in float32 (`criterion(output.float(), target)`)."
            if nan
            else "Compute the loss in float32 (`criterion(output.float(), target)`) and reduce it with a "
            "mean rather than a sum over many elements, or lower the GradScaler's `init_scale`."
        )
        halvings = None
    elif origin.side == INSIDE:
        received = f" (max |g| {origin.output_grad_max:.6g})" if origin.output_grad_max is not None else ""
        message = (
            f"the first inf/NaN of the backward pass was born inside `{origin.module}` ({origin.module_class}"
            f"{defined}), in its own forward code outside its submodules, at iteration {origin.step} ({scale}): "
            f"the gradient reaching its output was finite{received}, the one reaching `{origin.submodule}` was "
            f"{'NaN' if nan else 'inf'}, with a finite forward pass."
        )
        if not nan and origin.output_grad_max is not None and origin.scale:
            message += (
                f" A float32 gradient handed to a float16 branch (a residual `x + f(x)`) overflows when it "
                f"exceeds 65504: here {origin.output_grad_max:.6g}."
            )
        help = (
            "Keep the gradient inside float16's range: reduce the loss with a mean rather than a sum, lower "
            "the GradScaler's `init_scale`, or run this part in float32 (`torch.autocast(device, enabled=False)`)."
        )
        halvings = None
    else:
        produced = "its parameters' gradient" if origin.side == PARAMETER else "the gradient w.r.t. its inputs"
        received = f" (max |g| {origin.output_grad_max:.6g})" if origin.output_grad_max is not None else ""
        message = (
            f"`{origin.module}` ({origin.module_class}{defined}) produced the first inf/NaN in the backward "
            f"pass at iteration {origin.step}: {produced} overflowed at {scale} while the gradient flowing "
            f"into its output was finite{received} and the forward pass was finite."
        )
        halvings = halvings_needed(observations.backward_reference.get(origin.module), origin.scale)
        if halvings is not None and origin.scale:
            lower = origin.scale / 2**halvings
            judged = "judged from its gradients on iterations without overflow"
            skip = _lowest_skip(observations)
            if skip is not None and skip.scale is not None and skip.scale <= lower:
                # The run itself skipped a step at that scale or below: the gradients seen finite
                # were smaller than what came later. Below the lowest skipped scale, then.
                halvings = math.ceil(math.log2(origin.scale / skip.scale)) + 1
                lower = origin.scale / 2**halvings
                judged += (
                    f" and from the run's own skipped steps (iteration {skip.step} was skipped at "
                    f"{format_scale(skip.scale)})"
                )
            message += f" Lowering the scale by 2**{halvings} (to {format_scale(lower)}) keeps it finite, {judged}."
        else:
            message += (
                " How far the scale must come down is unknown: it never produced a finite gradient while watched."
            )
        help = (
            f"GradScaler backs off by itself, at the cost of skipped steps: start lower with "
            f"`GradScaler(init_scale=...)`, or keep `{origin.module}` in float32 "
            "(`with torch.autocast(device, enabled=False):` around it, inputs `.float()`), or scale "
            "its inputs down (normalise the features feeding it)."
        )
    at = _call_of_branch(observations, origin)
    loss_site, per_element = _large_loss_gradient(observations, origin)
    if loss_site is not None and not nan:
        # The loss hands every gradient this size: that is where the user acts.
        message += (
            f" The gradient leaving the loss was already {per_element:.3g} per element before scaling: "
            "a loss summed over many elements rather than averaged makes every gradient that large."
        )
        at = loss_site
        if origin.side not in (INSIDE, OUTPUT):
            help = 'Reduce the loss with a mean rather than a sum over many elements (`reduction="mean"`). ' + help
    yield make_finding(
        "AMP504",
        message,
        locator.location(origin.cls),
        help,
        step=origin.step,
        phase="backward",
        module=origin.module,
        module_class=origin.module_class,
        class_file=class_path,
        class_line=class_line,
        side=origin.side,
        scale=origin.scale,
        output_grad_max=origin.output_grad_max,
        halvings_needed=halvings,
        skipped=skipped,
        submodule=origin.submodule,
        at=at,
    )


# The ops that compute a loss from the model's output (cross_entropy is log_softmax + nll_loss).
LOSS_OPS = (
    "nll_loss_forward",
    "nll_loss2d_forward",
    "mse_loss",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "binary_cross_entropy_with_logits",
    "binary_cross_entropy",
    "kl_div",
    "soft_margin_loss",
)
# A mean-reduced loss over N elements hands each at most about 1/N; this much is a summed loss
# (or a batch of a few elements, whose gradients would not overflow).
LARGE_LOSS_GRADIENT = 1 / 32


def _large_loss_gradient(observations: Observations, origin: BackwardOrigin) -> tuple[Optional[tuple[str, int]], float]:
    """(the loss statement, the unscaled gradient per element leaving it) when the loss itself
    makes the gradients large, for an overflow born outside the modules' parameters, or in the
    module that takes the loss's gradient first (its output receives the loss's gradient itself:
    ``lm_head``, whose weight gradient sums that gradient over every position)."""
    if not origin.scale or origin.loss_grad_max is None:
        return None, 0.0
    first_module = origin.output_grad_max is not None and origin.output_grad_max >= origin.loss_grad_max
    if origin.side not in (INSIDE, OUTPUT) and not first_module:
        return None, 0.0
    per_element = origin.loss_grad_max / origin.scale
    if not math.isfinite(per_element) or per_element < LARGE_LOSS_GRADIENT:
        return None, per_element
    for op in LOSS_OPS:
        for (_, name, _), site in observations.op_sites.items():
            if name == op:
                return site, per_element
    return observations.backward_site, per_element


def _call_of_branch(observations: Observations, origin: BackwardOrigin) -> Optional[tuple[str, int]]:
    """Born inside a module: the statement of its forward that called the branch the
    non-finite gradient went into (``x + self.mlp(...)``), where the user acts."""
    if origin.side != INSIDE or not origin.submodule:
        return None
    prefix = origin.module + "."
    inside = origin.submodule.startswith(prefix)  # else the module is a root, named by its class
    rest = origin.submodule[len(prefix) :] if inside else origin.submodule
    child = (prefix if inside else "") + rest.split(".")[0]
    return observations.call_sites.get(child)


def _lowest_skip(observations: Observations) -> Optional[IterationRecord]:
    """The skipped iteration with the lowest loss scale (the latest among equals), or None."""
    skipped = [r for r in observations.iterations if r.skipped and r.scale]
    return min(skipped, key=lambda r: (r.scale, -r.step)) if skipped else None
