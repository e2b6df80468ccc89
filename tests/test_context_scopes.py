"""Which binding of a plain name a ``with name:`` opens: the function's own, an enclosing one's,
the module's; and, under ``global name`` or ``nonlocal name``, the one another function makes
for the module or for the function around it."""

from __future__ import annotations

import textwrap

from helpers import lint_text

GLOBAL = """
import contextlib

import torch
import torch.nn.functional as F

ctx = contextlib.nullcontext()


def setup(args):
    global ctx
    if args.amp:
        ctx = torch.autocast("cuda", dtype=torch.float16)


def train(model, x, y):
    with ctx:
        loss = F.binary_cross_entropy(torch.sigmoid(model(x)), y)
    return loss
"""

NONLOCAL = """
import contextlib

import torch
import torch.nn.functional as F


def main(model, loader, amp):
    ctx = contextlib.nullcontext()

    def setup():
        nonlocal ctx
        if amp:
            ctx = torch.autocast("cuda", dtype=torch.float16)

    setup()
    for x, y in loader:
        with ctx:
            loss = F.binary_cross_entropy(torch.sigmoid(model(x)), y)
"""


def amp105(source: str) -> list[int]:
    return [f.location.line for f in lint_text(textwrap.dedent(source)) if f.code == "AMP105"]


def line_of(source: str, text: str) -> int:
    return next(n for n, line in enumerate(textwrap.dedent(source).splitlines(), start=1) if text in line)


def test_a_global_context_set_by_another_function():
    assert amp105(GLOBAL) == [line_of(GLOBAL, "binary_cross_entropy")]


def test_a_nonlocal_context_set_by_a_nested_function():
    assert amp105(NONLOCAL) == [line_of(NONLOCAL, "binary_cross_entropy")]


def test_another_functions_local_of_the_same_name_is_not_it():
    # Without ``global``, ``setup`` binds a local of its own: ``train``'s ``ctx`` is the module's
    # null context.
    source = GLOBAL.replace("    global ctx\n", "")
    assert amp105(source) == []
