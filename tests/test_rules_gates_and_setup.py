"""Refinements of single-file rules: AMP209 with a scaler on the regions' own flag, AMP210 with a
loss scaler that is called, AMP301 stores into float16 results, AMP401 star imports and
version-gated fallbacks for old torch."""

from __future__ import annotations

import pytest
from helpers import found_pairs, lint_text

SAME_FLAG = '''\
"""Pre-training. (Older versions ran float16; see the notes.)"""
import torch


def train(model, loader, optimizer, use_bf16):
    # float16 is not used any more
    scaler = torch.amp.GradScaler("cuda", enabled=use_bf16)
    for x in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_bf16):
            loss = model(x)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
'''


def test_amp209_scaler_on_the_same_flag_as_bfloat16_regions_despite_float16_in_comments():
    assert found_pairs(SAME_FLAG) == [(7, "AMP209")]


@pytest.mark.parametrize(
    "change",
    [
        ("enabled=use_bf16)\n    for", "enabled=use_amp)\n    for"),  # another flag: the scaler may serve float16
        ("dtype=torch.bfloat16", "dtype=torch.float16 if fp16 else torch.bfloat16"),  # float16 in the code
        ("    # float16 is not used any more\n", '    half = args.precision == "fp16"\n'),
    ],
)
def test_amp209_stays_silent_where_a_float16_path_may_exist(change):
    assert found_pairs(SAME_FLAG.replace(*change)) == []


LOSS_SCALER = """\
import torch


def train_one_epoch(model, loader, optimizer, loss_scaler, use_amp, clip_grad=None):
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16, enabled=use_amp):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        if loss_scaler is not None:
            loss_scaler(loss, optimizer, clip_grad=clip_grad, parameters=model.parameters())
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad()
"""


def test_amp210_a_called_loss_scaler_parameter_is_a_scaler():
    assert found_pairs(LOSS_SCALER) == []
    without = LOSS_SCALER.replace(", loss_scaler,", ",").replace(
        "        if loss_scaler is not None:\n            loss_scaler(loss, optimizer, clip_grad=clip_grad, parameters=model.parameters())\n        else:\n",
        "        if True:\n",
    )
    assert found_pairs(without) == [(6, "AMP210")]


STORE = """\
import torch


def decode(model, x, idx):
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(x)
    logits[idx] = -1e10
    return logits.softmax(-1)


def decode_float(model, x, idx):
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(x)
    logits = logits.float()
    logits[idx] = -1e10
    return logits


def decode_bf16(model, x, idx):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x)
    logits[idx] = -1e10
    return logits


def decode_small(model, x, idx):
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(x)
    logits[idx] = -1e4
    return logits
"""


def test_amp301_index_assignment_into_a_float16_result():
    assert found_pairs(STORE) == [(7, "AMP301")]
    (finding,) = lint_text(STORE)
    assert "`-1e10` stored into `logits`" in finding.message


def test_amp301_index_assignment_passes_the_text_gate():
    from ampdoctor.lint.gate import keeps
    from ampdoctor.lint.rules import lint_rules
    from ampdoctor.lint.textscan import text_gate

    anchors = [lint_rules()["AMP301"].anchors]
    source = STORE.split("\n\n\ndef decode_float")[0] + "\n"
    assert keeps(source, anchors) and text_gate(anchors).keeps(source.encode())
    compared = source.replace("logits[idx] = -1e10", "ok = logits[idx] == -1e10")
    assert not keeps(compared, anchors) and not text_gate(anchors).keeps(compared.encode())


def test_amp401_star_import_is_reported_without_a_fix():
    (finding,) = lint_text("from torch.cuda.amp import *\n\nscaler = GradScaler()\n")
    assert (finding.code, finding.location.line, finding.location.column) == ("AMP401", 1, 6)
    assert finding.fix is None


GATED = {
    "conditional expression": """\
import torch

_TORCH_GREATER_EQUAL_2_4 = True
GradScaler = torch.amp.GradScaler if _TORCH_GREATER_EQUAL_2_4 else torch.cuda.amp.GradScaler
""",
    "hasattr test": """\
import torch

if hasattr(torch.amp, "GradScaler"):
    scaler = torch.amp.GradScaler("cuda")
else:
    scaler = torch.cuda.amp.GradScaler()
""",
    "try/except fallback": """\
import torch

try:
    scaler = torch.amp.GradScaler("cuda")
except (ImportError, AttributeError):
    scaler = torch.cuda.amp.GradScaler()
""",
    "version-gated import": """\
from lightning_utilities import compare_version

if compare_version("torch", ">=", "2.4.0"):
    from torch.amp import autocast
else:
    from torch.cuda.amp import autocast
""",
    "decorated method of a class in the fallback arm": """\
import torch

if hasattr(torch.amp, "custom_fwd"):
    class Scale(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd(device_type="cuda")
        def forward(ctx, x):
            return x * 2
else:
    class Scale(torch.autograd.Function):
        @staticmethod
        @torch.cuda.amp.custom_fwd
        def forward(ctx, x):
            return x * 2
""",
    "a use deep inside the fallback arm of a function": """\
import torch

_TORCH_GE_2_4 = hasattr(torch.amp, "autocast")


def contexts(flags):
    if _TORCH_GE_2_4:
        return [torch.amp.autocast("cuda", enabled=flag) for flag in flags]
    else:
        return [torch.cuda.amp.autocast(enabled=flag) for flag in flags]
""",
}


@pytest.mark.parametrize("source", GATED.values(), ids=GATED.keys())
def test_amp401_version_gated_fallbacks_are_correct_code(source):
    assert lint_text(source) == []


def test_amp401_a_use_beside_a_gate_is_still_reported():
    source = """\
import torch

if hasattr(torch.amp, "GradScaler"):
    scaler = torch.amp.GradScaler("cuda")
else:
    scaler = torch.cuda.amp.GradScaler()
ctx = torch.cuda.amp.autocast()
"""
    (finding,) = lint_text(source)
    assert finding.location.line == 7


def test_amp401_ungated_uses_are_still_reported_with_their_fix():
    source = "import torch\n\nif use_amp:\n    scaler = torch.cuda.amp.GradScaler()\n"
    (finding,) = lint_text(source)
    assert finding.fix is not None and finding.fix.is_safe


def test_amp401_no_fix_rewrites_a_use_inside_a_gated_branch():
    source = """\
import torch
from torch.cuda.amp import autocast

if hasattr(torch.amp, "autocast"):
    ctx = torch.amp.autocast("cuda")
else:
    ctx = autocast()
"""
    (finding,) = lint_text(source)
    assert finding.location.line == 2 and finding.fix is None


WRAPPER = '''\
import torch


class AmpOptimizer:
    """Wraps an optimizer with loss scaling."""

    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.grad_scaler = torch.amp.GradScaler("cuda")

    def backward(self, loss):
        self.grad_scaler.scale(loss).backward()

    def step(self):
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state)
'''


def test_amp211_optimizer_wrapper_whose_state_dict_leaves_out_its_scaler():
    assert found_pairs(WRAPPER) == [(19, "AMP211")]
    (finding,) = lint_text(WRAPPER)
    assert "`AmpOptimizer.state_dict()`" in finding.message and "self.grad_scaler" in finding.message
    complete = WRAPPER.replace(
        "        return self.optimizer.state_dict()",
        '        return {"optimizer": self.optimizer.state_dict(), "scaler": self.grad_scaler.state_dict()}',
    )
    assert found_pairs(complete) == []
    # A wrapper without a scaler of its own is not judged.
    assert (
        found_pairs(WRAPPER.replace('self.grad_scaler = torch.amp.GradScaler("cuda")', "self.grad_scaler = None")) == []
    )
