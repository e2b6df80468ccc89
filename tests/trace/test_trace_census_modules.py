"""The census counts each backward op in the module whose backward ran it: a module that hands
an input back unchanged (``nn.Dropout(p=0)`` in training, ``nn.Identity``) has no backward of its
own and must not take the backward ops of the layers below it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ampdoctor.trace.session import trace_session


class Block(nn.Module):
    def __init__(self, passthrough: nn.Module):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.drop = passthrough

    def forward(self, x):
        return x + self.drop(self.fc(x))


def backward_matmuls(passthrough) -> dict[str, int]:
    torch.manual_seed(0)
    model = nn.Sequential(Block(passthrough()), Block(passthrough()), Block(passthrough()))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with trace_session(steps=2) as session:
        scaler = torch.amp.GradScaler("cpu")
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(torch.randn(4, 8)).float().square().mean()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    found: dict[str, int] = {}
    for op in session.report().to_dict()["ops"]:
        if op["phase"] == "backward" and op["op"] in ("mm", "aten.mm", "aten.mm.default"):
            found[op["module"]] = found.get(op["module"], 0) + op["count"]
    return found


@pytest.mark.parametrize(
    "passthrough",
    [lambda: nn.Dropout(0.0), nn.Identity, lambda: nn.Dropout(0.1)],
    ids=["dropout-0", "identity", "dropout"],
)
def test_backward_matmuls_are_counted_in_the_linear_layers(passthrough):
    found = backward_matmuls(passthrough)
    assert set(found) == {"0.fc", "1.fc", "2.fc"}
    # The first layer's input needs no gradient: its weight's matmul only; the others both.
    assert found == {"0.fc": 2, "1.fc": 4, "2.fc": 4}
