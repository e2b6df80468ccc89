"""AMP211 through a save helper whose optimizer parameter defaults to None
(``save_model(self, output_dir=None, optimizer=None, model=None)``): a call that leaves it out
writes no optimizer state, whatever the module calls its optimizers elsewhere; the checkpoint
written through the call that hands one over is the incomplete one."""

from __future__ import annotations

import textwrap

from ampdoctor.lint import lint_source

SOURCE = """\
import os

import torch


class Model:
    def train_model(self, loader, output_dir):
        self.train(loader, output_dir)
        self.save_model(model=self.model)

    def train(self, loader, output_dir):
        model = self.model
        optimizer = torch.optim.AdamW(model.parameters())
        scaler = torch.amp.GradScaler("cuda")
        for step, batch in enumerate(loader):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(batch)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            if step % 1000 == 0:
                self.save_model(os.path.join(output_dir, str(step)), optimizer, model=model)

    def save_model(self, output_dir=None, optimizer=None, model=None):
        output_dir = output_dir or "out"
        torch.save(model.state_dict(), os.path.join(output_dir, "model.pt"))
        if optimizer:
            torch.save(optimizer.state_dict(), os.path.join(output_dir, "optimizer.pt"))
"""


def amp211(source: str) -> list[tuple[int, list[int]]]:
    return [
        (f.location.line, [r.line for r in f.related])
        for f in lint_source(textwrap.dedent(source), "model.py")
        if f.code == "AMP211"
    ]


def test_the_call_that_hands_the_optimizer_over_is_reported_not_the_one_that_leaves_it_out():
    [(line, related)] = amp211(SOURCE)
    assert line == 22  # the periodic checkpoint, not the weights-only save at line 9
    assert 9 not in related


def test_no_call_handing_an_optimizer_over_is_no_finding():
    assert amp211(SOURCE.replace("str(step)), optimizer, model=model)", "str(step)), model=model)")) == []
