"""AMP205 when the fresh scaler is stepped only by a helper it is handed to: a trainer whose
several optimizers sit behind one wrapper (``self.optimizers.step("generator", scaler=scaler)``)
builds ``scaler = GradScaler()`` at the top of its per-epoch method; the loss scale starts over
every epoch all the same."""

from __future__ import annotations

import textwrap

from ampdoctor.lint import lint_source

SOURCE = """\
import torch


class Optimizers:
    def __init__(self, optimizers):
        self.optimizers = optimizers

    def step(self, key, scaler=None):
        if scaler is None:
            self.optimizers[key].step()
        else:
            scaler.step(self.optimizers[key])


class Trainer:
    def __init__(self, model, optimizers, fp16):
        self.model, self.optimizers, self.fp16 = model, optimizers, fp16

    def train_epoch(self, loader):
        scaler = torch.amp.GradScaler("cuda") if self.fp16 else None
        for x in loader:
            with torch.autocast("cuda", enabled=scaler is not None):
                loss = self.model(x)
            scaler.scale(loss).backward()
            self.optimizers.step("generator", scaler=scaler)
            scaler.update()


def main(model, optimizers, loader, epochs):
    trainer = Trainer(model, optimizers, fp16=True)
    for epoch in range(epochs):
        trainer.train_epoch(loader)
"""


def amp205(source: str) -> list[tuple[int, list[int]]]:
    return [
        (f.location.line, [r.line for r in f.related])
        for f in lint_source(textwrap.dedent(source), "trainer.py")
        if f.code == "AMP205"
    ]


def test_a_fresh_scaler_handed_to_a_step_helper_is_rebuilt_every_epoch():
    assert amp205(SOURCE) == [(20, [32])]


def test_positional_hand_over_counts_too():
    source = SOURCE.replace('step("generator", scaler=scaler)', 'step("generator", scaler)')
    assert amp205(source) == [(20, [32])]


def test_a_scaler_built_once_and_handed_over_is_clean():
    source = SOURCE.replace(
        '        scaler = torch.amp.GradScaler("cuda") if self.fp16 else None\n', "        scaler = self.scaler\n"
    ).replace(
        "self.model, self.optimizers, self.fp16 = model, optimizers, fp16",
        'self.model, self.optimizers = model, optimizers\n        self.scaler = torch.amp.GradScaler("cuda")',
    )
    assert amp205(source) == []


def test_a_scaler_handed_to_anything_but_a_step_is_not_taken_for_stepped():
    # a scaler only logged each epoch (and never stepped here) is not this rule's concern
    source = SOURCE.replace('self.optimizers.step("generator", scaler=scaler)', "log_scale(scaler)")
    assert amp205(source) == []


def test_a_method_called_once_may_build_its_scaler():
    source = SOURCE.replace(
        "    for epoch in range(epochs):\n        trainer.train_epoch(loader)", "    trainer.train_epoch(loader)"
    )
    assert amp205(source) == []
