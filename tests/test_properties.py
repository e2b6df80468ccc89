"""Properties over generated training code: lint never crashes; --fix reparses and is idempotent;
the text gate keeps every program the gate on the syntax tree keeps (rule by rule), and every
finding survives the prefilter and both gates (``lint_text`` checks that)."""

from __future__ import annotations

import libcst as cst
import pytest
from helpers import fix_text, lint_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ampdoctor.lint import gate
from ampdoctor.lint.rules import lint_rules
from ampdoctor.lint.textscan import text_gate

HEADERS = [
    "import torch",
    "import torch as t",
    "from torch.cuda.amp import autocast, GradScaler",
    "from torch.cuda import amp",
    "import torch.cuda.amp as camp",
    "from torch.nn.utils import clip_grad_norm_ as clip",
    "from torch.amp import autocast as ac",
    "from contextlib import nullcontext",
]
SIMPLE = [
    "loss = model(x)",
    "loss.backward()",
    "scaler.scale(loss).backward()",
    "scaled = scaler.scale(loss)",
    "scaled.backward()",
    "torch.autograd.backward(scaler.scale(loss))",
    "scaler.unscale_(opt)",
    "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
    "clip(model.parameters(), max_norm=2.0)",
    "scaler.step(opt)",
    "scaler.update()",
    "opt.step()",
    "opt.zero_grad()",
    "scaler = torch.amp.GradScaler('cuda')",
    "scaler = GradScaler()",
    "scaler = amp.GradScaler(init_scale=1024)",
    "scaler = camp.GradScaler()",
    "self.scaler = t.cuda.amp.GradScaler()",
    "x = x.half()",
    "y = x.to(torch.float16)",
    "z = x.type(torch.HalfTensor)",
    "ctx = torch.autocast('cuda', dtype=torch.float16)",
    "ctx = nullcontext() if cpu else torch.amp.autocast(device_type='cuda')",
    "scores = scores.masked_fill(mask, -1e9)",
    "opt = torch.optim.AdamW(model.parameters(), eps=1e-8)",
    "torch.save({'model': model.state_dict(), 'opt': opt.state_dict()}, path)",
    "pass",
]
WITH_HEADS = [
    "with torch.autocast('cuda', dtype=torch.float16):",
    "with torch.autocast('cuda', enabled=False):",
    "with torch.cuda.amp.autocast():",
    "with autocast(enabled=use_amp):",
    "with amp.autocast(True, torch.bfloat16):",
    "with ctx:",
    "with ac('cpu'):",
    "with torch.autocast():",
]
BLOCK_HEADS = WITH_HEADS + [
    "for x, y in loader:",
    "while True:",
    "if (i + 1) % accum == 0:",
    "try:",
    "def train_step(model, x, opt, scaler):",
    "@torch.autocast('cuda')\ndef forward(self, x):",
]


def _render(node, indent: int) -> list[str]:
    pad = "    " * indent
    if isinstance(node, str):
        return [pad + node]
    head, body = node
    lines = [pad + part for part in head.split("\n")]
    inner = [line for child in body for line in _render(child, indent + 1)] or [pad + "    pass"]
    lines.extend(inner)
    if head == "try:":
        lines.extend([pad + "except RuntimeError:", pad + "    pass"])
    return lines


statement = st.recursive(
    st.sampled_from(SIMPLE),
    lambda children: st.tuples(st.sampled_from(BLOCK_HEADS), st.lists(children, min_size=1, max_size=5)),
    max_leaves=25,
)
program = st.tuples(st.lists(st.sampled_from(HEADERS), max_size=4), st.lists(statement, min_size=1, max_size=8))


def _source(parts) -> str:
    headers, body = parts
    lines = list(headers)
    for node in body:
        lines.extend(_render(node, 0))
    return "\n".join(lines) + "\n"


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program)
def test_lint_never_crashes_and_fixes_are_stable(parts):
    source = _source(parts)
    cst.parse_module(source)  # the generator only makes valid Python
    findings = lint_text(source)
    assert all(f.code != "AMP000" for f in findings)
    data = source.encode("utf-8")
    for code, rule in lint_rules().items():
        if gate.keeps(source, [rule.anchors]):
            assert text_gate((rule.anchors,)).keeps(data), f"{code}: the text gate drops what the gate keeps"
    for unsafe in (False, True):
        fixed = fix_text(source, unsafe=unsafe)
        cst.parse_module(fixed)
        assert fix_text(fixed, unsafe=unsafe) == fixed


@settings(max_examples=40, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("autocast()[]{}:=.,'\"#\n \\ scaler.step backward")), max_size=200))
def test_arbitrary_text_never_raises(text):
    lint_text(text)
