"""AMP209 across modules: a training script builds a GradScaler that is always on and opens no
autocast itself; the model it imports runs its ``forward`` under a bfloat16 autocast. Every
region the script's imports reach must be bfloat16, in modules that name float16 nowhere, and
the scaler must be on whatever the options: else silence."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import lint_project, project_findings, write_project

TRAIN = """\
import torch

from model import Net


def main(loader):
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters())
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""

MODEL = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.out = nn.Linear(8, 8)

    def head(self, x):
        with torch.autocast("cuda", enabled=False):
            return self.out(x.float())

    def forward(self, x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return self.head(self.proj(x))
"""

SCALER_AT = ("train.py", 9, "AMP209")


def amp209(root: Path) -> set[tuple[str, int, str]]:
    return project_findings(root, ("AMP209",))


def test_a_scaler_beside_a_model_that_runs_in_bfloat16(tmp_path: Path):
    write_project(tmp_path, {"train.py": TRAIN, "model.py": MODEL})
    [finding] = [f for f in lint_project(tmp_path).findings if f.code == "AMP209"]
    assert (finding.location.path, finding.location.line) == SCALER_AT[:2]
    assert [(r.path, r.line) for r in finding.related] == [("model.py", 16)]
    assert "modules this one imports" in finding.message


def test_the_file_alone_says_nothing(tmp_path: Path):
    write_project(tmp_path, {"train.py": TRAIN, "model.py": MODEL})
    assert project_findings(tmp_path, ("AMP209",), project_mode=False) == set()


@pytest.mark.parametrize(
    ("files", "why"),
    [
        ({"model.py": MODEL.replace("torch.bfloat16", "torch.float16")}, "the model runs float16"),
        ({"model.py": MODEL.replace('autocast("cuda", dtype=torch.bfloat16)', 'autocast("cuda")')}, "float16"),
        ({"train.py": TRAIN.replace('GradScaler("cuda")', 'GradScaler("cuda", enabled=amp)')}, "a switch"),
        ({"train.py": TRAIN.replace("def main(loader):", "def main(loader, fp16=False):")}, "fp16 named"),
        (
            {
                "train.py": TRAIN.replace(
                    "from model import Net\n", "from model import Net\nfrom contexts import ctx\n"
                ),
                "contexts.py": "import torch\n\n\ndef ctx():\n    return torch.autocast('cuda', dtype=torch.float16)\n",
            },
            "an imported factory of a float16 context",
        ),
        (
            {
                "model.py": MODEL.replace("from torch import nn\n", "from torch import nn\n\nimport model_fp16\n"),
                "model_fp16.py": "import torch\n\n\ndef run(m, x):\n    with torch.autocast('cuda', dtype=torch.float16):\n        return m(x)\n",
            },
            "a module the model imports runs float16",
        ),
        ({"model.py": MODEL.replace('with torch.autocast("cuda", dtype=torch.bfloat16):', "if True:")}, "no region"),
    ],
    ids=["float16", "default-dtype", "enabled-flag", "fp16-option", "float16-factory", "float16-reached", "none"],
)
def test_silent_where_float16_may_run_or_the_scaler_may_be_off(tmp_path: Path, files, why):
    write_project(tmp_path, {"train.py": TRAIN, "model.py": MODEL})
    write_project(tmp_path, files)
    assert amp209(tmp_path) == set(), why


def test_another_script_in_float16_does_not_decide_for_this_one(tmp_path: Path):
    (tmp_path / "other").mkdir()
    other = (
        "import torch\n\n\ndef run(m, x):\n    with torch.autocast('cuda', dtype=torch.float16):\n        return m(x)\n"
    )
    write_project(tmp_path, {"train.py": TRAIN, "model.py": MODEL, "other/run.py": other})
    assert amp209(tmp_path) == {SCALER_AT}


def test_a_module_whose_importer_runs_float16_is_no_bfloat16_script(tmp_path: Path):
    # A trainer class holds the scaler; the ``main.py`` that imports it opens a float16 region.
    trainer = TRAIN.replace("def main(loader):", "def fit(loader):")
    main = (
        "import torch\n\nfrom train import fit\n\n\n"
        "def run(model, x):\n    with torch.autocast('cuda', dtype=torch.float16):\n        return model(x)\n"
    )
    write_project(tmp_path, {"train.py": trainer, "model.py": MODEL, "main.py": main})
    assert amp209(tmp_path) == set()
    # A launcher that imports the script and names no float16 leaves it a bfloat16 script.
    write_project(tmp_path, {"main.py": "from train import fit\n\nfit([])\n"})
    assert amp209(tmp_path) == {SCALER_AT}
