"""AMP104–AMP107, AMP301–AMP303, AMP402–AMP403 and the AMP101/AMP106/AMP301 fixes: edge cases on
both sides of each rule, and fixes applied to copies of the fixtures."""

from __future__ import annotations

import difflib
import json
import shutil
import textwrap
from pathlib import Path

import libcst as cst
import pytest
from click.testing import CliRunner
from helpers import fix_text, lint_text

from ampdoctor.cli import main

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "lint"


def codes(source: str, *wanted: str) -> list[tuple[int, str]]:
    found = lint_text(textwrap.dedent(source))
    return sorted((f.location.line, f.code) for f in found if not wanted or f.code in wanted)


# --------------------------------------------------------------------------------------
# AMP104
# --------------------------------------------------------------------------------------


def test_amp104_upcast_through_a_variable_made_in_the_region():
    source = """
    import torch
    with torch.autocast("cuda"):
        a = x.to(torch.float32)
        b = a.mm(w)
        c = torch.nn.functional.linear(x.float(), w)
    """
    assert codes(source, "AMP104") == [(5, "AMP104"), (6, "AMP104")]


@pytest.mark.parametrize(
    "body",
    [
        "y = torch.softmax(x.float(), -1)",  # not lowered
        "y = torch.nn.functional.layer_norm(x.float(), (8,))",
        "y = torch.nn.functional.mse_loss(x.float(), t)",
        "y = (x.float() * 2) @ w",  # not straight into the op
    ],
)
def test_amp104_silent_for_ops_autocast_does_not_lower(body):
    source = f"""
    import torch
    with torch.autocast("cuda"):
        {body}
    """
    assert codes(source, "AMP104") == []


def test_amp104_silent_when_off_or_upcast_made_outside_or_fp32_region():
    source = """
    import torch
    a = x.float()
    with torch.autocast("cuda", dtype=torch.float16):
        y = a @ w
        with torch.autocast("cuda", enabled=False):
            z = x.float() @ w.float()
    with torch.autocast("cuda", dtype=torch.float32):
        z = x.float() @ w
    """
    assert codes(source, "AMP104") == []


def test_amp104_variable_reassigned_is_forgotten():
    source = """
    import torch
    with torch.autocast("cuda"):
        a = x.float()
        a = a.softmax(-1).to(torch.float16)
        y = a @ w
    """
    assert codes(source, "AMP104") == []


def test_amp104_module_call_only_for_linear_or_conv_instances():
    source = """
    import torch.nn as nn
    import torch
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.norm = nn.LayerNorm(4)
        def forward(self, x):
            with torch.autocast("cuda"):
                return self.norm(x.float()) + self.fc(x.float())
    """
    assert codes(source, "AMP104") == [(11, "AMP104")]


# --------------------------------------------------------------------------------------
# AMP105
# --------------------------------------------------------------------------------------


def test_amp105_bce_loss_forms():
    source = """
    import torch
    from torch import nn
    crit = nn.BCELoss()
    with torch.autocast("cuda", enabled=flag):
        a = crit(p, y)
        b = nn.BCELoss()(p, y)
        c = torch.binary_cross_entropy(p, y)
    """
    assert codes(source, "AMP105") == [(6, "AMP105"), (7, "AMP105"), (8, "AMP105")]


def test_amp105_silent_for_logits_loss_off_regions_cpu_and_outside():
    source = """
    import torch
    import torch.nn.functional as F
    crit = torch.nn.BCEWithLogitsLoss()
    with torch.autocast("cuda"):
        a = crit(z, y)
        b = F.binary_cross_entropy_with_logits(z, y)
        with torch.autocast("cuda", enabled=False):
            c = F.binary_cross_entropy(p.float(), y)
    with torch.autocast("cpu"):
        d = F.binary_cross_entropy(p, y)
    e = F.binary_cross_entropy(p, y)
    """
    assert codes(source, "AMP105") == []


# --------------------------------------------------------------------------------------
# AMP106
# --------------------------------------------------------------------------------------


def test_amp106_reports_missing_device_only_for_torch_autocast():
    source = """
    import torch
    from torch import autocast
    with torch.autocast(enabled=True):
        pass
    with autocast():
        pass
    with torch.amp.autocast(device_type="cuda"):
        pass
    with torch.autocast(*args, **kwargs):
        pass
    @torch.autocast(dtype=torch.bfloat16)
    def f():
        pass
    """
    assert codes(source, "AMP106") == [(4, "AMP106"), (6, "AMP106"), (12, "AMP106")]


def test_amp106_deprecated_cuda_autocast_is_left_to_amp401():
    source = """
    import torch
    with torch.cuda.amp.autocast():
        pass
    """
    assert codes(source, "AMP106", "AMP401") == [(3, "AMP401")]


def _fix_of(source: str, code: str):
    (finding,) = [f for f in lint_text(textwrap.dedent(source)) if f.code == code]
    return finding.fix


def test_amp106_fix_only_when_every_other_autocast_names_one_device():
    cuda = """
    import torch
    with torch.cuda.amp.autocast():
        pass
    with torch.autocast(dtype=torch.float16):
        pass
    """
    assert _fix_of(cuda, "AMP106") is not None
    for other in ('"cpu"', "device.type"):
        mixed = f"""
        import torch
        with torch.autocast("cuda"):
            pass
        with torch.autocast({other}):
            pass
        with torch.autocast():
            pass
        """
        assert _fix_of(mixed, "AMP106") is None
    alone = """
    import torch
    with torch.autocast():
        pass
    """
    assert _fix_of(alone, "AMP106") is None
    cpu = """
    import torch
    with torch.autocast("cpu", dtype=torch.bfloat16):
        pass
    with torch.autocast(dtype=torch.bfloat16):
        pass
    """
    fixed = fix_text(textwrap.dedent(cpu))
    assert 'torch.autocast("cpu", dtype=torch.bfloat16):\n    pass\n' in fixed.split("pass", 1)[1]
    variable = """
    import torch
    with torch.autocast(device.type):
        pass
    with torch.autocast():
        pass
    """
    assert _fix_of(variable, "AMP106") is None


# --------------------------------------------------------------------------------------
# AMP107
# --------------------------------------------------------------------------------------

_FUNCTION = """
import torch
from torch.cuda.amp import custom_fwd, custom_bwd  # noqa: AMP401
from torch.utils.checkpoint import once_differentiable


class F(torch.autograd.Function):
    @staticmethod
    {fwd}
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    {bwd}
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w.t(), x.t() @ g

{use}
"""
_USE = 'with torch.autocast("cuda"):\n    y = F.apply(x, w)'


@pytest.mark.parametrize(
    "fwd,bwd,use,expected",
    [
        ("", "", _USE, [(7, "AMP107")]),
        ("@custom_fwd", "", _USE, [(7, "AMP107")]),
        ("", "@once_differentiable", _USE, [(7, "AMP107")]),
        ("@custom_fwd", "@custom_bwd", _USE, []),
        ("@custom_fwd(cast_inputs=torch.float32)", "@custom_bwd\n    @once_differentiable", _USE, []),
        ("", "", "y = F.apply(x, w)", []),  # no autocast in the module
        ("", "", 'with torch.autocast("cuda", enabled=False):\n    y = F.apply(x, w)', []),
    ],
)
def test_amp107_decorators(fwd, bwd, use, expected):
    source = _FUNCTION.format(fwd=fwd, bwd=bwd, use=use)
    assert codes(source, "AMP107") == expected


_TORCH_ONLY_REGION = """
def head(embeddings, weight, labels, fp16):
    with torch.autocast("cuda", enabled=fp16):
        logits = torch.nn.functional.linear(torch.nn.functional.normalize(embeddings), weight)
    return F.apply(logits.float(), labels)
"""


def test_amp107_silent_where_the_modules_autocast_runs_only_torch_functions():
    # The region runs torch's functions alone; the Function is applied after it, in float32.
    source = _FUNCTION.format(fwd="", bwd="", use=_TORCH_ONLY_REGION)
    assert codes(source, "AMP107") == []
    # A call of the module's own code inside the region may reach the Function.
    reached = source.replace("torch.nn.functional.linear(", "project(")
    assert codes(reached, "AMP107") == [(7, "AMP107")]


def test_amp107_silent_when_backward_restores_autocast_itself():
    source = """
    import torch
    class Checkpointed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, run, x):
            ctx.run = run
            ctx.autocast_kwargs = {"dtype": torch.get_autocast_dtype("cuda")}
            with torch.no_grad():
                return run(x)
        @staticmethod
        def backward(ctx, g):
            with torch.enable_grad(), torch.autocast("cuda", **ctx.autocast_kwargs):
                out = ctx.run(ctx.x)
            return None, torch.autograd.grad(out, ctx.x, g)
    """
    assert codes(source, "AMP107") == []


def test_amp107_silent_when_forward_enters_autocast_through_a_module_function():
    # the wavelet-transform shape: forward calls a helper of the module that opens the region
    source = """
    import torch
    def afb1d(x, h, use_amp):
        with torch.autocast("cuda", enabled=use_amp):
            return torch.nn.functional.conv2d(x, h)
    class AFB2D(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, h, use_amp):
            ctx.save_for_backward(h)
            return afb1d(x * 2, h, use_amp)
        @staticmethod
        def backward(ctx, g):
            (h,) = ctx.saved_tensors
            return g @ h, None, None
    with torch.autocast("cuda"):
        y = AFB2D.apply(x, h, True)
    """
    assert codes(source, "AMP107") == []


def test_amp107_fires_when_the_helper_it_calls_opens_no_region():
    source = """
    import torch
    def afb1d(x, h):
        return torch.nn.functional.conv2d(x, h)
    class AFB2D(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, h):
            ctx.save_for_backward(h)
            return afb1d(x * 2, h)
        @staticmethod
        def backward(ctx, g):
            (h,) = ctx.saved_tensors
            return g @ h, None
    with torch.autocast("cuda"):
        y = AFB2D.apply(x, h)
    """
    assert [code for _, code in codes(source, "AMP107")] == ["AMP107"]


# --------------------------------------------------------------------------------------
# AMP301
# --------------------------------------------------------------------------------------


def test_amp301_silent_without_float16():
    source = """
    import torch
    with torch.autocast("cuda", dtype=torch.bfloat16):
        s = s.masked_fill(m, -1e9)
    t = torch.full_like(s, -1e9)
    """
    assert codes(source, "AMP301") == []


@pytest.mark.parametrize(
    "line,reported",
    [
        ("s = s.masked_fill(m, -1e9)", True),
        ("s.masked_fill_(m, value=-100000)", True),
        ("s.fill_(1e10)", True),
        ("t = torch.full((4,), -1e9, dtype=s.dtype)", True),
        ("t = torch.full((4,), -1e9)", False),  # float32 by default
        ("t = torch.full_like(s, -1e9, dtype=torch.float32)", False),
        ("t = torch.where(m, s, -1e9)", True),
        ("t = torch.clamp(s, -1e6)", True),
        ("t = s.clamp(max=65504.0)", False),  # representable
        ("t = s.masked_fill(m, -65504)", False),
        ("t = s.masked_fill(m, float('-inf'))", False),
        ("t = s.masked_fill(m, -float('inf'))", False),
        ("t = s.masked_fill(m, -math.inf)", False),
        ("best_loss = 1e9", False),
        ("best = min(best, 1e10)", False),
        ("stop = loss > 1e6", False),
    ],
)
def test_amp301_contexts(line, reported):
    source = f"""
    import math
    import torch
    model = model.half()
    {line}
    """
    assert bool(codes(source, "AMP301")) is reported


def test_amp301_additive_constants_only_in_float16_regions():
    source = """
    import torch
    with torch.autocast("cuda"):
        s = q @ k
        s = s + (1 - m) * -1e9
        n = step + 100000
        t = time.time() - 1e9
    u = s - 1e9
    """
    assert codes(source, "AMP301") == [(5, "AMP301")]


def test_amp301_fix_uses_the_receiver_and_the_torch_alias():
    source = """
    import torch as T
    with T.autocast("cuda"):
        s = self.scores.masked_fill(m, -1e9)
        r = s.clamp(max=1e5)
        t = s.view(-1).masked_fill(m, -1e9)
    """
    fixes = [f.fix for f in lint_text(textwrap.dedent(source)) if f.code == "AMP301"]
    assert [e.content for fix in fixes if fix for e in fix.edits] == [
        "T.finfo(self.scores.dtype).min",
        "T.finfo(s.dtype).max",
    ]
    assert all(fix is None or fix.applicability.value == "unsafe" for fix in fixes)
    assert len(fixes) == 3


# --------------------------------------------------------------------------------------
# AMP302
# --------------------------------------------------------------------------------------


def test_amp302_known_float16_values():
    source = """
    import torch
    a = x.half() + 1e-8
    b = y.to(torch.float16)
    c = b / (b + 1e-10)
    d = b + 1e-4
    e = x + 1e-8
    with torch.autocast("cuda"):
        s = q @ k
        f = s / 1e-9
        g = s.sum(-1) + 1e-8
        h = s.norm() + 1e-8
    """
    assert codes(source, "AMP302") == [(3, "AMP302"), (5, "AMP302"), (10, "AMP302")]


def test_amp302_optimizer_eps_only_for_half_models():
    source = """
    import torch
    def fp32(model):
        return torch.optim.Adam(model.parameters(), eps=1e-8)
    def fp16(model):
        model.half()
        return torch.optim.Adam(model.parameters(), eps=1e-8)
    def fp16_big_eps(model):
        model.half()
        return torch.optim.Adam(model.parameters(), eps=1e-4)
    """
    assert codes(source, "AMP302") == [(7, "AMP302")]


# --------------------------------------------------------------------------------------
# AMP303
# --------------------------------------------------------------------------------------


def test_amp303_cases():
    source = """
    import torch
    def a(net):
        net = net.to(torch.float16)
        return torch.optim.SGD([{"params": net.parameters(), "lr": 0.1}])
    def b(net):
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        net.half()  # export after training
        return opt
    def c(net):
        net.half()
        net.float()
        return torch.optim.SGD(net.parameters(), lr=0.1)
    def d(net):
        net.half()
        return FP16_Optimizer(torch.optim.SGD(net.parameters(), lr=0.1))
    def e(net):
        net.half()
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        return FP16_Optimizer(opt, dynamic_loss_scale=True)
    def f(net):
        net.bfloat16()
        return torch.optim.SGD(net.parameters(), lr=0.1)
    def g(net, other):
        net.half()
        return torch.optim.SGD(other.parameters(), lr=0.1)
    """
    assert codes(source, "AMP303") == [(5, "AMP303")]


# --------------------------------------------------------------------------------------
# AMP402 / AMP403
# --------------------------------------------------------------------------------------


def test_amp402_import_alone_is_reported_once():
    source = """
    try:
        from apex import amp
    except ImportError:
        amp = None
    """
    assert codes(source, "AMP402") == [(3, "AMP402")]


def test_amp402_other_apex_packages_and_spelled_out_calls():
    source = """
    import apex
    from apex.parallel import DistributedDataParallel
    model, opt = apex.amp.initialize(model, opt)
    opt2 = apex.optimizers.FusedAdam(params)
    """
    assert codes(source, "AMP402") == [(4, "AMP402")]
    found = [f for f in lint_text(textwrap.dedent(source)) if f.code == "AMP402"]
    assert "torch.autocast" in found[0].message and "GradScaler" in found[0].message


def test_amp403_only_in_trainer_hooks():
    source = """
    import torch
    import transformers
    from transformers.trainer import Trainer as HFTrainer

    class A(HFTrainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            def inner():
                with torch.amp.autocast("cuda", dtype=torch.float16):
                    return model(**inputs).loss
            return inner()
        def evaluate_custom(self):
            with torch.autocast("cuda", dtype=torch.float16):
                return 0

    class B(transformers.Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
            with torch.autocast("cuda", enabled=False):
                return model(**inputs).loss

    class C:
        def compute_loss(self, model, inputs):
            with torch.autocast("cuda", dtype=torch.float16):
                return model(**inputs).loss
    """
    assert codes(source, "AMP403") == [(9, "AMP403")]


# --------------------------------------------------------------------------------------
# Fixes on fixture copies
# --------------------------------------------------------------------------------------


def _lint(args):
    return CliRunner().invoke(main, ["lint", "--isolated", *args], catch_exceptions=False)


def _findings(path: Path) -> list[dict]:
    return json.loads(_lint(["--output-format", "json", str(path)]).output)


def _changed_lines(before: str, after: str) -> set[int]:
    """1-based line numbers of ``before`` that the edit replaced or deleted."""
    changed: set[int] = set()
    matcher = difflib.SequenceMatcher(None, before.splitlines(True), after.splitlines(True), autojunk=False)
    for tag, i1, i2, _j1, _j2 in matcher.get_opcodes():
        if tag != "equal":
            changed.update(range(i1 + 1, max(i2, i1 + 1) + 1) if i2 == i1 else range(i1 + 1, i2 + 1))
    return changed


def _run_fix(tmp_path: Path, name: str, unsafe: bool) -> tuple[Path, str, str, list[dict]]:
    target = tmp_path / name
    shutil.copy(FIXTURES / name, target)
    before = target.read_text(encoding="utf-8")
    findings = _findings(target)
    _lint(["--fix", *(["--unsafe-fixes"] if unsafe else []), str(target)])
    after = target.read_text(encoding="utf-8")
    cst.parse_module(after)
    _lint(["--fix", *(["--unsafe-fixes"] if unsafe else []), str(target)])
    assert target.read_text(encoding="utf-8") == after, "a second --fix changed the file again"
    return target, before, after, findings


def _fixed_spans(findings: list[dict], codes_: set[str], unsafe: bool) -> set[int]:
    lines: set[int] = set()
    for item in findings:
        fix = item["fix"]
        if item["code"] in codes_ and fix and (unsafe or fix["applicability"] == "safe"):
            for edit in fix["edits"]:
                lines.update(range(edit["line"], edit["end_line"] + 1))
    return lines


def test_amp101_and_amp106_fixes_on_fixture(tmp_path):
    target, before, after, findings = _run_fix(tmp_path, "regions_buggy_fixable.py", unsafe=True)
    allowed = _fixed_spans(findings, {"AMP101", "AMP106"}, unsafe=True)
    assert allowed and _changed_lines(before, after) <= allowed
    # The backward now follows its ``with`` block, at the block's indentation.
    assert "\n    scaler.scale(loss).backward()  # expect: AMP101\n    scaler.step(optimizer)" in after
    assert "\n        # gradients accumulate until the optimizer steps\n        scaler.scale(loss).backward(" in after
    assert 'with torch.autocast("cuda", dtype=torch.float16):  # expect: AMP106' in after
    assert [f["code"] for f in _findings(target)] == []


def test_fix_without_unsafe_fixes_leaves_unsafe_fixes_alone(tmp_path):
    target, before, after, findings = _run_fix(tmp_path, "regions_buggy_fixable.py", unsafe=False)
    assert _changed_lines(before, after) <= _fixed_spans(findings, {"AMP106"}, unsafe=False)
    assert sorted(f["code"] for f in _findings(target)) == ["AMP101", "AMP101"]
    target, before, after, _ = _run_fix(tmp_path, "numerics_buggy.py", unsafe=False)
    assert after == before


def test_amp301_fix_on_fixture(tmp_path):
    target, before, after, findings = _run_fix(tmp_path, "numerics_buggy.py", unsafe=True)
    allowed = _fixed_spans(findings, {"AMP301"}, unsafe=True)
    assert _changed_lines(before, after) <= allowed
    assert "att.masked_fill(pad_mask[:, None, None, :] == 0, torch.finfo(att.dtype).min)" in after
    assert "att.clamp(min=torch.finfo(att.dtype).min, max=torch.finfo(att.dtype).max)" in after
    left = sorted((f["line"], f["code"]) for f in _findings(target) if f["code"] == "AMP301")
    assert [line for line, _ in left] == [22, 31]  # torch.where and the additive mask have no fix


def test_amp106_safe_fix_on_regions_fixture(tmp_path):
    _target, before, after, findings = _run_fix(tmp_path, "regions_buggy.py", unsafe=False)
    assert _changed_lines(before, after) <= _fixed_spans(findings, {"AMP106"}, unsafe=False)
    assert 'torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):' in after


@pytest.mark.parametrize(
    "before,after",
    [
        (
            'import torch\nwith torch.autocast("cuda"):\n    loss = f(x)\n    # c\n    loss.backward()  # t\nprint(1)\n',
            'import torch\nwith torch.autocast("cuda"):\n    loss = f(x)\n# c\nloss.backward()  # t\nprint(1)\n',
        ),
        (
            'import torch\r\ndef f():\r\n\twith torch.autocast("cuda"):\r\n\t\tloss = g(x)\r\n\t\tloss.backward()\r\n',
            'import torch\r\ndef f():\r\n\twith torch.autocast("cuda"):\r\n\t\tloss = g(x)\r\n\tloss.backward()\r\n',
        ),
    ],
    ids=["module-level", "crlf-tabs"],
)
def test_amp101_fix_at_module_level_and_with_crlf_and_tabs(before, after):
    from helpers import fix_text

    assert fix_text(before, unsafe=True) == after
    assert fix_text(before, unsafe=False) == before


@pytest.mark.parametrize(
    "source",
    [
        # the backward is not the last statement
        'import torch\nwith torch.autocast("cuda"):\n    loss = f(x)\n    loss.backward()\n    log(loss)\n',
        # the only statement: dedenting would leave an empty block
        'import torch\nwith torch.autocast("cuda"):\n    loss.backward()\n',
        # another context manager shares the ``with``
        'import torch\nwith torch.autocast("cuda"), ctx():\n    loss = f(x)\n    loss.backward()\n',
        # the region comes from a decorator
        'import torch\n@torch.autocast("cuda")\ndef step(x):\n    loss = f(x)\n    loss.backward()\n',
        # more than the backward on the line
        'import torch\nwith torch.autocast("cuda"):\n    loss = f(x)\n    loss.backward(); n += 1\n',
    ],
)
def test_amp101_no_fix_when_moving_is_not_a_plain_dedent(source):
    (finding,) = [f for f in lint_text(source) if f.code == "AMP101"]
    assert finding.fix is None


def _fixed_unsafe(source: str) -> str:
    from ampdoctor.lint import known_codes
    from ampdoctor.lint.engine import LintOptions, fix_source

    options = LintOptions(frozenset(known_codes()), fix=True, unsafe_fixes=True)
    fixed, count, _, _, parsed = fix_source(source, "t.py", options)
    assert parsed and count >= 1
    return fixed


def test_amp101_fix_moves_a_multi_line_statement_with_its_continuation_lines():
    source = (
        "import torch\n"
        "def step(model, x):\n"
        "    with torch.autocast('cuda'):\n"
        "        loss = model(x)\n"
        "        torch.autograd.backward(\n"
        "            loss,\n"
        "        )\n"
    )
    assert _fixed_unsafe(source) == (
        "import torch\n"
        "def step(model, x):\n"
        "    with torch.autocast('cuda'):\n"
        "        loss = model(x)\n"
        "    torch.autograd.backward(\n"
        "        loss,\n"
        "    )\n"
    )


def test_amp101_fix_leaves_the_inside_of_a_multi_line_string_alone():
    source = (
        "import torch\n"
        "def step(model, x):\n"
        "    with torch.autocast('cuda'):\n"
        "        loss = model(x)\n"
        "        loss.backward(inputs=note('''first\n"
        "            second'''))\n"
    )
    fixed = _fixed_unsafe(source)
    assert "    loss.backward(inputs=note('''first\n            second'''))\n" in fixed
    assert fixed.splitlines()[4].startswith("    loss.backward(")


def test_amp303_an_optimizer_kept_in_a_list_is_not_taken_for_one_handed_to_a_wrapper():
    # ``opts[0] = SGD(...)`` names the optimizer by no plain name: an fp16 helper called with some
    # other expression (a call) does not wrap it.
    source = textwrap.dedent(
        """\
        import torch

        model = Net().cuda().half()
        opts = [None]
        opts[0] = torch.optim.SGD(model.parameters(), lr=0.1)
        fp16_report(make_config())
        for x in loader:
            loss = model(x).sum()
            loss.backward()
            opts[0].step()
        """
    )
    assert [(f.code, f.location.line) for f in lint_text(source)] == [("AMP303", 5)]
    wrapped = source.replace("fp16_report(make_config())", "opts[0] = FP16_Optimizer(opts[0])")
    assert [f.code for f in lint_text(wrapped)] == []
