"""AMP203–AMP213 edge cases (each rule on both sides), and the AMP201/AMP202 fixes on a fixture."""

from __future__ import annotations

import difflib
import shutil
import textwrap
from pathlib import Path

import libcst as cst
import pytest
from click.testing import CliRunner
from helpers import expected_pairs, found_pairs, lint_text

from ampdoctor.cli import main

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "lint"

HEADER = "import torch\n\nscaler = torch.amp.GradScaler('cuda')\n"


def lines_of(code: str, source: str) -> list[int]:
    """Lines where ``code`` is reported for the dedented source."""
    return sorted(f.location.line for f in lint_text(textwrap.dedent(source)) if f.code == code)


def loop(body: str, header: str = HEADER) -> str:
    """A module-level training loop around ``body`` (written at 4 spaces)."""
    return header + "for x, y in loader:\n" + textwrap.indent(textwrap.dedent(body), "    ")


def line_containing(source: str, text: str) -> int:
    for number, line in enumerate(textwrap.dedent(source).splitlines(), start=1):
        if text in line:
            return number
    raise AssertionError(f"{text!r} not in source")


# --------------------------------------------------------------------------------------
# AMP203 step-bypasses-scaler
# --------------------------------------------------------------------------------------


def test_amp203_plain_step_after_scaled_backward_in_a_micro_batch_loop():
    src = HEADER + textwrap.dedent(
        """
        for batch in batches:
            for x, y in batch:
                scaler.scale(model(x).sum()).backward()
            optimizer.step()
            optimizer.zero_grad()
        """
    )
    assert lines_of("AMP203", src) == [line_containing(src, "optimizer.step()")]


@pytest.mark.parametrize(
    "body",
    [
        # the step is fed by a plain backward that runs after the scaled one
        "scaler.scale(aux).backward()\nloss.backward()\noptimizer.step()\n",
        # unscaled by hand before the plain step
        "scaler.scale(loss).backward()\nscaler.unscale_(optimizer)\noptimizer.step()\nscaler.update()\n",
        # the scaler steps the same optimizer on the other branch
        "scaler.scale(loss).backward()\nif fast:\n    optimizer.step()\nelse:\n    scaler.step(optimizer)\n    scaler.update()\n",
        # an LR scheduler's step is not an optimizer step
        "scaler.scale(loss).backward()\nscaler.step(optimizer)\nscaler.update()\nlr_scheduler.step()\n",
    ],
)
def test_amp203_silent(body):
    assert lines_of("AMP203", loop(body)) == []


def test_amp203_silent_for_schedulers_built_from_torch_optim():
    src = HEADER + textwrap.dedent(
        """
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, 100)
        for x, y in loader:
            scaler.scale(model(x).sum()).backward()
            scaler.step(optimizer)
            scaler.update()
            cosine.step()
        """
    )
    assert lines_of("AMP203", src) == []


def test_amp203_exclusive_branches_with_a_negated_flag():
    body = """
    if use_amp:
        scaler.scale(loss).backward()
    if not use_amp:
        optimizer.step()
    """
    assert lines_of("AMP203", loop(body)) == []


def test_amp203_exclusive_branches_with_negated_conditions():
    body = """
    if scaler is not None:
        scaler.scale(loss).backward()
    if scaler is None:
        loss.backward()
        optimizer.step()
    """
    assert lines_of("AMP203", loop(body)) == []


def test_amp203_a_plain_step_after_the_scalers_steps_the_optimizer_twice():
    body = """
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.step()
    optimizer.zero_grad()
    """
    src = loop(body)
    (finding,) = [f for f in lint_text(textwrap.dedent(src)) if f.code == "AMP203"]
    assert finding.location.line == line_containing(src, "    optimizer.step()")
    assert "a second time after `scaler.step(optimizer)`" in finding.message


@pytest.mark.parametrize(
    "body",
    [
        # two arms of one if
        "scaler.scale(loss).backward()\nif amp:\n    scaler.step(optimizer)\n    scaler.update()\n"
        "else:\n    optimizer.step()\n",
        # two ifs whose tests exclude each other
        "scaler.scale(loss).backward()\nif scaler is not None:\n    scaler.step(optimizer)\n    scaler.update()\n"
        "if scaler is None:\n    optimizer.step()\n",
        # a second backward feeds the plain step (a second loss of the same iteration)
        "scaler.scale(loss).backward()\nscaler.step(optimizer)\nscaler.update()\naux.backward()\noptimizer.step()\n",
        # the plain step of the next round, after a continue
        "scaler.scale(loss).backward()\nif ok:\n    scaler.step(optimizer)\n    scaler.update()\n    continue\n"
        "optimizer.step()\n",
    ],
    ids=["if-else", "excluding-tests", "second-backward", "after-continue"],
)
def test_amp203_a_plain_step_that_never_follows_the_scalers_is_silent(body):
    assert lines_of("AMP203", loop(body)) == []


TRAINER = """
import torch

class Trainer:
    def __init__(self, model, optimizer):
        self.optimizer = optimizer
        self.other = torch.optim.SGD(model.parameters(), lr=0.1)
        self.scaler = torch.amp.GradScaler("cuda")

    def backward_step(self, loss):
        self.scaler.scale(loss).backward()

    def optimizer_step(self):
        self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.parameters, 1.0)
        if self.scaler is None:
            self.optimizer.step()
            return
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def backward(self, loss):
        self.backward_step(loss)
        if self.is_optimizer_step:
{caller}
"""


def test_amp203_a_plain_step_after_a_method_that_steps_through_the_scaler():
    src = TRAINER.replace(
        "{caller}",
        "            self.optimizer_step()\n            self.optimizer.step()\n            self.optimizer.zero_grad()",
    )
    (finding,) = [f for f in lint_text(textwrap.dedent(src)) if f.code == "AMP203"]
    lines = src.splitlines()
    assert finding.location.line == len(lines) - lines[::-1].index("            self.optimizer.step()")  # the caller's
    assert "a second time after `self.optimizer_step()`" in finding.message
    assert "`self.scaler.step(...)`" in finding.message


def test_amp203_a_plain_step_after_a_module_function_that_steps_the_argument():
    src = """
    import torch

    def apply(scaler, opt):
        scaler.step(opt)
        scaler.update()

    def train(model, optimizer, scaler, loader):
        for x in loader:
            scaler.scale(model(x)).backward()
            apply(scaler, optimizer)
            optimizer.step()
    """
    assert lines_of("AMP203", src) == [line_containing(src, "optimizer.step()")]


@pytest.mark.parametrize(
    "caller",
    [
        # the plain step is the helper's other arm, under a test of its own
        "            self.optimizer_step()\n            if self.scaler is None:\n                self.optimizer.step()",
        # another optimizer
        "            self.optimizer_step()\n            self.other.step()",
        # a second backward between them
        "            self.optimizer_step()\n            self.aux.backward()\n            self.optimizer.step()",
        # the plain step before the helper
        "            self.optimizer.step()\n            self.optimizer_step()",
        # exclusive arms
        "            if self.amp:\n                self.optimizer_step()\n            else:\n"
        "                self.optimizer.step()",
    ],
    ids=["own-test", "other-optimizer", "second-backward", "before", "if-else"],
)
def test_amp203_a_plain_step_the_helper_does_not_double_is_silent(caller):
    assert lines_of("AMP203", TRAINER.replace("{caller}", caller)) == []


@pytest.mark.parametrize(
    "caller",
    [
        "            self.optimizer_step() if self.scaler is not None else self.optimizer.step()",
        "            self.use_amp and self.optimizer_step() or self.optimizer.step()",
    ],
    ids=["if-expression", "and-or"],
)
def test_amp203_one_of_two_steps_chosen_in_an_expression_is_silent(caller):
    # The plain step is the other arm of a choice made inside the expression: neither a second
    # step after the helper's nor a step that bypasses the scaler.
    assert lines_of("AMP203", TRAINER.replace("{caller}", caller)) == []


def test_amp203_a_module_function_stepping_another_argument_is_silent():
    src = """
    import torch

    def apply(scaler, opt):
        scaler.step(opt)
        scaler.update()

    def train(model, optimizer, critic_opt, scaler, loader):
        for x in loader:
            scaler.scale(model(x)).backward()
            apply(scaler, critic_opt)
            optimizer.step()
    """
    (finding,) = [f for f in lint_text(textwrap.dedent(src)) if f.code == "AMP203"]
    assert "multiplied by the loss scale" in finding.message  # a plain step, not a second one


def test_amp203_a_scaled_loss_of_one_function_is_not_another_functions_loss():
    # ``loss = scaler.scale(loss)`` in the training step; a plain ``loss`` of another function
    # (a parity check without a scaler) backs off and steps on its own.
    src = """
    import torch

    def train_steps(model, loader, optim, scaler):
        for x in loader:
            with torch.autocast("cuda"):
                loss = model(x).sum()
            loss = scaler.scale(loss)
            loss.backward()
            scaler.step(optim)
            scaler.update()

    def check(model, x):
        optim = torch.optim.SGD(model.parameters(), lr=0.01)
        loss = model(x).sum()
        loss.backward()
        optim.step()
    """
    assert lines_of("AMP203", src) == []
    # In the training step itself, the scaled name still feeds the plain step it bypasses.
    bypass = src.replace("            scaler.step(optim)\n            scaler.update()\n", "            optim.step()\n")
    assert lines_of("AMP203", bypass) == [line_containing(bypass, "        optim.step()")]


# --------------------------------------------------------------------------------------
# AMP204 unscaled-backward
# --------------------------------------------------------------------------------------


def test_amp204_fires_at_the_plain_backward():
    src = loop("loss.backward()\nscaler.step(optimizer)\nscaler.update()\n")
    assert lines_of("AMP204", src) == [line_containing(src, "loss.backward()")]


@pytest.mark.parametrize(
    "body",
    [
        # the scaled loss is divided before the backward: scaling is there
        "(scaler.scale(loss) / accum).backward()\nscaler.step(optimizer)\nscaler.update()\n",
        # a framework backward that scales by itself
        "engine.backward(loss)\nscaler.step(optimizer)\nscaler.update()\n",
        # the plain backward runs after the step (next round's business)
        "scaler.step(optimizer)\nscaler.update()\nprobe.backward()\n",
    ],
)
def test_amp204_silent(body):
    assert lines_of("AMP204", loop(body)) == []


def test_amp204_silent_for_a_disabled_scaler():
    header = "import torch\n\nscaler = torch.amp.GradScaler('cuda', enabled=False)\n"
    assert lines_of("AMP204", loop("loss.backward()\nscaler.step(optimizer)\nscaler.update()\n", header)) == []


def test_amp204_a_loss_handed_in_may_have_been_scaled_by_the_caller():
    # ``loss = self.scaler.scale(loss) if self.scaler else loss; self._backward(loss)``: the
    # helper's plain backward runs on what its caller made. A loss the helper computes itself,
    # or rebinds, is its own.
    src = """
    import torch

    class Trainer:
        def __init__(self):
            self.scaler = torch.amp.GradScaler("cuda")

        def _backward(self, loss):
            loss.backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()

        def _backward_of(self, batch):
            loss = self.model(batch).mean()
            loss.backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()

        def _backward_mean(self, loss):
            loss = loss.mean()
            loss.backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
    """
    backwards = [n for n, line in enumerate(textwrap.dedent(src).splitlines(), start=1) if "loss.backward()" in line]
    assert lines_of("AMP204", src) == backwards[1:]


def test_amp204_silent_when_the_backward_happens_in_another_function():
    src = """
    import torch

    def step(scaler, optimizer):
        scaler.step(optimizer)
        scaler.update()

    def backward(loss):
        loss.backward()
    """
    assert lines_of("AMP204", src) == []


# --------------------------------------------------------------------------------------
# AMP205 scaler-in-loop
# --------------------------------------------------------------------------------------


def test_amp205_fires_in_a_while_loop_too():
    src = """
    import torch

    def run(model, batches, optimizer):
        while batches:
            scaler = torch.amp.GradScaler("cuda")
            scaler.scale(model(batches.pop()).sum()).backward()
            scaler.step(optimizer)
            scaler.update()
    """
    assert lines_of("AMP205", src) == [line_containing(src, "GradScaler(")]


def test_amp205_fires_under_a_test_of_a_flag():
    # ``if cfg.amp:`` holds on every pass: a fresh scaler each iteration all the same
    src = """
    import torch
    for step in range(steps):
        if cfg.amp:
            scaler = torch.amp.GradScaler("cuda")
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
    """
    assert lines_of("AMP205", src) == [line_containing(src, "GradScaler(")]


def test_amp205_fires_in_the_else_of_a_one_pass_test():
    src = """
    import torch
    for step in range(steps):
        if step == 0:
            pass
        else:
            scaler = torch.amp.GradScaler("cuda")
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
    """
    assert lines_of("AMP205", src) == [line_containing(src, "GradScaler(")]


@pytest.mark.parametrize(
    "src",
    [
        # lazy creation under a condition
        """
        import torch
        scaler = None
        for x in loader:
            if scaler is None:
                scaler = torch.amp.GradScaler("cuda")
            scaler.scale(model(x).sum()).backward()
            scaler.step(optimizer)
            scaler.update()
        """,
        # one scaler per independent run, stepped in the nested loop
        """
        import torch
        for trial in trials:
            scaler = torch.amp.GradScaler("cuda")
            for x in loader:
                scaler.scale(model(x).sum()).backward()
                scaler.step(optimizer)
                scaler.update()
        """,
        # the else of a test of the scaler itself is lazy set-up too
        """
        import torch
        for x in loader:
            if scaler is not None:
                pass
            else:
                scaler = torch.amp.GradScaler("cuda")
            scaler.scale(model(x).sum()).backward()
            scaler.step(optimizer)
            scaler.update()
        """,
        # built on one pass, the one the loop variable equals
        """
        import torch
        for step in range(steps):
            if step == resume_at and cfg.amp:
                scaler = torch.amp.GradScaler("cuda")
            scaler.scale(model(x).sum()).backward()
            scaler.step(optimizer)
            scaler.update()
        """,
        # rebuilt on resuming, with the old scaler's state loaded into the new one
        """
        import torch
        for step in range(steps):
            if cfg.resume:
                state = scaler.state_dict()
                scaler = torch.amp.GradScaler("cuda")
                scaler.load_state_dict(state)
            scaler.scale(model(x).sum()).backward()
            scaler.step(optimizer)
            scaler.update()
        """,
        # a scaler built in the loop but never stepped there
        """
        import torch
        scalers = []
        for device in devices:
            scaler = torch.amp.GradScaler(device)
            scalers.append(scaler)
        """,
    ],
)
def test_amp205_silent(src):
    assert lines_of("AMP205", src) == []


# --------------------------------------------------------------------------------------
# AMP206 double-unscale
# --------------------------------------------------------------------------------------


def test_amp206_two_unscales_of_one_optimizer():
    body = (
        "scaler.scale(loss).backward()\nscaler.unscale_(opt)\nscaler.unscale_(opt)\nscaler.step(opt)\nscaler.update()\n"
    )
    src = loop(body)
    assert lines_of("AMP206", src) == [line_containing(src, "unscale_(opt)") + 1]


def test_amp206_unscale_every_micro_step_with_a_gated_step():
    body = """
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    if step % accum == 0:
        scaler.step(opt)
        scaler.update()
    """
    src = loop(body)
    assert lines_of("AMP206", src) == [line_containing(src, "unscale_(opt)")]
    finding = next(f for f in lint_text(src) if f.code == "AMP206")
    assert "already been called" in finding.message


def test_amp206_unscale_every_micro_step_with_an_update_every_micro_step():
    body = """
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    if (i + 1) % accum == 0:
        scaler.step(opt)
    scaler.update()
    """
    finding = next(f for f in lint_text(loop(body)) if f.code == "AMP206")
    assert "divided by the scale again" in finding.message


def test_amp206_unscale_in_a_micro_batch_loop_raises():
    src = HEADER + textwrap.dedent(
        """
        for batch in batches:
            for x in batch:
                scaler.scale(model(x).sum()).backward()
                scaler.unscale_(opt)
            scaler.step(opt)
            scaler.update()
        """
    )
    findings = [f for f in lint_text(src) if f.code == "AMP206"]
    assert [f.location.line for f in findings] == [line_containing(src, "unscale_(opt)")]
    assert "already been called" in findings[0].message


@pytest.mark.parametrize(
    "body",
    [
        # two different optimizers
        "scaler.scale(loss).backward()\nscaler.unscale_(enc_opt)\nscaler.unscale_(dec_opt)\n"
        "scaler.step(enc_opt)\nscaler.step(dec_opt)\nscaler.update()\n",
        # the two arms of one if
        "scaler.scale(loss).backward()\nif clip:\n    scaler.unscale_(opt)\nelse:\n    scaler.unscale_(opt)\n"
        "scaler.step(opt)\nscaler.update()\n",
        # gated with the step
        "scaler.scale(loss).backward()\nif (i + 1) % accum == 0:\n    scaler.unscale_(opt)\n    scaler.step(opt)\n"
        "    scaler.update()\n",
        # a step gated by a condition that is not accumulation
        "scaler.scale(loss).backward()\nscaler.unscale_(opt)\nif torch.isfinite(loss):\n    scaler.step(opt)\n"
        "scaler.update()\n",
        # a loop over optimizers
        "scaler.scale(loss).backward()\nfor opt in optimizers:\n    scaler.unscale_(opt)\nfor opt in optimizers:\n"
        "    scaler.step(opt)\nscaler.update()\n",
    ],
)
def test_amp206_silent(body):
    assert lines_of("AMP206", loop(body)) == []


def test_amp206_silent_for_a_scaler_rebuilt_in_the_loop_it_unscales_in():
    # AMP205's mistake: a fresh scaler each pass has never unscaled this optimizer before
    src = """
    import torch
    for step, x in enumerate(loader):
        scaler = torch.amp.GradScaler("cuda")
        scaler.scale(model(x).sum()).backward()
        scaler.unscale_(opt)
        if step % accum == 0:
            scaler.step(opt)
            scaler.update()
    """
    assert lines_of("AMP206", src) == []
    assert lines_of("AMP205", src) == [line_containing(src, "GradScaler(")]


# --------------------------------------------------------------------------------------
# AMP207 scaler-call-order
# --------------------------------------------------------------------------------------


def test_amp207_reports_each_misplaced_call_once():
    body = (
        "scaler.scale(loss).backward()\nscaler.step(opt)\nscaler.unscale_(opt)\nscaler.unscale_(opt)\nscaler.update()\n"
    )
    src = loop(body)
    first = line_containing(src, "unscale_(opt)")
    assert lines_of("AMP207", src) == [first, first + 1]
    assert lines_of("AMP206", src) == []  # the step between them makes it an order mistake


@pytest.mark.parametrize(
    "body",
    [
        # update after the step of a previous round, then a new round
        "scaler.scale(a).backward()\nscaler.step(opt)\nscaler.update()\nscaler.scale(b).backward()\n"
        "scaler.step(opt)\nscaler.update()\n",
        # a conditional step of the previous iteration's gradients at the top
        "if i > 0:\n    scaler.step(opt)\n    scaler.update()\nscaler.scale(loss).backward()\n",
        # update and step on the two arms of one if
        "scaler.scale(loss).backward()\nif skip:\n    scaler.update()\nelse:\n    scaler.step(opt)\n    scaler.update()\n",
    ],
)
def test_amp207_silent(body):
    assert lines_of("AMP207", loop(body)) == []


def test_amp207_a_scheduler_under_a_scalers_name_is_not_a_scaler_step():
    # One comprehension steps the schedulers, others step and update the scalers, all through
    # ``s``: a GradScaler's step takes the optimizer, a scheduler's ``s.step()`` takes nothing.
    header = "import torch\n\nscalers = [torch.amp.GradScaler('cuda') for _ in range(2)]\n"
    body = (
        "[s.step() for s in schedulers]\n"
        "[s.scale(l).backward() for s, l in zip(scalers, losses)]\n"
        "[s.step(o) for s, o in zip(scalers, optimizers)]\n"
        "[s.update() for s in scalers]\n"
    )
    assert lines_of("AMP207", loop(body, header)) == []
    src = loop(
        body.replace("[s.step() for s in schedulers]\n", "[s.step(o) for s, o in zip(scalers, optimizers)]\n"), header
    )
    assert lines_of("AMP207", src) == [line_containing(src, "for s, o in zip")]


def test_amp207_ignores_calls_in_different_loops():
    src = HEADER + textwrap.dedent(
        """
        for epoch in range(3):
            for x in loader:
                scaler.scale(model(x).sum()).backward()
                scaler.step(opt)
            scaler.update()
        """
    )
    assert lines_of("AMP207", src) == []


# --------------------------------------------------------------------------------------
# AMP208 update-per-optimizer
# --------------------------------------------------------------------------------------


def test_amp208_reports_only_the_update_that_precedes_another_step():
    body = "scaler.scale(loss).backward()\nscaler.step(a)\nscaler.update()\nscaler.step(b)\nscaler.update()\n"
    src = loop(body)
    assert lines_of("AMP208", src) == [line_containing(src, "scaler.update()")]
    assert lines_of("AMP207", src) == []


@pytest.mark.parametrize(
    "body",
    [
        # one update after several steps
        "scaler.scale(loss).backward()\nscaler.step(a)\nscaler.step(b)\nscaler.update()\n",
        # a loop over optimizers with one update after it
        "scaler.scale(loss).backward()\nfor opt in optimizers:\n    scaler.step(opt)\nscaler.update()\n",
        # each optimizer with its own scaled backward inside the loop
        "for opt, loss in zip(optimizers, losses):\n    scaler.scale(loss).backward()\n    scaler.step(opt)\n"
        "    scaler.update()\n",
        # steps on the two arms of one if
        "scaler.scale(loss).backward()\nif phase == 'g':\n    scaler.step(g_opt)\n    scaler.update()\nelse:\n"
        "    scaler.step(d_opt)\n    scaler.update()\n",
    ],
)
def test_amp208_silent(body):
    assert lines_of("AMP208", loop(body)) == []


# --------------------------------------------------------------------------------------
# AMP209 scaler-with-bfloat16
# --------------------------------------------------------------------------------------

BF16_BODY = (
    "with torch.autocast('cuda', dtype=torch.bfloat16):\n    loss = model(x).sum()\n"
    "scaler.scale(loss).backward()\nscaler.step(opt)\nscaler.update()\n"
)


def test_amp209_fires_for_cpu_default_bfloat16():
    header = "import torch\n\nscaler = torch.amp.GradScaler('cpu')\n"
    body = (
        "with torch.autocast('cpu'):\n    loss = model(x).sum()\nscaler.scale(loss).backward()\n"
        "scaler.step(opt)\nscaler.update()\n"
    )
    assert lines_of("AMP209", loop(body, header)) == [3]


@pytest.mark.parametrize(
    "header",
    [
        # float16 is possible somewhere in the module
        "import torch\n\nscaler = torch.amp.GradScaler('cuda')\nHALF = torch.float16\n",
        # enabled depends on the dtype chosen at run time
        "import torch\n\nscaler = torch.amp.GradScaler('cuda', enabled=args.amp_dtype == 'fp16')\n",
        # disabled outright
        "import torch\n\nscaler = torch.amp.GradScaler('cuda', enabled=False)\n",
        # a CUDA scaler next to CPU autocast only
        "import torch\n\nscaler = torch.amp.GradScaler('cuda')\n",
    ],
)
def test_amp209_silent(header):
    body = (
        BF16_BODY
        if "enabled" in header or "HALF" in header
        else BF16_BODY.replace("'cuda', dtype=torch.bfloat16", "'cpu'")
    )
    assert lines_of("AMP209", loop(body, header)) == []


def test_amp209_silent_for_a_runtime_dtype():
    body = (
        "with torch.autocast('cuda', dtype=ptdtype):\n    loss = model(x).sum()\nscaler.scale(loss).backward()\n"
        "scaler.step(opt)\nscaler.update()\n"
    )
    assert lines_of("AMP209", loop(body)) == []


# --------------------------------------------------------------------------------------
# AMP210 float16-without-scaler
# --------------------------------------------------------------------------------------

NO_SCALER = "import torch\n"


def test_amp210_fires_for_explicit_float16_and_a_context_object():
    src = NO_SCALER + textwrap.dedent(
        """
        ctx = torch.autocast("cuda", dtype=torch.float16)
        for x in loader:
            with ctx:
                loss = model(x).sum()
            loss.backward()
            opt.step()
        """
    )
    assert lines_of("AMP210", src) == [line_containing(src, "ctx = torch.autocast")]


@pytest.mark.parametrize(
    "body",
    [
        # bfloat16
        "with torch.autocast('cuda', dtype=torch.bfloat16):\n    loss = model(x).sum()\nloss.backward()\nopt.step()\n",
        # CPU autocast defaults to bfloat16
        "with torch.autocast('cpu'):\n    loss = model(x).sum()\nloss.backward()\nopt.step()\n",
        # inference only
        "with torch.autocast('cuda'):\n    preds.append(model(x).argmax(-1))\n",
        # a scaler passed in under another name and used only for stepping here
        "with torch.autocast('cuda'):\n    loss = model(x).sum()\nloss.backward()\namp_scaler.step(opt)\n",
        # a region that only runs after the last backward (evaluation after training)
        "loss = model(x).sum()\nloss.backward()\nopt.step()\nwith torch.autocast('cuda'):\n    model(x_val)\n",
    ],
)
def test_amp210_silent(body):
    assert lines_of("AMP210", loop(body, NO_SCALER)) == []


def test_amp210_a_context_object_is_the_one_its_own_function_binds():
    # Two functions bind ``context`` to their own autocast; the evaluation's runs under
    # ``no_grad`` with no backward. The training step's region is the one reported.
    src = NO_SCALER + textwrap.dedent(
        """
        import contextlib


        def train_step(model, optim, x, amp):
            context = contextlib.suppress()
            if amp:
                context = torch.autocast("cuda", dtype=torch.float16)
            with context:
                loss = model(x).sum()
            loss.backward()
            optim.step()


        def eval_step(model, x, amp):
            with torch.no_grad():
                context = contextlib.suppress()
                if amp:
                    context = torch.autocast("cuda", dtype=torch.float16)
                with context:
                    model(x).sum()
        """
    )
    lines = src.splitlines()
    assert lines_of("AMP210", src) == [lines.index('        context = torch.autocast("cuda", dtype=torch.float16)') + 1]


def test_amp210_silent_with_a_sharded_scaler_anywhere():
    header = "import torch\nfrom torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n"
    body = "with torch.autocast('cuda'):\n    loss = model(x).sum()\nloss.backward()\nopt.step()\n"
    assert lines_of("AMP210", loop(body, header)) == []


def test_amp210_silent_when_region_and_backward_are_in_different_functions():
    src = """
    import torch

    class Net(torch.nn.Module):
        @torch.autocast("cuda")
        def forward(self, x):
            return self.body(x)

    def train(model, x, opt):
        model(x).sum().backward()
        opt.step()
    """
    assert lines_of("AMP210", src) == []


def test_amp210_a_weight_average_stepped_elsewhere_is_not_training():
    # A float16 smoke test (forward and backward, no optimizer) beside a test that steps an EMA:
    # nothing in the module updates a parameter from its gradients. An optimizer step does.
    src = """
    import torch

    def test_mixed_precision(model, x, y):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()

    def test_ema(model, ema_model, x, y):
        torch.nn.functional.mse_loss(model(x), y).backward()
        ema_model.step(model.parameters())
    """
    assert lines_of("AMP210", src) == []
    trains = src.replace("ema_model.step(model.parameters())", "optimizer.step(closure)")
    assert lines_of("AMP210", trains) == [line_containing(trains, "with torch.autocast")]


# --------------------------------------------------------------------------------------
# AMP211 scaler-state-not-saved
# --------------------------------------------------------------------------------------

SAVE_HEADER = "import torch\n\nscaler = torch.amp.GradScaler('cuda')\n\n"


def test_amp211_fires_for_dict_call_literal():
    src = SAVE_HEADER + "torch.save(dict(model=model.state_dict(), optimizer=optimizer.state_dict()), 'c.pt')\n"
    assert lines_of("AMP211", src) == [5]


@pytest.mark.parametrize(
    "code",
    [
        # scaler state added by subscription assignment
        "ckpt = {'model': model.state_dict(), 'opt': opt.state_dict()}\nckpt['amp'] = scaler.state_dict()\n"
        "torch.save(ckpt, 'c.pt')\n",
        # the mapping is completed by a helper
        "ckpt = {'model': model.state_dict(), 'opt': opt.state_dict()}\nadd_extras(ckpt)\ntorch.save(ckpt, 'c.pt')\n",
        # built elsewhere
        "torch.save(trainer.checkpoint(), 'c.pt')\n",
        # spread of another mapping
        "torch.save({**extra, 'opt': opt.state_dict()}, 'c.pt')\n",
        # weights only
        "torch.save({'model': model.state_dict()}, 'w.pt')\n",
        # a key that names the scaler
        "torch.save({'opt': opt.state_dict(), 'grad_scaler': amp_state}, 'c.pt')\n",
    ],
)
def test_amp211_silent(code):
    assert lines_of("AMP211", SAVE_HEADER + code) == []


def test_amp211_silent_without_a_grad_scaler_in_the_module():
    src = "import torch\n\ntorch.save({'model': model.state_dict(), 'opt': opt.state_dict()}, 'c.pt')\n"
    assert lines_of("AMP211", src) == []


# --------------------------------------------------------------------------------------
# AMP212 fsdp-plain-grad-scaler
# --------------------------------------------------------------------------------------


def test_amp212_fires_for_the_deprecated_scaler_with_a_module_alias():
    src = """
    import torch
    import torch.distributed.fsdp as fsdp

    model = fsdp.FullyShardedDataParallel(net)
    scaler = torch.amp.GradScaler("cuda")
    """
    assert lines_of("AMP212", src) == [line_containing(src, "GradScaler(")]


def test_amp212_fires_when_the_wrap_always_runs_whatever_the_else():
    src = """
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    model = FSDP(net)
    if args.fsdp:
        pass
    else:
        scaler = torch.amp.GradScaler("cuda")
    """
    assert lines_of("AMP212", src) == [line_containing(src, "GradScaler(")]


@pytest.mark.parametrize(
    "src",
    [
        # FSDP2: DTensor gradients reduce the inf check
        "import torch\nfrom torch.distributed.fsdp import fully_shard\nfully_shard(net)\n"
        "scaler = torch.amp.GradScaler('cuda')\n",
        # the sharded scaler is used for the FSDP branch
        "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
        "from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n"
        "model = FSDP(net) if fsdp else net\nscaler = ShardedGradScaler() if fsdp else torch.amp.GradScaler('cuda')\n",
        # only imported, never wrapped here
        "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel\nscaler = torch.amp.GradScaler('cuda')\n",
        # the plain scaler is made in the else of the test that wraps
        "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
        "if args.fsdp:\n    model = FSDP(net)\nelse:\n    scaler = torch.amp.GradScaler('cuda')\n",
        # ... or after an assert that the model is not sharded
        "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
        "if args.fsdp:\n    model = FSDP(net)\nif args.amp:\n    assert not args.fsdp\n"
        "    scaler = torch.amp.GradScaler('cuda')\n",
    ],
)
def test_amp212_silent(src):
    assert lines_of("AMP212", src) == []


# --------------------------------------------------------------------------------------
# AMP213 zero-grad-before-step
# --------------------------------------------------------------------------------------


def test_amp213_fires_with_a_gated_step():
    body = (
        "scaler.scale(loss).backward()\nopt.zero_grad()\nif (i + 1) % accum == 0:\n    scaler.step(opt)\n"
        "    scaler.update()\n"
    )
    src = loop(body)
    assert lines_of("AMP213", src) == [line_containing(src, "zero_grad")]


@pytest.mark.parametrize(
    "body",
    [
        # zero_grad of another optimizer (GAN)
        "scaler.scale(d_loss).backward()\ng_opt.zero_grad()\nscaler.step(d_opt)\nscaler.update()\n",
        # a guarded drop of a bad batch's gradients
        "scaler.scale(loss).backward()\nif not torch.isfinite(loss):\n    opt.zero_grad()\nscaler.step(opt)\n"
        "scaler.update()\n",
        # a new backward after the zero_grad
        "scaler.scale(a).backward()\nopt.zero_grad()\nscaler.scale(b).backward()\nscaler.step(opt)\nscaler.update()\n",
        # model.zero_grad(): which parameters it clears is unknown
        "scaler.scale(loss).backward()\nmodel.zero_grad()\nscaler.step(opt)\nscaler.update()\n",
    ],
)
def test_amp213_silent(body):
    assert lines_of("AMP213", loop(body)) == []


# --------------------------------------------------------------------------------------
# Fixtures: every planted mistake, and the AMP201/AMP202 fixes
# --------------------------------------------------------------------------------------

PROTOCOL_FIXTURES = sorted(FIXTURES.glob("protocol_*.py"))


def test_protocol_fixtures_cover_every_code():
    planted = {code for p in PROTOCOL_FIXTURES for _, code in expected_pairs(p.read_text(encoding="utf-8"))}
    assert {f"AMP2{n:02d}" for n in range(1, 14)} <= planted


@pytest.mark.parametrize("path", PROTOCOL_FIXTURES, ids=lambda p: p.name)
def test_protocol_fixture_reports_exactly_the_planted_mistakes(path: Path):
    source = path.read_text(encoding="utf-8")
    assert found_pairs(source, str(path)) == expected_pairs(source)


def _lint(args):
    return CliRunner().invoke(main, ["lint", "--isolated", *args], catch_exceptions=False)


def test_fix_of_clip_and_update_on_a_fixture_copy(tmp_path: Path):
    target = tmp_path / "protocol_buggy_fixable.py"
    shutil.copy(FIXTURES / target.name, target)
    before = target.read_text(encoding="utf-8")
    result = _lint(["--fix", str(target)])
    assert result.exit_code == 0, result.output  # both findings fixed, nothing left
    after = target.read_text(encoding="utf-8")
    cst.parse_module(after)
    changed = [
        line
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and line[:3] not in ("+++", "---")
    ]
    assert changed == [
        "+        scaler.unscale_(optimizer)",
        "+            grad_scaler.update()",
    ]
    # Byte for byte elsewhere: removing the two inserted lines gives the original back.
    inserted = {"        scaler.unscale_(optimizer)\n", "            grad_scaler.update()\n"}
    assert "".join(line for line in after.splitlines(keepends=True) if line not in inserted) == before
    # The update lands inside the accumulation branch, right after the step.
    lines = after.splitlines()
    step = lines.index("            grad_scaler.step(optimizer)  # expect: AMP202")
    assert lines[step + 1] == "            grad_scaler.update()"
    assert lines[lines.index("        scaler.unscale_(optimizer)") + 1].lstrip().startswith("nn.utils.clip_grad_norm_(")
    # Idempotent, and nothing is reported any more.
    _lint(["--fix", str(target)])
    assert target.read_text(encoding="utf-8") == after
    assert found_pairs(after, str(target)) == []


def test_clip_before_unscale_names_the_users_own_optimizer_and_scaler():
    source = textwrap.dedent(
        """\
        import torch
        model = torch.nn.Linear(2, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        amp_scaler = torch.amp.GradScaler("cuda")
        for x in range(3):
            with torch.autocast("cuda"):
                loss = model(torch.randn(2, 2)).sum()
            amp_scaler.scale(loss).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            amp_scaler.step(opt)
            amp_scaler.update()
        """
    )
    (finding,) = lint_text(source)
    assert finding.code == "AMP201"
    assert "`amp_scaler.unscale_(opt)`" in finding.message and "`amp_scaler.unscale_(opt)`" in finding.help_text
