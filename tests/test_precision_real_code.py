"""Patterns found in large real code bases that must stay silent (and their buggy neighbours)."""

from __future__ import annotations

from helpers import found_pairs

DISPATCH_TABLE = """\
import torch

def handles(func):
    if func in [torch.amp.autocast_mode.autocast, torch.cuda.amp.autocast, torch.cpu.amp.autocast]:
        return "cuda" if func is torch.cuda.amp.autocast else "cpu"
"""

SUBCLASS = """\
import torch

class LoggingScaler(torch.cuda.amp.GradScaler):
    pass
"""

PURE_FP16_BRANCH = """\
import torch

def step(model, batch, use_autocast, pure_fp16):
    with torch.amp.autocast("cuda", enabled=use_autocast):
        if pure_fp16:
            batch = batch.half()
        return model(batch)
"""

UNRELATED_CHECKPOINT = """\
import torch

def amp_test(model, opt, data):
    scaler = torch.amp.GradScaler("cuda")
    for x in data:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

def local_sgd_test(opt, path):
    torch.save({"optimizer_state_dict": opt.state_dict()}, path)
"""

SCRIPT_CHECKPOINT = """\
import torch

scaler = torch.amp.GradScaler("cuda")

def save(model, optimizer, path):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
"""


def test_identity_checks_against_deprecated_names_are_not_uses():
    assert found_pairs(DISPATCH_TABLE) == []


def test_subclassing_a_deprecated_class_is_a_use():
    assert found_pairs(SUBCLASS) == [(3, "AMP401")]


def test_cast_inside_a_region_that_may_be_off_is_left_alone():
    assert found_pairs(PURE_FP16_BRANCH) == []
    assert found_pairs(PURE_FP16_BRANCH.replace("enabled=use_autocast", "dtype=torch.float16")) == [(6, "AMP103")]


def test_checkpoint_in_a_function_without_a_scaler_is_left_alone():
    assert found_pairs(UNRELATED_CHECKPOINT) == []


def test_checkpoint_next_to_a_module_level_scaler_is_reported():
    assert found_pairs(SCRIPT_CHECKPOINT) == [(6, "AMP211")]


EMA_STEP = """\
import torch

def train(model, loader, optimizer, ema_opt, scaler):
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        ema_opt.step()
"""


def test_an_ema_helper_named_like_an_optimizer_is_not_one():
    assert found_pairs(EMA_STEP) == []
    # The same call on a second optimizer, which the scaler never steps, bypasses the scaler.
    assert found_pairs(EMA_STEP.replace("ema_opt", "head_opt")) == [(10, "AMP203")]


PADDLE_TRAIN = """\
import paddle

from .amp import LSCGradScaler


def train(model, loader, optimizer):
    scaler = LSCGradScaler(init_loss_scaling=1024.0)
    for x, y in loader:
        with paddle.amp.auto_cast(enable=True):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        optimizer.clear_grad()
"""


def test_another_frameworks_scaler_is_not_a_torch_gradscaler():
    # PaddlePaddle's GradScaler has torch's method names; the module never imports torch.
    assert found_pairs(PADDLE_TRAIN) == []
    # The same loop in a module that imports torch: the scaler is judged as torch's.
    assert found_pairs("import torch\n" + PADDLE_TRAIN) == [(13, "AMP202")]


BFLOAT16_CHECKPOINT = """\
import torch


def train(model, opt, loader, path):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    torch.save({"optimizer": opt.state_dict()}, path)
"""


def test_a_checkpoint_beside_a_bfloat16_only_scaler_needs_no_scale():
    # bfloat16 gradients do not overflow: a fresh scale skips no step on resume. The scaler
    # itself is what is superfluous (AMP209).
    assert found_pairs(BFLOAT16_CHECKPOINT) == [(5, "AMP209")]
    assert found_pairs(BFLOAT16_CHECKPOINT.replace("bfloat16", "float16")) == [(12, "AMP211")]


STAR_IMPORTED_TORCH = """\
from .nets import *


def save_checkpoint(model, optimizer, scaler, path):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)


def train(model, optimizer, loader, path):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
"""


def test_torch_bound_by_a_star_import_is_torch():
    # The module never imports torch: ``from .nets import *`` brings it, with the model classes.
    assert found_pairs(STAR_IMPORTED_TORCH) == [(16, "AMP211")]
    # A module that imports torch under its own name is read as before.
    assert found_pairs("import torch\n" + STAR_IMPORTED_TORCH) == [(17, "AMP211")]
    # Without a star import, an unbound ``torch`` is nothing the rules know.
    assert found_pairs(STAR_IMPORTED_TORCH.replace("from .nets import *", "from .nets import Net")) == []


BFLOAT16_MODEL = """\
import torch
from transformers import AutoModelForVision2Seq


def finetune(path, loader, optimizer):
    vla = AutoModelForVision2Seq.from_pretrained(path, torch_dtype=torch.bfloat16)
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = vla(pixel_values=batch["pixel_values"].to(torch.bfloat16), labels=batch["labels"])
        out.loss.backward()
        optimizer.step()
"""


def test_an_input_cast_to_a_bfloat16_models_dtype_is_silent():
    # The model's weights are bfloat16 (``torch_dtype``, ``.bfloat16()``, ``model =
    # Net().to(torch.bfloat16)``): the input cast matches them, and bfloat16 cannot overflow.
    assert found_pairs(BFLOAT16_MODEL) == []
    converted = BFLOAT16_MODEL.replace(
        "from_pretrained(path, torch_dtype=torch.bfloat16)", "from_pretrained(path)\n    vla = vla.bfloat16()"
    )
    assert found_pairs(converted) == []
    built = BFLOAT16_MODEL.replace(
        "AutoModelForVision2Seq.from_pretrained(path, torch_dtype=torch.bfloat16)",
        "torch.nn.Linear(8, 8).to(torch.bfloat16)",
    )
    assert found_pairs(built) == []


def test_the_same_cast_beside_a_float32_model_or_in_float16_is_reported():
    plain = BFLOAT16_MODEL.replace("from_pretrained(path, torch_dtype=torch.bfloat16)", "from_pretrained(path)")
    assert found_pairs(plain) == [(9, "AMP103")]
    half = BFLOAT16_MODEL.replace(
        'with torch.autocast("cuda", dtype=torch.bfloat16)', 'with torch.autocast("cuda", dtype=torch.float16)'
    ).replace('batch["pixel_values"].to(torch.bfloat16)', 'batch["pixel_values"].half()')
    assert (9, "AMP103") in found_pairs(half)
