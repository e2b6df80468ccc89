"""The batched device statistics compute exactly what their plain definitions say."""

import math
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils._pytree import tree_flatten

import ampdoctor.trace.gradients as gradients
from ampdoctor.trace.gradients import GradientMonitor, gradient_row
from ampdoctor.trace.numerics import DeviceBatch, ModuleRegistry, PendingIteration
from ampdoctor.trace.ops import float_tensors, max_abs
from ampdoctor.trace.session import trace_session

ROOT = Path(__file__).resolve().parents[2]


class _Session:
    def __init__(self) -> None:
        self.pending = PendingIteration()
        self.errors = []

    def instrument_failed(self, what, exc) -> None:
        self.errors.append((what, exc))


def _edge_case_gradients():
    """Gradients holding every class the statistics separate, in several dtypes and sizes (some
    larger than a chunk, some spanning chunk boundaries)."""
    torch.manual_seed(0)
    special = torch.tensor(
        [
            0.0,
            -0.0,
            2.0**-30,
            -(2.0**-25),
            2.0**-24,
            2.0**-20,
            2.0**-20 * 0.999,
            -(2.0**-14),
            2.0**-14 * 0.999,
            3.0,
            1e-40,
            -1e-42,
            1.4e-45,  # float32 subnormals (the last underflows when scaled down)
            math.inf,
            -math.inf,
            math.nan,
            -math.nan,
            1e30,
        ]
    )
    return [
        special,
        torch.randn(300) * 2.0**-20,
        (torch.randn(5, 40) * 1e-6).masked_fill(torch.rand(5, 40) < 0.3, 0.0),
        torch.randn(7),
        (torch.randn(130) * 2.0**-18).to(torch.bfloat16),
        (torch.randn(90) * 1e-3).to(torch.float16),
        torch.zeros(33),
        torch.full((12,), math.nan),
    ]


@pytest.mark.parametrize(
    "scale, grads_scaled",
    [(None, False), (2.0**16, False), (2.0**16, True), (1000.0, False), (0.25, False), (3.0, True)],
)
def test_chunked_gradient_statistics_equal_the_plain_definition(monkeypatch, scale, grads_scaled):
    monkeypatch.setattr(gradients, "GRADIENT_CHUNK", 64)  # many chunks and split gradients
    grads = _edge_case_gradients()
    params = [nn.Parameter(torch.zeros(g.shape, dtype=g.dtype)) for g in grads]
    for param, grad in zip(params, grads):
        param.grad = grad.clone()
    optimizer = torch.optim.SGD(params, lr=0.1)
    session = _Session()
    monitor = GradientMonitor(ModuleRegistry(), session)
    scale_tensor = None if scale is None else torch.tensor(scale)
    monitor.capture(optimizer, "SGD#1", scale_tensor, grads_scaled)
    assert session.errors == []
    values = session.pending.batch.read()
    (capture,) = session.pending.gradients
    rows = capture.rows(values)
    assert [info.name for info, _ in rows] == [f"SGD#1.param_groups[0][{i}]" for i in range(len(grads))]
    for (info, row), grad in zip(rows, grads):
        expected = gradient_row(grad, scale_tensor, grads_scaled).tolist()
        assert row == pytest.approx(expected, rel=1e-6, abs=1e-9), info.name
    # The gradients themselves are untouched (NaN compared as a number, so it counts too).
    assert all(
        torch.equal(torch.nan_to_num(p.grad, nan=7.0), torch.nan_to_num(g, nan=7.0)) for p, g in zip(params, grads)
    )


def test_large_chunks_count_exactly(monkeypatch):
    """An accelerator's chunks (2**20 elements) give per-piece row sums far above 2**24, which
    float32 cannot hold exactly: the counts come out exact all the same, gradient by gradient,
    equal to the plain definition's (a count off by one would show here)."""
    monkeypatch.setattr(gradients, "GRADIENT_CHUNK", gradients.ACCELERATOR_GRADIENT_CHUNK)
    assert gradients.chunk_elements(torch.device("cpu")) == 1 << 20
    torch.manual_seed(1)
    size = (1 << 20) + 3  # one piece fills a chunk, the rest starts the next
    grad = torch.randn(size) * 1e-3
    grad[torch.randperm(size)[:1000]] = 2.0**-22  # float16-subnormal once scaled by 4
    grad[:5] = 0.0
    grad[7] = math.nan
    grad[-1] = math.inf
    small = torch.randn(77) * 2.0**-26
    grads = [grad, small]
    params = [nn.Parameter(torch.zeros(g.shape)) for g in grads]
    for param, g in zip(params, grads):
        param.grad = g.clone()
    session = _Session()
    scale = torch.tensor(4.0)
    GradientMonitor(ModuleRegistry(), session).capture(torch.optim.SGD(params, lr=0.1), "SGD#1", scale, False)
    assert session.errors == []
    (capture,) = session.pending.gradients
    assert len(capture.chunks) == 2
    rows = capture.rows(session.pending.batch.read())
    for (_, row), g in zip(rows, grads):
        numel = g.numel()
        expected = gradient_row(g, scale, False).tolist()
        # Compared as counts of elements: exact.
        assert [round(share * numel) for share in row[:5]] == [round(share * numel) for share in expected[:5]]
        assert row[5] == pytest.approx(expected[5], rel=1e-6)
    assert round(rows[0][1][3] * size) == 2 and round(rows[0][1][0] * size) == 5


@pytest.mark.parametrize("fused", [False, True])
def test_gradient_check_finds_the_nonfinite_gradients_of_the_plain_definition(monkeypatch, fused):
    """Iterations without the full statistics still tell, per parameter, whether the gradient
    held inf/NaN, in agreement with ``gradient_row``'s non-finite share; with one ``aminmax``
    per gradient (CPU) or one fused max-norm per device and dtype (CUDA; the same code on CPU)."""
    if fused:
        monkeypatch.setattr(gradients, "_FUSED_CHECK_DEVICES", frozenset({"cpu"}))
    else:
        monkeypatch.setattr(torch, "_foreach_norm", None)  # the per-gradient path only
    grads = _edge_case_gradients()
    params = [nn.Parameter(torch.zeros(g.shape, dtype=g.dtype)) for g in grads]
    for param, grad in zip(params, grads):
        param.grad = grad.clone()
    session = _Session()
    GradientMonitor(ModuleRegistry(), session).capture(
        torch.optim.SGD(params, lr=0.1), "SGD#1", None, False, full=False
    )
    assert session.errors == [] and session.pending.gradients == []
    (capture,) = session.pending.gradient_checks
    flags = capture.nonfinite(session.pending.batch.read())
    assert [info.name for info, _ in flags] == [f"SGD#1.param_groups[0][{i}]" for i in range(len(grads))]
    expected = [gradient_row(grad, None, False)[3].item() > 0 for grad in grads]
    assert [flag for _, flag in flags] == expected
    assert expected.count(True) == 2  # the special values and the all-NaN gradient
    # -inf alone is found too (it is only the minimum).
    params[3].grad = torch.tensor([1.0, -math.inf, 2.0, 0.0, 5.0, 6.0, 7.0])
    session = _Session()
    GradientMonitor(ModuleRegistry(), session).capture(
        torch.optim.SGD(params, lr=0.1), "SGD#1", None, False, full=False
    )
    flags = session.pending.gradient_checks[0].nonfinite(session.pending.batch.read())
    assert [flag for _, flag in flags] == [True, False, False, True, False, False, False, True]


def test_gradients_known_finite_are_listed_without_device_work(monkeypatch):
    param = nn.Parameter(torch.zeros(3))
    param.grad = torch.ones(3)
    session = _Session()
    monkeypatch.setattr(torch, "aminmax", None)  # any device op would fail
    monkeypatch.setattr(torch, "_foreach_norm", None)
    monkeypatch.setattr(gradients, "_FUSED_CHECK_DEVICES", frozenset({"cpu"}))
    GradientMonitor(ModuleRegistry(), session).capture(
        torch.optim.SGD([param], lr=0.1), "SGD#1", None, False, full=False, known_finite=True
    )
    assert session.errors == [] and session.pending.batch._parts == []
    (capture,) = session.pending.gradient_checks
    assert capture.nonfinite([]) == [(capture.params[0], False)]


@pytest.mark.parametrize("full", [True, False])
def test_sparse_gradients_without_entries_are_skipped(full):
    dense = nn.Parameter(torch.zeros(3))
    dense.grad = torch.tensor([1.0, -2.0, 0.0])
    sparse = nn.Parameter(torch.zeros(4, 2))
    sparse.grad = torch.sparse_coo_tensor(
        torch.zeros((2, 0), dtype=torch.int64), torch.zeros(0), (4, 2), check_invariants=True
    )
    session = _Session()
    GradientMonitor(ModuleRegistry(), session).capture(
        torch.optim.SGD([dense, sparse], lr=0.1), "SGD#1", None, False, full
    )
    assert session.errors == []
    values = session.pending.batch.read()
    if full:
        rows = session.pending.gradients[0].rows(values)
    else:
        rows = session.pending.gradient_checks[0].nonfinite(values)
    assert [info.name for info, _ in rows] == ["SGD#1.param_groups[0][0]"]


def test_activation_hooks_drop_the_calls_of_forwards_that_raised():
    """A child whose forward raises (caught by its parent) never runs its post-hook: the parent's
    output is still attributed to the parent, and nothing stays open."""

    class Fails(nn.Module):
        def forward(self, x):
            raise ValueError("not this way")

    class Parent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fallible = Fails()
            self.fallback = nn.Linear(2, 2)

        def forward(self, x):
            try:
                return self.fallible(x)
            except ValueError:
                return self.fallback(x) * 1000.0

    model = Parent()
    with trace_session() as session:
        for _ in range(3):
            model(torch.ones(1, 2))
        assert session._activations._open_calls == []
        session.flush_partial()
    activations = session.observations.activations
    assert set(activations) == {"Parent", "fallback"}
    assert activations["Parent"].calls == activations["fallback"].calls == 3
    assert activations["Parent"].max_abs["float32"] > 100 > activations["fallback"].max_abs["float32"]


def test_chunked_gradient_statistics_count_nan_as_nonfinite_and_nowhere_else():
    grad = torch.tensor([math.nan, -math.nan, 0.0, 2.0**-26])
    param = nn.Parameter(torch.zeros(4))
    param.grad = grad
    session = _Session()
    GradientMonitor(ModuleRegistry(), session).capture(torch.optim.SGD([param], lr=0.1), "SGD#1", None, False)
    ((_, row),) = session.pending.gradients[0].rows(session.pending.batch.read())
    assert row == [0.25, 0.25, 0.0, 0.5, 0.0, 2.0**-26]


def test_gradient_scratch_is_released_with_the_session():
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with trace_session() as session:
        scaler = torch.amp.GradScaler("cpu")
        for _ in range(2):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = model(torch.randn(8, 4)).square().mean()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        assert session._gradients._scratch  # reused across iterations while tracing
    assert session._gradients._scratch == {}
    assert session.observations.gradients["weight"].iterations == 2


def test_device_batch_reads_every_dtype_and_shape_back_in_order():
    batch = DeviceBatch()
    slots = [
        batch.add(torch.tensor(1.5, dtype=torch.bfloat16)),
        batch.add(torch.tensor([1, 2, 3], dtype=torch.int32)),
        batch.add(torch.tensor(-2.0)),
        batch.add(torch.tensor([[0.5, 65504.0]], dtype=torch.float16)),
        batch.add(torch.tensor(3.0, dtype=torch.bfloat16)),
    ]
    values = batch.read()
    assert [values[s] for s in slots] == [[1.5], [1.0, 2.0, 3.0], [-2.0], [0.5, 65504.0], [3.0]]


@pytest.mark.parametrize("region_dtype", [torch.bfloat16, torch.float16])
def test_device_batch_reads_inside_an_autocast_region_of_another_dtype(region_dtype):
    # Read where the script's region is still open (a step inside autocast): cat/stack must not
    # be cast to the region's dtype, which raises for the other half type and narrows float64.
    batch = DeviceBatch()
    slots = [
        batch.add(torch.tensor([0.5, 65504.0], dtype=torch.float16)),
        batch.add(torch.tensor([0.25], dtype=torch.float16)),
        batch.add(torch.tensor([1.5, 3.0], dtype=torch.bfloat16)),
        batch.add(torch.tensor(2.0, dtype=torch.bfloat16)),
        batch.add(torch.tensor(4.0, dtype=torch.bfloat16)),
        batch.add(torch.tensor(1 / 3, dtype=torch.float64)),
        batch.add(torch.tensor(1 / 3, dtype=torch.float64)),
    ]
    with torch.autocast("cpu", dtype=region_dtype):
        values = batch.read()
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == region_dtype
    assert not torch.is_autocast_enabled("cpu")
    third = float(torch.tensor(1 / 3, dtype=torch.float32))
    assert [values[s] for s in slots] == [[0.5, 65504.0], [0.25], [1.5, 3.0], [2.0], [4.0], [third], [third]]


def test_abs_max_slots_read_the_largest_magnitude_and_propagate_nan():
    batch = DeviceBatch()
    plain = batch.add_abs_max(list(torch.aminmax(torch.tensor([-7.0, 3.0]).to(torch.bfloat16))))
    mixed = batch.add_abs_max([torch.tensor(-1.0), torch.tensor(2.0), torch.tensor(0.5, dtype=torch.float16)])
    with_nan = batch.add_abs_max([torch.tensor(1.0), torch.tensor(math.nan)])
    values = batch.read()
    assert values[plain] == [7.0] and values[mixed] == [2.0]
    assert math.isnan(values[with_nan][0])


def test_activation_extremes_give_max_abs_of_every_tensor():
    tensors = [torch.tensor([[-3.0, 1.0]]), torch.empty(0), torch.tensor([2.5], dtype=torch.bfloat16)]
    batch = DeviceBatch()
    slot = batch.add_abs_max(max_abs(tensors))
    assert batch.read()[slot] == [3.0]
    assert max_abs([torch.empty(0)]) == []


Pair = namedtuple("Pair", "first second")


@pytest.mark.parametrize(
    "tree",
    [
        torch.ones(2),
        torch.ones(2, dtype=torch.int64),
        (torch.ones(1), 3, None, [torch.zeros(2, dtype=torch.float16), (torch.ones(1, dtype=torch.bool),)]),
        ((torch.ones(1), 1.5), {"b": torch.ones(3), "a": [torch.ones(1, dtype=torch.bfloat16)]}),
        [Pair(torch.ones(1), torch.zeros(1)), torch.Size([2, 3]), torch.float16, "text"],
        {"x": {"y": (torch.ones(1),)}},
    ],
)
def testfloat_tensors_match_a_pytree_flatten(tree):
    leaves, _ = tree_flatten(tree)
    expected = [t for t in leaves if isinstance(t, torch.Tensor) and t.is_floating_point()]
    found = float_tensors(tree)
    assert len(found) == len(expected) and all(a is b for a, b in zip(found, expected))


def test_op_ranges_are_measured_inside_modules_only_and_all_ops_are_counted():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    with trace_session(record_ops_steps=5) as session:
        scaler = torch.amp.GradScaler("cpu")
        for _ in range(2):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(torch.randn(8, 4)).float().square().mean()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        census_ranges = dict(session._census.ranges)
    assert census_ranges and all(module is not None for module, _ in census_ranges)
    assert {"0", "2"} <= {module for module, _ in census_ranges}
    counts = session.observations.ops
    assert any(key.module is None for key in counts)  # the optimizer's ops are still counted
    assert sum(c for k, c in counts.items() if k.op == "addmm" and k.phase == "forward") == 4


@pytest.mark.slow
def test_overhead_benchmark_runs_and_prints_its_table(tmp_path):
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "trace_overhead.py"),
        "--steps",
        "2",
        "--repeats",
        "1",
        "--warmup",
        "1",
        "--d-model",
        "16",
        "--heads",
        "2",
        "--seq",
        "8",
        "--batch",
        "2",
        "--layers",
        "1",
        "--vocab",
        "32",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for label in (
        "untraced iteration",
        "traced, steady state",
        "traced, recording window (K=2)",
        "peak RSS untraced",
        "peak RSS traced",
    ):
        assert any(line.startswith(f"| {label} |") for line in lines), label


def test_boundary_row_counts_zeros_subnormals_and_coarse_subnormals_of_float16_gradients():
    from ampdoctor.trace.activations import boundary_row

    values = [0.0, -0.0, 2.0**-24, -(2.0**-21), 2.0**-20, 2.0**-15, -(2.0**-14), 1.0, float("nan"), float("inf")]
    grads = [torch.tensor(values[:5], dtype=torch.float16), torch.tensor(values[5:], dtype=torch.float16)]
    zeros, subnormal, coarse = boundary_row(grads).tolist()
    assert zeros == pytest.approx(2 / 10)  # 0.0 and -0.0
    assert subnormal == pytest.approx(4 / 10)  # 2**-24, 2**-21, 2**-20, 2**-15: nonzero below 2**-14
    assert coarse == pytest.approx(2 / 10)  # 2**-24 and 2**-21: nonzero below 2**-20
