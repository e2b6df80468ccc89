"""The session installs its hooks and removes every one of them, observes without changing the
training numerics, and serves the Python API."""

import contextlib
import io
import json
import runpy
import warnings
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
import torch.cpu.amp
import torch.cuda.amp
import torch.optim.optimizer as optimizer_module
from torch import nn
from torch.nn.modules import module as module_module

import ampdoctor.trace.scaler as traced_scaler
from ampdoctor.trace.runner import Target, run_target
from ampdoctor.trace.session import TraceSession, active_session, trace_session

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def global_state():
    """Everything a session may touch, by identity or by content."""
    return {
        "amp.GradScaler": torch.amp.GradScaler,
        "amp.grad_scaler.GradScaler": torch.amp.grad_scaler.GradScaler,
        "cuda.amp.GradScaler": torch.cuda.amp.GradScaler,
        "cpu.amp.GradScaler": torch.cpu.amp.GradScaler,
        "autocast.__enter__": torch.amp.autocast_mode.autocast.__enter__,
        "autocast.__exit__": torch.amp.autocast_mode.autocast.__exit__,
        "autograd.backward": torch.autograd.backward,
        "optimizer pre hooks": OrderedDict(optimizer_module._global_optimizer_pre_hooks),
        "optimizer post hooks": OrderedDict(optimizer_module._global_optimizer_post_hooks),
        "forward pre hooks": OrderedDict(module_module._global_forward_pre_hooks),
        "forward hooks": OrderedDict(module_module._global_forward_hooks),
        "backward hooks": OrderedDict(module_module._global_backward_hooks),
        "dispatch modes": torch._C._len_torch_dispatch_stack(),
        "scaler observer": traced_scaler._observer,
        "active session": active_session(),
    }


def run_script(name: str, steps=None, **options):
    path = str(SCRIPTS / name)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        with TraceSession(steps=steps, script=path, **options) as session:
            session.outcome = run_target(Target(script=path))
    return session, out.getvalue()


def test_hooks_are_installed_during_and_gone_after_the_session():
    before = global_state()
    with TraceSession(steps=None) as session:
        during = global_state()
        assert torch.amp.GradScaler is traced_scaler.TracedGradScaler
        assert torch.cuda.amp.GradScaler is traced_scaler.TracedCudaGradScaler
        assert torch.cpu.amp.GradScaler is traced_scaler.TracedCpuGradScaler
        assert during["dispatch modes"] == before["dispatch modes"] + 1  # the op census
        assert len(during["optimizer pre hooks"]) == len(before["optimizer pre hooks"]) + 1
        assert len(during["forward hooks"]) > len(before["forward hooks"])
        assert during["backward hooks"] == before["backward hooks"]  # never full backward hooks
        assert active_session() is session
    assert global_state() == before


@pytest.mark.parametrize("name", ["crash.py", "interrupt.py", "loop_forever.py", "two_optimizers.py"])
def test_hooks_are_gone_however_the_script_ends(name):
    before = global_state()
    run_script(name, steps=4)
    assert global_state() == before


def test_hooks_are_gone_after_an_exception_escapes_the_block():
    before = global_state()
    with pytest.raises(ZeroDivisionError):
        with trace_session():
            model = nn.Linear(2, 2)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                model(torch.randn(3, 2))
            1 / 0  # noqa: B018  (the error the session must survive)
    assert global_state() == before


def test_census_window_ends_after_k_iterations_and_hooks_follow():
    modes = torch._C._len_torch_dispatch_stack()
    session, _ = run_script("loop_forever.py", steps=4, record_ops_steps=1)
    assert session.observations.op_steps == 1
    assert torch._C._len_torch_dispatch_stack() == modes
    addmm = {key.module: count for key, count in session.observations.ops.items() if key.op == "addmm"}
    assert addmm == {"0": 1, "2": 1}  # two Linear layers, one iteration


def test_a_quiet_block_left_open_by_an_earlier_stop_does_not_silence_the_next_census(monkeypatch):
    """A ``--timeout`` stop landing inside a quiet block's start leaves its count behind: the
    next session starts from none."""
    from ampdoctor.trace import ops

    monkeypatch.setattr(ops, "_quiet_depth", 1)  # a block entered, its end never run
    session, _ = run_script("loop_forever.py", steps=4, record_ops_steps=1)
    addmm = {key.module: count for key, count in session.observations.ops.items() if key.op == "addmm"}
    assert addmm == {"0": 1, "2": 1}


@pytest.mark.slow
def test_losses_and_weights_are_bit_identical_with_and_without_tracing():
    reference = io.StringIO()
    with contextlib.redirect_stdout(reference):
        runpy.run_path(str(SCRIPTS / "seeded_hex.py"), run_name="__main__")
    session, traced = run_script("seeded_hex.py", steps=None, record_ops_steps=3)
    assert traced == reference.getvalue()
    printed = [float.fromhex(line.split()[1]) for line in traced.splitlines() if line.startswith("loss")]
    assert [r.loss for r in session.observations.iterations] == printed
    scales = [float(line.split()[3]) for line in traced.splitlines() if line.startswith("loss")]
    assert [r.scale_after for r in session.observations.iterations] == scales
    assert any(r.skipped for r in session.observations.iterations)  # init_scale 2**24 overflows


def test_skips_of_a_fused_optimizer_come_from_found_inf():
    session, out = run_script("fused_overflow.py", steps=None)
    records = session.observations.iterations
    printed = [float(line.split()[1]) for line in out.splitlines()]
    assert [r.scale_after for r in records] == printed
    skipped = [r.step for r in records if r.skipped]
    backoffs = [r.step for r in records if r.scale_event == "backoff"]
    assert skipped and skipped == backoffs
    assert session.observations.plain_optimizer_steps == 0  # all went through scaler.step


def test_scaler_behaviour_is_unchanged():
    def scales(make_scaler):
        torch.manual_seed(0)
        model = nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = make_scaler()
        seen = []
        for step in range(6):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = model(torch.full((2, 4), 100.0 * step)).sum() * 1e3
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            seen.append((scaler.get_scale(), [p.detach().clone() for p in model.parameters()]))
        return seen

    make = lambda: torch.amp.GradScaler("cpu", init_scale=2.0**20, growth_interval=2)  # noqa: E731
    plain = scales(make)
    with trace_session():
        traced = scales(make)
    assert [s for s, _ in plain] == [s for s, _ in traced]
    for (_, a), (_, b) in zip(plain, traced):
        assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_deprecated_cuda_scaler_is_traced_and_warns_like_torch():
    with trace_session():
        with pytest.warns(FutureWarning, match="torch.cuda.amp.GradScaler"):
            scaler = torch.cuda.amp.GradScaler()
        assert isinstance(scaler, traced_scaler.TracedGradScaler)
    assert isinstance(scaler, torch.amp.GradScaler)


def test_python_api_stops_the_block_and_continues_after_it():
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    done = 0
    with trace_session(steps=3) as session:
        scaler = torch.amp.GradScaler("cpu")
        while True:
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = model(torch.randn(8, 4)).square().mean()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            done += 1
    assert done == 2  # the 3rd update raised the stop
    report = session.report()
    assert report.completed and session.outcome.reason == "steps"
    assert report.observations.steps == 3
    assert report.findings == []
    data = json.loads(report.to_json())
    assert data["steps"] == 3 and data["stopped"] == "steps"
    out = io.StringIO()
    from rich.console import Console

    report.print(Console(file=out, width=120))
    assert "No mixed-precision problems found" in out.getvalue()


def test_python_api_reports_findings_with_locations():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with trace_session(steps=2, script="train_in_notebook") as session:
        for _step in range(5):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = nn.functional.cross_entropy(model(torch.randn(8, 4)), torch.tensor([0, 1] * 4))
            loss.backward()
            optimizer.step()
    findings = session.report().findings
    assert [f.code for f in findings if f.code == "AMP510"] == ["AMP510"]
    finding = next(f for f in findings if f.code == "AMP510")
    # The finding points at the backward call in the caller's own file, whatever `script` says.
    backward_line = next(
        i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1) if "            loss.backward()" in line
    )
    assert (finding.location.path, finding.location.line) == (str(Path(__file__).resolve()), backward_line)
    assert finding.severity.label == "warning"


def test_findings_without_a_user_frame_point_at_the_script():
    source = (
        "import torch\n"
        "from torch import nn\n"
        "model = nn.Linear(4, 2)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(3):\n"
        "    optimizer.zero_grad()\n"
        "    with torch.autocast('cpu', dtype=torch.float16):\n"
        "        loss = model(torch.randn(8, 4)).float().mean()\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
    )
    import threading

    code = compile(source, "<notebook cell>", "exec")
    with trace_session(steps=None, script="train_in_notebook") as session:
        # Run from the standard library's frames only, as a notebook kernel runs a cell.
        cell = threading.Thread(target=exec, args=(code, {}))
        cell.start()
        cell.join()
    finding = next(f for f in session.report().findings if f.code == "AMP510")
    assert finding.location.path == "train_in_notebook"


def test_sessions_do_not_nest():
    with trace_session():
        with pytest.raises(RuntimeError, match="already active"):
            with trace_session():
                pass


@pytest.mark.slow
def test_session_keeps_no_module_or_tensor_alive():
    import gc
    import weakref

    with trace_session(steps=None) as session:
        model = nn.Linear(3, 3)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                model(torch.randn(2, 3)).sum().backward()
            optimizer.step()
    model_ref, weight_ref = weakref.ref(model), weakref.ref(model.weight)
    del model, optimizer
    gc.collect()
    assert model_ref() is None and weight_ref() is None
    assert session.report().observations.steps == 2


def test_progress_reports_every_iteration():
    seen = []
    run_script("loop_forever.py", steps=3, progress=lambda *args: seen.append(args))
    assert [(step, total) for step, total, _, _ in seen] == [(1, 3), (2, 3), (3, 3)]
    assert all(scale == 65536.0 and skipped == 0 for _, _, scale, skipped in seen)


def test_json_schema_has_the_documented_keys(trace_cli):
    run = trace_cli(str(SCRIPTS / "early_end.py"))
    report = run.report
    for key in (
        "version",
        "script",
        "steps",
        "completed",
        "error",
        "findings",
        "scale",
        "skipped",
        "loss",
        "ops",
        "gradients",
        "activations",
        "boundaries",
        "origin",
        "notes",
        "uses",
        "gradient_interval",
    ):
        assert key in report
    op = report["ops"][0]
    assert set(op) == {"op", "module", "autocast", "phase", "input_dtypes", "output_dtype", "count"}
    from ampdoctor.trace.ops import MATMUL_OPS

    is_matmul = [o["op"] in MATMUL_OPS for o in report["ops"]]
    assert is_matmul[0] and is_matmul == sorted(is_matmul, reverse=True)  # matmul-class first
    assert {o["autocast"] for o in report["ops"]} >= {"on", "off"}
    assert {"forward", "backward"} <= {o["phase"] for o in report["ops"]}
    gradient = report["gradients"][0]
    assert gradient["name"] == "0.weight" and gradient["module"] == "0" and gradient["iterations"] == 3
    for field in ("zero", "below_subnormal", "subnormal", "nonfinite", "max_abs", "lost_share", "sampled_iterations"):
        assert field in gradient


def test_scaler_created_before_the_session_is_stated_not_misreported():
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    with trace_session(steps=3) as session:
        for _step in range(5):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = model(torch.randn(8, 4)).square().mean()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
    report = session.report()
    assert "AMP510" not in {f.code for f in report.findings}
    assert any("made before tracing began" in note for note in report.notes)


def test_a_disabled_scaler_created_before_the_session_gets_no_untraced_scaler_note():
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    with trace_session(steps=3) as session:
        for _step in range(5):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(torch.randn(8, 4)).float().square().mean()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
    report = session.report()
    assert session.observations.steps == 3
    assert not any("made before tracing began" in note for note in report.notes)


@pytest.mark.parametrize(
    "made", ["torch.amp.GradScaler('cpu', enabled=False)", "torch.cuda.amp.GradScaler(enabled=False)"]
)
def test_a_disabled_scaler_made_inside_the_run_gets_no_untraced_scaler_note(made):
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with trace_session(steps=3) as session:
            scaler = eval(made)
            for _step in range(5):
                optimizer.zero_grad()
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = model(torch.randn(8, 4)).float().square().mean()
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
    report = session.report()
    assert session.observations.steps == 3
    assert not any("before tracing" in note for note in report.notes), report.notes
    assert not any("session" in note for note in report.notes), report.notes


def test_gradient_accumulation_is_one_iteration_per_update_with_the_summed_loss():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [torch.randn(8, 4) for _ in range(6)]
    micro_losses = []
    with trace_session() as session:
        scaler = torch.amp.GradScaler("cpu")
        for index, x in enumerate(batches):
            with torch.autocast("cpu", dtype=torch.float16):
                loss = model(x).square().mean() / 3
            micro_losses.append(loss.item())
            scaler.scale(loss).backward()
            if (index + 1) % 3 == 0:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
    records = session.observations.iterations
    assert len(records) == 2
    assert records[0].loss == pytest.approx(sum(micro_losses[:3]), rel=1e-6)
    assert records[1].loss == pytest.approx(sum(micro_losses[3:]), rel=1e-6)
    assert session.observations.backward_calls == 6


def test_a_failing_instrument_removes_itself_and_never_breaks_the_script(monkeypatch):
    import ampdoctor.trace.activations as activations

    def broken(tensors):
        raise RuntimeError("cannot measure this tensor")

    monkeypatch.setattr(activations, "max_abs", broken)
    before = global_state()
    session, out = run_script("early_end.py", steps=None)
    assert session.outcome.reason == "end" and "done" in out
    assert session.observations.steps == 3  # the rest of the tracing went on
    notes = session.report().notes
    assert any("activation hooks stopped: RuntimeError: cannot measure this tensor" in n for n in notes)
    assert global_state() == before


def test_overflow_after_the_census_window_still_names_the_op():
    session, _ = run_script("late_overflow.py", steps=None, record_ops_steps=2)
    origin = session.observations.origin
    assert (origin.step, origin.module, origin.module_class) == (4, "Net", "Net")
    finding = next(f for f in session.report().findings if f.code == "AMP504")
    assert finding.extra["op"] == "exp"
    assert session.observations.op_steps == 2  # the extra census iteration is not in the table
    assert finding.location.line == 15  # the forward statement that ran exp()
    assert finding.extra["class_line"] == 8  # `class Net` in the script


@pytest.mark.parametrize(
    "interval, record_ops_steps, sampled",
    [(4, 2, [1, 2, 4, 8]), (1, 2, list(range(1, 10))), (3, 0, [1, 3, 6, 9]), (5, 4, [1, 2, 3, 4, 5])],
)
@pytest.mark.slow
def test_gradient_shares_are_sampled_on_the_documented_iterations(interval, record_ops_steps, sampled):
    session, _ = run_script("loop_forever.py", steps=9, record_ops_steps=record_ops_steps, gradient_interval=interval)
    stats = session.observations.gradients
    assert set(stats) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    for gradient in stats.values():
        assert (gradient.iterations, gradient.sampled_iterations) == (9, len(sampled))
    data = session.report().to_dict()
    assert data["gradient_interval"] == interval
    assert {g["sampled_iterations"] for g in data["gradients"]} == {len(sampled)}
    assert {g["iterations"] for g in data["gradients"]} == {9}


def test_gradient_interval_must_be_positive():
    with pytest.raises(ValueError, match="gradient_interval"):
        TraceSession(gradient_interval=0)


def test_nonfinite_gradients_are_seen_on_every_iteration_whatever_the_interval():
    """The loss-scale collapse fixture has NaN gradients on every iteration: which parameters
    held them and first_nonfinite_step must not depend on the sampling of the shares."""
    fixture = str(SCRIPTS.parents[2] / "fixtures" / "trace" / "loss_scale_collapse.py")

    def trace(interval):
        with contextlib.redirect_stdout(io.StringIO()):
            with TraceSession(steps=9, script=fixture, record_ops_steps=0, gradient_interval=interval) as session:
                session.outcome = run_target(Target(script=fixture))
        return session

    every, sampled = trace(1), trace(1000)
    assert [g.sampled_iterations for g in sampled.observations.gradients.values()] == [1] * 4
    records = [r.nonfinite_params for r in every.observations.iterations]
    assert all(records) and [r.nonfinite_params for r in sampled.observations.iterations] == records
    for name, stats in every.observations.gradients.items():
        other = sampled.observations.gradients[name]
        assert (other.iterations, other.first_nonfinite_step) == (stats.iterations, stats.first_nonfinite_step)
    assert [f.to_dict() for f in sampled.report().findings] == [f.to_dict() for f in every.report().findings]


def test_the_gradient_check_is_skipped_only_when_the_scaler_found_no_inf(monkeypatch):
    """On the CPU the scaler's found_inf is read for free: iterations without the full statistics
    whose gradients it found finite need no check of their own; the others still get one."""
    from ampdoctor.trace.gradients import GradientMonitor

    calls = []
    original = GradientMonitor.capture

    def spy(self, optimizer, label, scale, grads_scaled, full=True, known_finite=False):
        calls.append((full, known_finite))
        return original(self, optimizer, label, scale, grads_scaled, full, known_finite)

    monkeypatch.setattr(GradientMonitor, "capture", spy)
    run_script("loop_forever.py", steps=5, record_ops_steps=0, gradient_interval=100)
    assert calls == [(True, False)] + [(False, True)] * 4
    calls.clear()
    run_script("seeded_hex.py", steps=None, record_ops_steps=0, gradient_interval=100)
    session_skips = [known for full, known in calls if not full]
    assert False in session_skips and True in session_skips  # init_scale 2**24 overflows at first


def test_the_census_mode_is_popped_once_however_a_stop_interrupts_its_removal():
    """A stop (``--timeout``) can land right after the census's dispatch mode is popped, before
    the census notes it: removing it again must neither raise nor pop another mode."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    from ampdoctor.trace.ops import AutocastTracker, OpCensus

    census = OpCensus(AutocastTracker())
    census.install()
    mode = census._mode
    assert _get_current_dispatch_mode_stack()[-1] is mode
    mode.__exit__(None, None, None)  # popped: the stop lands before ``_mode`` is cleared
    census.remove()
    assert not census.active and _get_current_dispatch_mode_stack() == []
    torch.ones(2) + 1  # the dispatcher still works


def test_a_missing_update_met_at_unscale_names_unscale_in_amp202():
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(RuntimeError), trace_session(steps=4) as session:
        scaler = torch.amp.GradScaler("cpu")
        for _step in range(3):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = model(torch.randn(8, 4)).float().square().mean()
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)  # the second iteration comes back here without an update
            scaler.step(optimizer)
    (finding,) = [f for f in session.report().findings if f.code == "AMP202"]
    assert finding.message.startswith("`scaler.unscale_(")
    assert "after `scaler.step(" in finding.message and "refuses to unscale again" in finding.message
