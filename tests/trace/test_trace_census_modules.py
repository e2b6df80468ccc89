"""The census counts each backward op in the module whose backward ran it: a module that hands
an input back unchanged (``nn.Dropout(p=0)`` in training, ``nn.Identity``) has no backward of its
own and must not take the backward ops of the layers below it."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ampdoctor.trace.session import trace_session


class Block(nn.Module):
    def __init__(self, passthrough: nn.Module):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.drop = passthrough

    def forward(self, x):
        return x + self.drop(self.fc(x))


def backward_matmuls(model: nn.Module, inputs) -> dict[str, int]:
    """The backward matmuls the census counted per module, over two float16-scaled steps of
    ``model`` on ``inputs()``."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with trace_session(steps=2) as session:
        scaler = torch.amp.GradScaler("cpu")
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(*inputs()).float().square().mean()
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
    torch.manual_seed(0)
    model = nn.Sequential(Block(passthrough()), Block(passthrough()), Block(passthrough()))
    found = backward_matmuls(model, lambda: (torch.randn(4, 8),))
    assert set(found) == {"0.fc", "1.fc", "2.fc"}
    # The first layer's input needs no gradient: its weight's matmul only; the others both.
    assert found == {"0.fc": 2, "1.fc": 4, "2.fc": 4}


class TwoTower(nn.Module):
    """Two branches joined by a ``cat``: the first layer of each takes an input that needs no
    gradient, so torch's tracker never sees it leave in the backward."""

    def __init__(self):
        super().__init__()
        self.user = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16))
        self.item = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 16))
        self.score = nn.Linear(32, 1)

    def forward(self, user, item):
        return self.score(torch.cat([self.user(user), self.item(item)], dim=1))


def test_the_backward_of_each_branch_is_counted_in_its_own_layers():
    torch.manual_seed(0)
    found = backward_matmuls(TwoTower(), lambda: (torch.randn(4, 8), torch.randn(4, 4)))
    # Each tower's first layer: its weight's matmul only; the layers after it: both. The branch
    # whose backward runs second used to be counted in the first one's first layer.
    assert found == {"user.0": 2, "user.2": 4, "item.0": 2, "item.2": 4, "score": 4}


class Attention(nn.Module):
    """Separate query, key and value projections of one input (as Llama-style attention has):
    the gradient reaches the three at different times, and all three stay "running" in torch's
    tracker until the shared input's gradient is ready."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(8, 8)
        self.q = nn.Linear(8, 8)
        self.k = nn.Linear(8, 8)
        self.v = nn.Linear(8, 8)
        self.out = nn.Linear(8, 8)

    def forward(self, x):
        h = self.trunk(x)
        scores = (self.q(h) @ self.k(h).transpose(-1, -2)).softmax(-1)
        return self.out(scores @ self.v(h))


def test_the_backward_of_projections_that_share_an_input_is_counted_in_each():
    torch.manual_seed(0)
    found = backward_matmuls(Attention(), lambda: (torch.randn(4, 8),))
    # Each projection's two matmuls per iteration (the input's and the weight's gradient), the
    # trunk's weight gradient only; the attention's own products (scores, the weighted sum) are
    # the model's, made outside the projections.
    assert {name: found.get(name) for name in ("q", "k", "v", "out", "trunk")} == {
        "q": 4,
        "k": 4,
        "v": 4,
        "out": 4,
        "trunk": 2,
    }


class Checkpointed(nn.Module):
    """A block recomputed in the backward (non-reentrant activation checkpointing): its forward
    runs again inside the node of its last op (the GELU's), which needs the activations."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(8, 8)
        self.block = nn.Sequential(nn.Linear(8, 8), nn.GELU())
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(checkpoint(self.block, self.trunk(x), use_reentrant=False))


def test_a_checkpoints_recomputed_forward_is_counted_in_the_module_that_runs_it():
    torch.manual_seed(0)
    model = Checkpointed()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with trace_session(steps=2) as session:
        for _ in range(2):
            model(torch.randn(4, 8)).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
    found: dict[tuple[str, str], int] = {}
    for op in session.report().to_dict()["ops"]:
        if op["phase"] == "backward" and op["op"] in ("mm", "addmm"):
            key = (op["module"], op["op"])
            found[key] = found.get(key, 0) + op["count"]
    # The recomputed linear (addmm) is block.0's, not the GELU's whose node asked for it; the
    # backward matmuls are each layer's own, the GELU has none.
    assert found == {("block.0", "addmm"): 2, ("block.0", "mm"): 4, ("head", "mm"): 4, ("trunk", "mm"): 2}
