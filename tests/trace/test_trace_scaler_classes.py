"""GradScaler classes that do not go through the names the session replaces are observed too:
FSDP's ShardedGradScaler and torch's class bound by name before the session began."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.amp import GradScaler as BoundBeforeTheSession

from ampdoctor import trace_session
from ampdoctor.trace.scaler import _Observed


def _train(make_scaler, overflow_at: int = 1) -> tuple[object, dict]:
    torch.manual_seed(0)
    model = nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with trace_session(steps=None, script="train.py") as session:
        scaler = make_scaler()
        for step in range(3):
            with torch.autocast("cpu", dtype=torch.float16):
                loss = model(torch.randn(4, 8)).float().square().mean()
            if step == overflow_at:
                loss = loss * float("inf")
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    return scaler, session.report().to_dict()


def test_a_class_bound_before_the_session_is_observed():
    scaler, report = _train(lambda: BoundBeforeTheSession("cpu", init_scale=1024.0))
    assert isinstance(scaler, _Observed) and type(scaler).__name__ == "GradScaler"
    assert report["uses"]["grad_scaler"] is True
    assert (report["steps"], report["skipped"], report["scale"]) == (3, [2], [1024.0, 1024.0, 512.0])
    assert not any("not observed" in note for note in report["notes"])


def test_a_scaler_made_before_the_session_is_reported_as_unobserved():
    scaler = torch.amp.GradScaler("cpu")
    _, report = _train(lambda: scaler)
    assert not isinstance(scaler, _Observed)
    assert report["uses"]["grad_scaler"] is False
    assert any("missing from this report" in note for note in report["notes"])


@pytest.fixture
def one_process_group(tmp_path):
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_sharded_grad_scaler_is_observed(one_process_group):
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    scaler, report = _train(lambda: ShardedGradScaler("cpu", init_scale=1024.0))
    assert isinstance(scaler, ShardedGradScaler) and isinstance(scaler, _Observed)
    assert report["uses"]["grad_scaler"] is True
    assert (report["steps"], report["skipped"], report["scale"]) == (3, [2], [1024.0, 1024.0, 512.0])


def test_classes_are_torch_own_again_after_the_session():
    _train(lambda: torch.amp.GradScaler("cpu"))
    assert not isinstance(BoundBeforeTheSession("cpu"), _Observed)


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch warns only when CUDA is missing")
def test_torch_constructor_warnings_still_point_at_the_caller():
    with trace_session(steps=None, script="train.py"):
        with pytest.warns(UserWarning, match="CUDA is not available") as record:
            scaler = torch.amp.GradScaler("cuda")
    assert isinstance(scaler, _Observed)
    assert [w.filename for w in record if "CUDA" in str(w.message)] == [__file__]
