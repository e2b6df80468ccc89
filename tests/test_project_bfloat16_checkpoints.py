"""AMP211 where all the autocast a training script runs is bfloat16: its gradients do not
overflow, so a loss scale that restarts at 65536 on resume skips no step. The scaler's own
module may run no autocast at all (the model opens a bfloat16 region in its ``forward``): then
the modules it imports decide, and another script of the repository that trains in float16 with
a model of its own does not."""

from __future__ import annotations

from pathlib import Path

from helpers import found_pairs, project_findings, write_project

TRAIN = """\
import torch

from model import Net


def main(loader, path):
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters())
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
"""

MODEL = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        half = x.shape[-1] // 2
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return self.proj(x)[..., :half]
"""

OTHER_FLOAT16 = """\
import torch


def other(model, x):
    with torch.autocast("cuda", dtype=torch.float16):
        return model(x)
"""

SAVE_AT = ("train.py", 15, "AMP211")


def amp211(root: Path) -> set[tuple[str, int, str]]:
    return project_findings(root, ("AMP211",))


def test_a_model_that_runs_in_bfloat16_needs_no_saved_scale(tmp_path: Path):
    write_project(tmp_path, {"train.py": TRAIN, "model.py": MODEL})
    assert amp211(tmp_path) == set()


def test_a_model_that_runs_in_float16_does(tmp_path: Path):
    write_project(tmp_path, {"train.py": TRAIN, "model.py": MODEL.replace("bfloat16", "float16")})
    assert amp211(tmp_path) == {SAVE_AT}


def test_float16_named_by_the_script_itself_keeps_the_finding(tmp_path: Path):
    script = TRAIN.replace('GradScaler("cuda")', 'GradScaler("cuda", enabled=args.fp16)').replace(
        "def main(loader, path):", "def main(loader, path, args):"
    )
    write_project(tmp_path, {"train.py": script, "model.py": MODEL})
    assert amp211(tmp_path) == {SAVE_AT}


def test_another_script_in_float16_does_not_decide_for_this_one(tmp_path: Path):
    (tmp_path / "other").mkdir()
    write_project(tmp_path, {"train.py": TRAIN, "model.py": MODEL, "other/run.py": OTHER_FLOAT16})
    assert amp211(tmp_path) == set()
    # A model module that the script imports and that runs float16 somewhere does.
    write_project(tmp_path, {"model.py": MODEL + "\n\n" + OTHER_FLOAT16})
    assert amp211(tmp_path) == {SAVE_AT}


def test_a_variable_named_half_is_no_float16():
    # AMP209 in one module: ``half = dim // 2`` does not name a float16 path, ``.half()`` does.
    source = MODEL + TRAIN.replace("from model import Net\n", "").replace("import torch\n", "", 1)
    assert ("AMP209" in {code for _line, code in found_pairs(source)}) is True
    casted = source.replace("[..., :half]", "[..., :half].half()")
    assert "AMP209" not in {code for _line, code in found_pairs(casted)}
