"""Backward overflow origin (AMP504, phase "backward"): the module whose backward turned finite
gradients into inf/NaN, and how far the loss scale had to come down."""

import contextlib
import io
import math
import runpy
from pathlib import Path

import pytest
import torch
from torch import nn

from ampdoctor.trace.backward import (
    INPUT,
    OUTPUT,
    PARAMETER,
    BackwardWatch,
    GradEvent,
    find_origin,
    halvings_needed,
)
from ampdoctor.trace.numerics import ModuleInfo
from ampdoctor.trace.session import trace_session

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "trace"

BACKWARD_FIXTURE = FIXTURES / "backward_overflow.py"


def _events(*rows):
    """GradEvents from (module, side, value) rows in firing order, with their values."""
    modules: dict[str, ModuleInfo] = {}
    events, values = [], []
    for sequence, (path, call, side, value) in enumerate(rows, start=1):
        info = modules.setdefault(path, ModuleInfo(path, nn.Linear))
        events.append(GradEvent(sequence, call, info, side, len(values)))
        values.append([value])
    return events, values


def test_origin_is_the_first_module_that_turns_finite_into_inf():
    events, values = _events(
        ("model", 0, OUTPUT, 3.0),
        ("head", 1, OUTPUT, 3.0),
        ("head", 1, INPUT, 5.0),
        ("head", 1, PARAMETER, math.inf),
        ("body", 2, OUTPUT, 5.0),
        ("body", 2, PARAMETER, math.nan),  # downstream of head in time: not the origin
    )
    origin = find_origin(events, values, step=4, scale=1024.0)
    assert (origin.module, origin.side, origin.step, origin.scale) == ("head", PARAMETER, 4, 1024.0)
    assert origin.output_grad_max == 3.0


def test_an_inf_arriving_at_a_module_output_is_born_outside_the_modules():
    events, values = _events(("head", 0, OUTPUT, math.inf), ("head", 0, INPUT, math.nan))
    origin = find_origin(events, values, step=1, scale=65536.0)
    assert (origin.module, origin.side, origin.output_grad_max) == ("head", OUTPUT, None)


def test_a_module_that_receives_inf_is_not_the_origin():
    events, values = _events(
        ("a", 0, OUTPUT, 1.0), ("a", 0, INPUT, math.inf), ("b", 1, OUTPUT, math.inf), ("b", 1, INPUT, math.inf)
    )
    assert find_origin(events, values, 1, 2.0).module == "a"


def test_all_finite_has_no_origin():
    events, values = _events(("a", 0, OUTPUT, 1.0), ("a", 0, INPUT, 2.0), ("a", 0, PARAMETER, 3.0))
    assert find_origin(events, values, 1, 2.0) is None


@pytest.mark.parametrize(
    "unscaled,scale,expected",
    [
        (162.25, 65536.0, 8),
        (1.0, 65504.0, 0),
        (1.0, 65536.0, 1),
        (0.5, 65536.0, 0),
        (None, 65536.0, None),
        (0.0, 8.0, None),
    ],
)
def test_halvings_needed(unscaled, scale, expected):
    assert halvings_needed(unscaled, scale) == expected


def test_fixture_names_the_head_whose_weight_gradient_overflows(trace_cli):
    run = trace_cli(str(BACKWARD_FIXTURE), "--steps", "12", "--fail-on", "never")
    assert run.exit_code == 0, run.stderr
    findings = [f for f in run.report["findings"] if f["code"] == "AMP504"]
    assert len(findings) == 1
    extra = findings[0]["extra"]
    assert extra["phase"] == "backward"
    assert (extra["module"], extra["module_class"], extra["side"]) == ("head", "Linear", PARAMETER)
    assert extra["step"] == 1 and extra["scale"] == 65536.0
    # The scale backed off from 2**16 to 2**8 before a step went through: eight halvings.
    assert extra["halvings_needed"] == 8
    first_applied = next(step for step in range(1, 13) if step not in run.report["skipped"])
    assert run.report["scale"][first_applied - 1] == 256.0
    origin = run.report["backward_origin"]
    assert (origin["module"], origin["side"], origin["halvings_needed"]) == ("head", PARAMETER, 8)
    assert "backward pass" in findings[0]["message"] and "2**8" in findings[0]["message"]


def test_forward_overflow_stays_a_forward_finding(trace_cli):
    run = trace_cli(str(FIXTURES / "overflow_origin.py"), "--steps", "3", "--fail-on", "never")
    phases = [f["extra"]["phase"] for f in run.report["findings"] if f["code"] == "AMP504"]
    assert phases == ["forward"]


def test_healthy_float16_run_has_no_backward_origin(trace_cli):
    run = trace_cli(str(FIXTURES / "healthy_fp16.py"), "--steps", "6", "--fail-on", "info")
    assert run.report["findings"] == []


@pytest.mark.slow
def test_fixture_losses_are_bit_identical_with_and_without_tracing():
    plain = io.StringIO()
    with contextlib.redirect_stdout(plain):
        runpy.run_path(str(BACKWARD_FIXTURE), run_name="__main__")
    expected = plain.getvalue().splitlines()[:14]
    traced = io.StringIO()
    with contextlib.redirect_stdout(traced), trace_session(steps=14, record_ops_steps=2):
        runpy.run_path(str(BACKWARD_FIXTURE), run_name="__main__")
    # The 14th line is printed after the 14th update, where the session stops the script.
    assert traced.getvalue().splitlines() == expected[:13]


class _InPlaceNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.ReLU(inplace=True)
        self.out = nn.Linear(8, 1)

    def forward(self, x):
        return self.out(self.act(self.fc(x)))


def _train_in_place(steps: int) -> list[float]:
    torch.manual_seed(0)
    model = _InPlaceNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**24)  # overflows: watched iterations follow
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(torch.randn(16, 8)).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    return losses


def test_in_place_modules_train_identically_while_watched():
    reference = _train_in_place(10)
    with trace_session(steps=None, record_ops_steps=2) as session:
        traced = _train_in_place(10)
    assert traced == reference
    assert session.observations.steps == 10
    assert not session.observations.instrument_errors


def _three_float16_steps(model, optimizer, after_step=lambda: None) -> None:
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(3):
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(torch.randn(8, 4)).float().mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        after_step()


def test_parameter_hooks_are_removed_after_each_watched_iteration():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with trace_session(steps=None, record_ops_steps=3) as session:

        def only_while_watched() -> None:
            watch: BackwardWatch = session._backward
            assert not watch._handles or watch.active  # the next iteration's, if any, only while watched

        _three_float16_steps(model, optimizer, only_while_watched)
    for param in model.parameters():
        assert not param._backward_hooks
    assert not session._backward._handles


def _census(monkeypatch, watch_backward: bool) -> dict:
    """The op census of a small float16 CPU model over the op-recording window, in which the
    tracer registers its backward hooks (or, with ``watch_backward`` False, registers none)."""
    if not watch_backward:
        monkeypatch.setattr(BackwardWatch, "watch", lambda *args, **kwargs: None)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with trace_session(steps=None, record_ops_steps=2) as session:
        _three_float16_steps(model, optimizer)
    monkeypatch.undo()
    assert not session.observations.instrument_errors
    return dict(session.observations.ops)


def test_the_census_leaves_out_the_views_torch_makes_for_the_tracers_hooks(monkeypatch):
    """``register_multi_grad_hook`` finds a parameter's grad accumulator through
    ``p.view_as(p)`` (an aten ``view``); the model runs no view in its forward. The census's
    views with the backward hooks are those without them."""
    watched = _census(monkeypatch, watch_backward=True)
    unwatched = _census(monkeypatch, watch_backward=False)
    assert [key for key in watched if key.op in ("view", "view_as") and key.phase == "forward" and key.module] == []
    assert _views(watched) == _views(unwatched)


def _views(ops: dict) -> dict:
    return {key: count for key, count in ops.items() if key.op in ("view", "view_as")}


def _float16_loss_training(steps: int, **thresholds):
    """A float16 loss scaled by 2**16 overflows once (the scale itself does not fit float16):
    GradScaler skips one step while it calibrates, which is how it is meant to work."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    from ampdoctor.trace.rulebase import Thresholds

    with trace_session(steps=steps, thresholds=Thresholds(**thresholds)) as session:
        scaler = torch.amp.GradScaler("cpu")
        while True:
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = model(torch.randn(8, 4)).square().mean()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
    return session


def test_one_calibration_skip_is_observed_but_not_reported():
    session = _float16_loss_training(4)
    origin = session.observations.backward_origin
    assert (origin.module, origin.side, origin.step) == ("Linear", OUTPUT, 1)
    assert [r.skipped for r in session.observations.iterations] == [True, False, False, False]
    assert session.report().findings == []


def test_origin_outside_the_modules_is_reported_past_the_threshold():
    session = _float16_loss_training(4, origin_skips=1)
    (finding,) = [f for f in session.report().findings if f.code == "AMP504"]
    assert finding.extra["phase"] == "backward" and finding.extra["side"] == OUTPUT
    assert "outside every module" in finding.message


def test_nan_born_in_the_loss_code_is_named_as_nan(trace_cli):
    run = trace_cli(str(FIXTURES / "loss_scale_collapse.py"), "--steps", "12", "--fail-on", "never")
    (finding,) = [f for f in run.report["findings"] if f["code"] == "AMP504"]
    assert finding["extra"]["phase"] == "backward" and finding["extra"]["side"] == OUTPUT
    assert "already NaN" in finding["message"] and "lower loss scale does not cure it" in finding["message"]
    assert finding["module"] == "net.2"  # the last layer: its output receives the NaN from sqrt


def test_bfloat16_run_shows_no_float16_underflow_table(trace_cli):
    # Its gradients would lose elements in float16 (nonzero shares in the JSON), but none went
    # through float16: the table of float16 losses would describe nothing that happened.
    run = trace_cli(str(FIXTURES / "healthy_bf16.py"), "--steps", "4")
    assert any(g["lost_share"] > 0 for g in run.report["gradients"])
    assert "underflow-prone" not in run.stdout
    fp16 = trace_cli(str(FIXTURES / "underflow_gradients.py"), "--steps", "3", "--fail-on", "never")
    assert "underflow-prone" in fp16.stdout


class _TiedLM(nn.Module):
    """An embedding whose weight is also the output head's (weight tying, as in GPT-2)."""

    def __init__(self, vocab: int = 64, dim: int = 32) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.wte.weight
        nn.init.normal_(self.wte.weight, std=0.02)

    def forward(self, idx):
        return self.head(self.ln(self.wte(idx)))


def _train_tied(steps: int, reduction: str) -> list[float]:
    torch.manual_seed(0)
    model = _TiedLM()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cpu")
    losses = []
    for _ in range(steps):
        idx = torch.randint(0, 64, (8, 64))
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            logits = model(idx)
            loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), idx.flatten(), reduction=reduction)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    return losses


def test_tied_weight_gradient_is_attributed_to_the_module_that_used_it():
    # The head's share of the tied weight's gradient sums the loss's gradient over 512 positions
    # and overflows inside the head's backward; the leaf gradient is only complete after the
    # embedding's backward, at the very end, after the LayerNorm's own gradients.
    reference = _train_tied(4, "sum")
    with trace_session(steps=None, record_ops_steps=2) as session:
        traced = _train_tied(4, "sum")
    assert traced == reference
    origin = session.observations.backward_origin
    assert origin is not None
    assert (origin.module, origin.side) == ("head", PARAMETER)
    assert origin.output_grad_max is not None and math.isfinite(origin.output_grad_max)
    assert not session.observations.instrument_errors
    assert not session._backward._handles


def test_tied_weights_with_a_mean_loss_have_no_backward_origin():
    with trace_session(steps=None, record_ops_steps=2) as session:
        _train_tied(4, "mean")
    assert session.observations.backward_origin is None
    assert not session.observations.instrument_errors


def _origin_observations(skipped_scales: dict[int, float]):
    from ampdoctor.trace.backward import BackwardOrigin
    from ampdoctor.trace.observations import IterationRecord, Observations

    observations = Observations()
    # Finite iterations saw the head's weight gradient at 60 unscaled: 60 * 1024 fits in float16,
    # so the gradients alone say six halvings from 2**16.
    observations.backward_reference = {"head": 60.0}
    observations.backward_origin = BackwardOrigin(1, "head", "Linear", nn.Linear, PARAMETER, 65536.0, 1.0)
    observations.backward_skips = 6
    observations.iterations = [
        IterationRecord(step, scale=skipped_scales.get(step, 2.0 ** (17 - step)), skipped=step in skipped_scales)
        for step in range(1, 12)
    ]
    return observations


def test_amp504_advice_never_names_a_scale_the_run_skipped_at():
    from ampdoctor.trace.rulebase import Locator, Thresholds
    from ampdoctor.trace.rules.nonfinite_rules import backward_overflow_origin

    predicted = halvings_needed(60.0, 65536.0)
    assert predicted == 6  # 60 * 1024 fits: to 1024
    locator = Locator("train.py", {})
    # No skip at or below 1024: the gradients' own judgement stands.
    (finding,) = backward_overflow_origin(_origin_observations({1: 65536.0, 2: 32768.0}), Thresholds(), locator)
    assert "by 2**6 (to 1024)" in finding.message and "skipped steps" not in finding.message
    # Iteration 10 was skipped at 512, below the 1024 the gradients suggest: below 512, then.
    observations = _origin_observations({1: 65536.0, 2: 32768.0, 10: 512.0})
    (finding,) = backward_overflow_origin(observations, Thresholds(), locator)
    assert "by 2**8 (to 256)" in finding.message
    assert "iteration 10 was skipped at 512" in finding.message
    assert finding.extra["halvings_needed"] == 8
