"""AMP205, AMP206 and AMP208 on paths: branches, jumps, accumulation conditions, epoch loops and
per-epoch functions, each with its clean counterparts."""

from __future__ import annotations

import textwrap

import pytest
from helpers import lint_text

HEADER = "import torch\n\nscaler = torch.amp.GradScaler('cuda')\n"


def loop(body: str) -> str:
    return HEADER + "for i, (x, y) in enumerate(loader):\n" + textwrap.indent(textwrap.dedent(body), "    ")


def findings(code: str, source: str):
    return [f for f in lint_text(textwrap.dedent(source)) if f.code == code]


def lines_of(code: str, source: str) -> list[int]:
    return sorted(f.location.line for f in findings(code, source))


def line_containing(source: str, text: str, nth: int = 1) -> int:
    numbers = [n for n, line in enumerate(textwrap.dedent(source).splitlines(), start=1) if text in line]
    return numbers[nth - 1]


# --------------------------------------------------------------------------------------
# AMP206: an iteration that unscales and ends without update()
# --------------------------------------------------------------------------------------


UNSCALE_SKIPPED = {
    "clip on every micro-step, step and update on the accumulation step": (
        """
        scaler.scale(loss).backward()
        if clip_grad:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(params, 1.0)
        if (i + 1) % accum == 0:
            scaler.step(opt)
            scaler.update()
        """,
        "runs only when `(i + 1) % accum == 0`",
    ),
    "a NaN guard that continues": (
        """
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        if not torch.isfinite(norm):
            continue
        scaler.step(opt)
        scaler.update()
        """,
        "`continue` on line",
    ),
    "a skip flag": (
        """
        scaler.scale(loss).backward()
        skip = False
        scaler.unscale_(opt)
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        if norm > 1e3:
            skip = True
        if not skip:
            scaler.step(opt)
            scaler.update()
        """,
        "runs only when `not skip`",
    ),
    "an accumulation flag computed before": (
        """
        scaler.scale(loss).backward()
        sync = (i + 1) % accum == 0
        scaler.unscale_(opt)
        if sync:
            scaler.step(opt)
            scaler.update()
        """,
        "runs only when `sync`",
    ),
}


@pytest.mark.parametrize("body, reason", UNSCALE_SKIPPED.values(), ids=list(UNSCALE_SKIPPED))
def test_amp206_unscale_in_an_iteration_without_update(body, reason):
    src = loop(body)
    (finding,) = findings("AMP206", src)
    assert finding.location.line == line_containing(src, "unscale_(opt)")
    assert reason in finding.message
    assert "already been called" in finding.message


def test_amp206_conditional_unscale_on_micro_steps_that_update_without_stepping():
    body = """
    scaler.scale(loss).backward()
    if clip_grad:
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
    if (i + 1) % accum == 0:
        scaler.step(opt)
    scaler.update()
    """
    src = loop(body)
    (finding,) = findings("AMP206", src)
    assert finding.location.line == line_containing(src, "unscale_(opt)")
    assert "`scaler.step(opt)` runs only when `(i + 1) % accum == 0`" in finding.message
    assert "divides the accumulated gradients by the scale again" in finding.message


def test_amp206_step_function_that_returns_before_update():
    src = HEADER + textwrap.dedent(
        """
        def train_step(model, batch, opt):
            scaler.scale(model(batch).sum()).backward()
            scaler.unscale_(opt)
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if torch.isnan(norm):
                return None
            scaler.step(opt)
            scaler.update()
            return norm
        """
    )
    (finding,) = findings("AMP206", src)
    assert finding.location.line == line_containing(src, "unscale_(opt)")
    assert "the next call's unscale_" in finding.message


@pytest.mark.parametrize(
    "body",
    [
        # unscale_ inside the accumulation condition, clipping optional
        """
        scaler.scale(loss).backward()
        if (i + 1) % accum == 0:
            if clip_grad:
                scaler.unscale_(opt)
            scaler.step(opt)
            scaler.update()
        """,
        # the guard skips only the step; update() runs on every path
        """
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        if torch.isfinite(norm):
            scaler.step(opt)
        scaler.update()
        """,
        # a skip flag that keeps update() outside the guard
        """
        scaler.scale(loss).backward()
        skip = False
        scaler.unscale_(opt)
        if not torch.isfinite(torch.nn.utils.clip_grad_norm_(params, 1.0)):
            skip = True
        if not skip:
            scaler.step(opt)
        scaler.update()
        """,
        # a continue before the unscale_ (a skipped batch)
        """
        if x is None:
            continue
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
        """,
        # a break after the unscale_: the loop is over, nothing unscales again
        """
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        if i == max_steps:
            break
        scaler.step(opt)
        scaler.update()
        """,
        # two spellings of one setting around the unscale_ and the update: not a skip
        """
        scaler.scale(loss).backward()
        if use_amp:
            scaler.unscale_(opt)
        if scaler.is_enabled():
            scaler.step(opt)
            scaler.update()
        """,
        # nanoGPT: clipping under a config flag, step and update on every iteration
        """
        scaler.scale(loss).backward()
        if grad_clip != 0.0:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
        scaler.step(opt)
        scaler.update()
        """,
    ],
)
def test_amp206_silent_when_every_repeating_path_updates(body):
    assert lines_of("AMP206", loop(body)) == []


DIAGNOSTIC_STEP = """
scaler.scale(loss).backward()
if is_update:
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_value_(params, 5.0)
    if writer is not None and (step // accum_grad) % 200 == 0:
        deltas = step_and_measure_change(model, opt, scaler)
    else:
        scaler.step(opt)
    opt.zero_grad()
    scaler.update()
"""


def test_amp206_silent_when_the_other_arm_hands_the_scaler_to_a_helper_that_steps():
    # Every 200th update steps through a diagnostic helper handed the scaler: the test that
    # gates ``scaler.step`` is a logging cadence, not an accumulation boundary.
    assert lines_of("AMP206", loop(DIAGNOSTIC_STEP)) == []
    # Without the scaler, the helper cannot step it: that update runs without a step.
    src = loop(DIAGNOSTIC_STEP.replace("(model, opt, scaler)", "(model, opt)"))
    assert lines_of("AMP206", src) == [line_containing(src, "unscale_(opt)")]


COUNTER_STEP = """
import torch


class Trainer:
    def __init__(self, model, optimizer, gradient_acc):
        self.model, self.optimizer, self.gradient_acc = model, optimizer, gradient_acc
        self.scaler = torch.amp.GradScaler("cuda")
        self._grad_count = 0

    def _backprop_step(self, loss):
        self._grad_count += 1
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        if self._grad_count == self.gradient_acc:
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self._grad_count = 0
"""


def test_amp206_an_attribute_counter_gates_the_step_of_a_per_batch_method():
    # ``self._grad_count == self.gradient_acc``: the accumulation boundary, kept on the object
    # by a method called once per batch. The unscale_ runs on every call, the update only at
    # the boundary: the next call's unscale_ raises.
    (finding,) = findings("AMP206", COUNTER_STEP)
    assert finding.location.line == line_containing(COUNTER_STEP, "unscale_(")
    assert "`self._grad_count == self.gradient_acc`" in finding.message
    moved = COUNTER_STEP.replace(
        "        self.scaler.unscale_(self.optimizer)\n        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)\n",
        "",
    ).replace(
        "            self.scaler.step(self.optimizer)",
        "            self.scaler.unscale_(self.optimizer)\n            self.scaler.step(self.optimizer)",
    )
    assert findings("AMP206", moved) == []


OPTIONAL_SCALER_STEP = """
import torch


class Trainer:
    def __init__(self, optimizer, parameters, amp):
        self.optimizer = optimizer
        self.parameters = parameters
        self.scaler = torch.amp.GradScaler("cuda") if amp else None

    def optimizer_step(self):
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        self.grad_norm = torch.nn.utils.clip_grad_norm_(self.parameters, 1.0).item()
        if self.scaler is None:
            self.optimizer.step()
            return
        self.scaler.step(self.optimizer)
        self.scaler.update()
"""


def test_amp206_silent_when_the_early_return_excludes_the_unscale():
    # ``self.scaler is not None`` around the unscale_, ``self.scaler is None`` around the return:
    # storing another field of ``self`` in between does not make them compatible.
    assert lines_of("AMP206", OPTIONAL_SCALER_STEP) == []
    # A return under another test may follow the unscale_.
    other = OPTIONAL_SCALER_STEP.replace("if self.scaler is None:", "if self.grad_norm > 1e6:")
    assert lines_of("AMP206", other) == [line_containing(other, "unscale_(")]


def test_amp206_silent_when_the_update_lives_elsewhere():
    # No update() in the loop: the protocol is finished by a helper the model does not follow.
    body = """
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    if not torch.isfinite(loss):
        continue
    finish_step(scaler, opt)
    """
    assert lines_of("AMP206", loop(body)) == []


# --------------------------------------------------------------------------------------
# AMP208: an update() between two optimizers' steps on some path of one iteration
# --------------------------------------------------------------------------------------

GAN_HALVES = {
    "two rounds, each with its update": """
        scaler.scale(d_loss).backward()
        scaler.step(d_opt)
        scaler.update()
        scaler.scale(g_loss).backward()
        scaler.step(g_opt)
        scaler.update()
        """,
    "the first half under a condition": """
        if i % d_every == 0:
            scaler.scale(d_loss).backward()
            scaler.step(d_opt)
            scaler.update()
        scaler.scale(g_loss).backward()
        scaler.step(g_opt)
        scaler.update()
        """,
    "the halves in two ifs that can both run": """
        if train_d:
            scaler.scale(d_loss).backward()
            scaler.step(d_opt)
            scaler.update()
        if train_g:
            scaler.scale(g_loss).backward()
            scaler.step(g_opt)
            scaler.update()
        """,
}


@pytest.mark.parametrize("body", GAN_HALVES.values(), ids=list(GAN_HALVES))
def test_amp208_update_after_each_half(body):
    src = loop(body)
    (finding,) = findings("AMP208", src)
    assert finding.location.line == line_containing(src, "scaler.update()")
    assert "before `scaler.step(g_opt)`" in finding.message
    assert "one update() per iteration" in finding.message


@pytest.mark.parametrize(
    "body",
    [
        # one update after both halves
        """
        scaler.scale(d_loss).backward()
        scaler.step(d_opt)
        scaler.scale(g_loss).backward()
        scaler.step(g_opt)
        scaler.update()
        """,
        # one scaler per optimizer
        """
        d_scaler.scale(d_loss).backward()
        d_scaler.step(d_opt)
        d_scaler.update()
        g_scaler.scale(g_loss).backward()
        g_scaler.step(g_opt)
        g_scaler.update()
        """,
        # halves that alternate: only one runs per iteration
        """
        if i % 2 == 0:
            scaler.scale(d_loss).backward()
            scaler.step(d_opt)
            scaler.update()
        else:
            scaler.scale(g_loss).backward()
            scaler.step(g_opt)
            scaler.update()
        """,
        # two ifs on one name with different constants
        """
        if phase == "d":
            scaler.scale(d_loss).backward()
            scaler.step(d_opt)
            scaler.update()
        if phase == "g":
            scaler.scale(g_loss).backward()
            scaler.step(g_opt)
            scaler.update()
        """,
        # the same optimizer stepped in two rounds
        """
        scaler.scale(first).backward()
        scaler.step(opt)
        scaler.update()
        scaler.scale(second).backward()
        scaler.step(opt)
        scaler.update()
        """,
        # the halves in an if and its else branch reached through elif
        """
        if phase == "d":
            scaler.scale(d_loss).backward()
            scaler.step(d_opt)
            scaler.update()
        elif phase == "g":
            scaler.scale(g_loss).backward()
            scaler.step(g_opt)
            scaler.update()
        """,
    ],
)
def test_amp208_silent(body):
    assert lines_of("AMP208", loop(body)) == []


def test_amp208_silent_when_the_first_half_sits_in_a_nested_loop():
    body = """
    for _ in range(n_critic):
        scaler.scale(d_loss).backward()
        scaler.step(d_opt)
        scaler.update()
    scaler.scale(g_loss).backward()
    scaler.step(g_opt)
    scaler.update()
    """
    assert lines_of("AMP208", loop(body)) == []


# --------------------------------------------------------------------------------------
# AMP205: a scaler rebuilt per epoch
# --------------------------------------------------------------------------------------

EPOCH_LOOP = """
import torch

def fit(model, loader, optimizer, epochs):
    for epoch in range(epochs):
        scaler = torch.amp.GradScaler("cuda")
        for x, y in loader:
            scaler.scale(model(x).sum()).backward()
            scaler.step(optimizer)
            scaler.update()
"""

EPOCH_FUNCTION = """
import torch

def train_one_epoch(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()

def main(args, model, loader, optimizer):
    for epoch in range(args.epochs):
        train_one_epoch(model, loader, optimizer)
"""

EPOCH_METHOD = """
import torch

class Trainer:
    def train(self):
        scaler = torch.amp.GradScaler("cuda")
        for x, y in self.loader:
            scaler.scale(self.model(x).sum()).backward()
            scaler.step(self.optimizer)
            scaler.update()

    def fit(self):
        for _ in range(self.num_epochs):
            self.train()
"""


@pytest.mark.parametrize(
    "src, words",
    [
        (EPOCH_LOOP, "every pass of the epoch loop"),
        (EPOCH_FUNCTION, "every call of `train_one_epoch`, which the loop on line 12 calls once per epoch"),
        (EPOCH_METHOD, "every call of `train`, which the loop on line 13 calls once per epoch"),
    ],
)
def test_amp205_scaler_rebuilt_every_epoch(src, words):
    (finding,) = findings("AMP205", src)
    assert finding.location.line == line_containing(src, "GradScaler(")
    assert words in finding.message
    assert "restarts at its initial value each epoch" in finding.message


@pytest.mark.parametrize(
    "src",
    [
        # built once before the epoch loop
        EPOCH_LOOP.replace(
            '    for epoch in range(epochs):\n        scaler = torch.amp.GradScaler("cuda")\n',
            '    scaler = torch.amp.GradScaler("cuda")\n    for epoch in range(epochs):\n',
        ),
        # a loop over folds: a fresh training run per pass
        EPOCH_LOOP.replace("for epoch in range(epochs)", "for fold in folds"),
        # the epoch loop also builds the optimizer: a fresh run per pass
        EPOCH_LOOP.replace(
            '        scaler = torch.amp.GradScaler("cuda")\n',
            "        optimizer = torch.optim.SGD(model.parameters(), lr=lrs[epoch])\n"
            '        scaler = torch.amp.GradScaler("cuda")\n',
        ),
        # the per-epoch function is called once
        EPOCH_FUNCTION.replace("    for epoch in range(args.epochs):\n        train_one_epoch", "    train_one_epoch"),
        # called from a loop over trials, and named for a run, not an epoch
        EPOCH_FUNCTION.replace("train_one_epoch", "train_run").replace(
            "for epoch in range(args.epochs)", "for trial in trials"
        ),
        # the function builds its own optimizer: a complete run
        EPOCH_FUNCTION.replace(
            '    scaler = torch.amp.GradScaler("cuda")\n',
            '    optimizer = torch.optim.AdamW(model.parameters())\n    scaler = torch.amp.GradScaler("cuda")\n',
        ),
        # the scaler is kept on the object, built lazily
        EPOCH_METHOD.replace(
            '        scaler = torch.amp.GradScaler("cuda")\n',
            '        if self.scaler is None:\n            self.scaler = torch.amp.GradScaler("cuda")\n'
            "        scaler = self.scaler\n",
        ),
    ],
)
def test_amp205_silent_for_one_scaler_per_run(src):
    assert lines_of("AMP205", src) == []
