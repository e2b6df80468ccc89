"""Autocast held in names, region flags, delegated backward passes and decorated float16 steps:
the unit cases around the fixtures held_*, downcast_*, delegated_* and fp16_*."""

from __future__ import annotations

from helpers import found_pairs


def codes(source: str) -> list[str]:
    return [code for _line, code in found_pairs(source)]


def test_a_name_that_only_ever_holds_a_null_context_opens_no_region():
    source = """\
import torch
from contextlib import suppress

def step(model, x, opt):
    ctx = suppress
    with ctx():
        loss = model(x)
        loss.backward()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        model(x)
"""
    assert codes(source) == []


def test_an_autocast_parameter_defaulting_to_suppress_is_a_maybe_region():
    source = """\
import torch
from contextlib import suppress
from functools import partial

def train_one_epoch(model, loader, opt, amp_autocast=suppress):
    for x in loader:
        with amp_autocast():
            loss = model(x)
            loss.backward()
        opt.step()

def main(model, loader, opt):
    train_one_epoch(model, loader, opt, amp_autocast=partial(torch.autocast, device_type="cuda", dtype=torch.bfloat16))
"""
    assert found_pairs(source) == [(9, "AMP101")]


def test_partial_binds_the_dtype_that_decides_float16():
    bf16 = """\
import torch
from functools import partial

class T:
    def __init__(self):
        self.amp_autocast = partial(torch.autocast, device_type="cuda", dtype=torch.bfloat16)

    def step(self, x, opt):
        with self.amp_autocast():
            loss = self.model(x)
        loss.backward()
        opt.step()
"""
    assert codes(bf16) == []
    assert codes(bf16.replace("torch.bfloat16", "torch.float16")) == ["AMP210"]


def test_a_tensor_backward_with_a_gradient_is_not_delegated():
    source = """\
import torch

def step(model, x, opt):
    with torch.autocast("cuda"):
        out = model(x)
    out.backward(torch.ones_like(out))
    opt.step()
"""
    assert codes(source) == ["AMP210"]


def test_a_delegated_backward_inside_autocast_is_still_backward_in_autocast():
    source = """\
import torch

def step(accelerator, model, x, opt):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x)
        accelerator.backward(loss)
    opt.step()
"""
    assert found_pairs(source) == [(6, "AMP101")]


def test_the_region_flag_of_a_conditional_context_object_guards_a_cast():
    source = """\
import torch
from contextlib import nullcontext

def forward(model, x, use_amp):
    ctx = torch.autocast("cuda") if use_amp else nullcontext()
    with ctx:
        if use_amp:
            x = x.half()
        return model(x)
"""
    assert found_pairs(source) == [(8, "AMP103")]
    assert codes(source.replace("if use_amp:\n", "if not use_amp:\n")) == []


def test_deprecated_autocast_held_through_partial_or_alias_is_reported_and_a_comparison_is_not():
    held = """\
import torch
from functools import partial

class T:
    def __init__(self, amp):
        self.autocast = partial(torch.cuda.amp.autocast, dtype=torch.bfloat16)
"""
    assert found_pairs(held) == [(6, "AMP401")]
    comparison = """\
import torch

def is_autocast(ctx):
    return isinstance(ctx, torch.cuda.amp.autocast)
"""
    assert codes(comparison) == []


def test_a_float16_decorated_method_called_before_backward_and_one_called_after():
    source = """\
import torch

class Trainer:
    @torch.autocast("cuda")
    def compute_loss(self, batch):
        return self.model(batch)

    def fit(self, loader, opt):
        for batch in loader:
            loss = self.compute_loss(batch)
            loss.backward()
            opt.step()
"""
    assert found_pairs(source) == [(4, "AMP210")]
    after = source.replace(
        "            loss = self.compute_loss(batch)\n            loss.backward()\n",
        "            loss = self.model(batch).sum()\n            loss.backward()\n            self.compute_loss(batch)\n",
    )
    assert codes(after) == []


def test_a_scaler_chosen_by_a_conditional_expression_is_a_scaler():
    source = """\
import torch

def train(model, loader, opt, amp):
    scaler = torch.amp.GradScaler("cuda") if amp else None
    for x in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x)
        loss.backward()
        scaler.step(opt)
        scaler.update()
"""
    assert found_pairs(source) == [(8, "AMP204")]
    assert codes(source.replace("loss.backward()", "scaler.scale(loss).backward()")) == []


def test_a_deprecated_autocast_bound_in_an_import_fallback_is_not_reported():
    source = """\
import torch

try:
    from torch.amp import autocast
except ImportError:
    autocast = torch.cuda.amp.autocast
"""
    assert codes(source) == []


def test_keywords_of_the_with_call_override_what_partial_bound():
    source = """\
import torch
from functools import partial

class T:
    def __init__(self):
        self.amp_autocast = partial(torch.autocast, device_type="cuda", dtype=torch.bfloat16, enabled=True)

    def step(self, x, opt):
        with self.amp_autocast():
            loss = self.model(x)
            with self.amp_autocast(enabled=False):
                loss.backward()
        opt.step()
"""
    assert codes(source) == []
    assert codes(source.replace("enabled=False", "enabled=True")) == ["AMP101"]


def test_a_tensor_named_after_the_model_keeps_its_backward():
    source = """\
import torch

def step(model, x, opt):
    with torch.autocast("cuda"):
        model_output = model(x)
    model_output.backward(torch.ones_like(model_output))
    opt.step()
"""
    assert codes(source) == ["AMP210"]


def test_a_device_type_held_in_a_module_constant():
    source = """\
import torch

DEVICE_TYPE = "cuda"

def train(model, loader, opt):
    for x in loader:
        with torch.autocast(device_type=DEVICE_TYPE):
            loss = model(x)
        loss.backward()
        opt.step()
"""
    assert found_pairs(source) == [(7, "AMP210")]
    # A parameter of the same name shadows the constant; a name bound twice is no constant.
    assert codes(source.replace("def train(model, loader, opt):", "def train(model, loader, opt, DEVICE_TYPE):")) == []
    assert codes(source.replace('DEVICE_TYPE = "cuda"', 'DEVICE_TYPE = "cuda"\nif CPU:\n    DEVICE_TYPE = "cpu"')) == []
    assert codes(source.replace('"cuda"', '"cpu"')) == []
