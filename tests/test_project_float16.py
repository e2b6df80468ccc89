"""AMP301 and AMP105 in a module that the project runs under float16 autocast set up elsewhere:
Lightning's float16 mixed precision, or a float16 autocast region (a ``--fp16`` flag) around a
model's forward in another module. Fires where the project shows it for certain, silent where
it does not (bfloat16, a model whose class is not known, a dtype not written out, a fill that
fits)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from ampdoctor.config import Settings
from ampdoctor.lint import LintRequest, known_codes, lint_paths, lint_source

ATTENTION = """\
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x, mask):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-2, -1)
        scores = scores.masked_fill(mask, FILL)
        return scores.softmax(-1) @ v
"""

MODEL = """\
from torch import nn

from attention import Attention


class Net(nn.Module):
    def __init__(self, dim=64):
        super().__init__()
        self.attn = Attention(dim)
        self.head = nn.Linear(dim, 1)

    def forward(self, x, mask):
        return self.head(self.attn(x, mask))
"""

LIT = """\
import lightning as L
import torch
import torch.nn.functional as F

from model import Net


class Lit(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = Net()

    def training_step(self, batch, batch_idx):
        x, mask, y = batch
        return F.binary_cross_entropy(torch.sigmoid(self.net(x, mask)), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters())
"""

TRAIN_LIGHTNING = """\
import lightning as L

from lit import Lit


def main(loader):
    model = Lit()
    trainer = L.Trainer(precision=PRECISION)
    trainer.fit(model, loader)
"""

TRAIN_FLAG = """\
import torch

from model import Net


def main(args, loader):
    model = MAKE
    for x, mask in loader:
        with torch.autocast(DEVICE, dtype=DTYPE, enabled=args.fp16):
            out = model(x, mask)
        out.sum().backward()
"""


def write(root: Path, files: dict[str, str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text('[project]\nname = "p"\n', encoding="utf-8")
    for rel, text in files.items():
        (root / rel).write_text(textwrap.dedent(text), encoding="utf-8")


def lint_tree(root: Path, paths=None, project=True, use_cache=False) -> set[tuple[str, int, str]]:
    settings = Settings(root=root, project=project)
    codes = settings.enabled_codes(known_codes())
    run = lint_paths(paths or [root], LintRequest(settings, codes, use_cache=use_cache), cwd=root)
    # The training loops here are sketches (no GradScaler): only the two codes are asked about.
    return {(f.location.path, f.location.line, f.code) for f in run.findings if f.code in ("AMP301", "AMP105")}


def lightning(tmp_path: Path, precision: str = '"16-mixed"', fill: str = "-1e9") -> Path:
    write(
        tmp_path,
        {
            "attention.py": ATTENTION.replace("FILL", fill),
            "model.py": MODEL,
            "lit.py": LIT,
            "train.py": TRAIN_LIGHTNING.replace("PRECISION", precision),
        },
    )
    return tmp_path


def flagged(tmp_path: Path, make="Net()", device='"cuda"', dtype="torch.float16", fill="-1e9") -> Path:
    write(
        tmp_path,
        {
            "attention.py": ATTENTION.replace("FILL", fill),
            "model.py": MODEL,
            "train.py": TRAIN_FLAG.replace("MAKE", make).replace("DEVICE", device).replace("DTYPE", dtype),
        },
    )
    return tmp_path


FILL_AT = ("attention.py", 13, "AMP301")
BCE_AT = ("lit.py", 15, "AMP105")


@pytest.mark.parametrize("precision", ['"16-mixed"', "16", '"16"'])
def test_lightning_float16_mixed_precision_reaches_the_fill_and_the_bce(tmp_path: Path, precision: str):
    assert lint_tree(lightning(tmp_path, precision)) == {FILL_AT, BCE_AT}


@pytest.mark.parametrize("precision", ['"bf16-mixed"', '"32-true"', "args.precision", '"16-true"'])
def test_lightning_without_float16_mixed_precision_is_silent(tmp_path: Path, precision: str):
    assert lint_tree(lightning(tmp_path, precision)) == set()


@pytest.mark.parametrize("fill", ["torch.finfo(scores.dtype).min", "-1e4", 'float("-inf")'])
def test_a_fill_that_float16_holds_is_silent(tmp_path: Path, fill: str):
    assert lint_tree(lightning(tmp_path, fill=fill)) == {BCE_AT}
    assert lint_tree(flagged(tmp_path / "flag", fill=fill)) == set()


def test_without_the_project_each_file_is_silent(tmp_path: Path):
    assert lint_tree(lightning(tmp_path), project=False) == set()
    assert lint_tree(flagged(tmp_path / "flag"), project=False) == set()


def test_a_file_list_reports_only_the_named_file_with_the_rest_behind_it(tmp_path: Path):
    root = lightning(tmp_path)
    for use_cache in (False, True, True):
        assert lint_tree(root, [root / "attention.py"], use_cache=use_cache) == {FILL_AT}
        assert lint_tree(root, [root / "train.py"], use_cache=use_cache) == set()
        assert lint_tree(root, use_cache=use_cache) == {FILL_AT, BCE_AT}


def test_fabric_float16_mixed_precision_runs_the_models_forward(tmp_path: Path):
    write(
        tmp_path,
        {
            "attention.py": ATTENTION.replace("FILL", "-1e9"),
            "model.py": MODEL,
            "train.py": """\
                from lightning.fabric import Fabric

                from model import Net


                def main(optimizer, loader):
                    fabric = Fabric(accelerator="cuda", precision="16-mixed")
                    model = Net()
                    model, optimizer = fabric.setup(model, optimizer)
                    for x, mask in loader:
                        fabric.backward(model(x, mask).sum())
                """,
        },
    )
    assert lint_tree(tmp_path) == {FILL_AT}


def test_an_fp16_flag_around_the_models_forward_reaches_its_submodules(tmp_path: Path):
    assert lint_tree(flagged(tmp_path)) == {FILL_AT}
    assert lint_tree(flagged(tmp_path / "moved", make="Net().cuda()")) == {FILL_AT}


@pytest.mark.parametrize(
    ("make", "device", "dtype"),
    [
        ("Net()", '"cuda"', "torch.bfloat16"),  # bfloat16 holds -1e9
        ("Net()", "device", "amp_dtype"),  # the dtype is not written out
        ("build_model(args)", '"cuda"', "torch.float16"),  # a factory's result
        ("MODELS[args.arch]()", '"cuda"', "torch.float16"),  # a registry
        ("timm.create_model(args.arch)", '"cuda"', "torch.float16"),  # library code
    ],
)
def test_an_autocast_that_is_not_certainly_float16_over_a_known_model_is_silent(
    tmp_path: Path, make: str, device: str, dtype: str
):
    assert lint_tree(flagged(tmp_path, make=make, device=device, dtype=dtype)) == set()


def test_a_model_handed_in_as_a_parameter_is_not_followed(tmp_path: Path):
    root = flagged(tmp_path)
    train = (root / "train.py").read_text(encoding="utf-8").replace("    model = Net()\n", "")
    (root / "train.py").write_text(train.replace("def main(args, loader)", "def main(model, args, loader)"))
    assert lint_tree(root) == set()


def test_a_lightning_model_from_a_factory_is_not_followed(tmp_path: Path):
    root = lightning(tmp_path)
    train = (root / "train.py").read_text(encoding="utf-8").replace("model = Lit()", "model = make_module()")
    (root / "train.py").write_text(train)
    assert lint_tree(root) == set()


def test_a_fill_of_a_tensor_made_float32_is_silent(tmp_path: Path):
    root = flagged(tmp_path)
    attention = (root / "attention.py").read_text(encoding="utf-8")
    attention = attention.replace(
        "scores = scores.masked_fill(mask, -1e9)",
        "bias = torch.zeros(mask.shape)\n        bias.masked_fill_(mask, -1e9)\n        scores = scores + bias",
    )
    (root / "attention.py").write_text(attention)
    assert lint_tree(root) == set()


def test_bce_is_judged_only_where_autocast_runs_on_cuda(tmp_path: Path):
    write(
        tmp_path,
        {
            "loss.py": """\
                import torch.nn.functional as F
                from torch import nn


                class Head(nn.Module):
                    def forward(self, probs, y):
                        return F.binary_cross_entropy(probs, y)
                """,
            "train.py": """\
                import torch

                from loss import Head


                def main(loader, device):
                    head = Head()
                    for p, y in loader:
                        with torch.autocast(DEVICE, dtype=torch.float16):
                            loss = head(p, y)
                """,
        },
    )
    train = (tmp_path / "train.py").read_text(encoding="utf-8")
    (tmp_path / "train.py").write_text(train.replace("DEVICE", '"cuda"'))
    assert lint_tree(tmp_path) == {("loss.py", 7, "AMP105")}
    (tmp_path / "train.py").write_text(train.replace("DEVICE", '"cpu"'))
    assert lint_tree(tmp_path) == set()  # CPU autocast runs binary_cross_entropy in float32


def test_json_and_sarif_carry_where_float16_is_turned_on(tmp_path: Path):
    import os

    from click.testing import CliRunner

    from ampdoctor.cli import main

    root = lightning(tmp_path)
    old = os.getcwd()
    os.chdir(root)
    try:
        as_json = CliRunner().invoke(main, ["lint", "--no-cache", "--output-format", "json", "attention.py"])
        as_sarif = CliRunner().invoke(main, ["lint", "--no-cache", "--output-format", "sarif", "attention.py"])
    finally:
        os.chdir(old)
    (item,) = json.loads(as_json.output)
    assert (item["code"], item["path"], item["line"]) == ("AMP301", "attention.py", 13)
    set_here, handed = item["related"]
    assert (set_here["path"], set_here["line"]) == ("train.py", 8)
    assert "16-mixed" in set_here["message"]
    assert (handed["path"], handed["line"]) == ("train.py", 9)
    (result,) = json.loads(as_sarif.output)["runs"][0]["results"]
    related = result["relatedLocations"]
    assert [r["physicalLocation"]["region"]["startLine"] for r in related] == [8, 9]


def test_one_text_with_its_own_model_and_region():
    source = textwrap.dedent(
        """\
        import torch
        import torch.nn.functional as F
        from torch import nn


        class Net(nn.Module):
            def forward(self, x, y):
                return F.binary_cross_entropy(torch.sigmoid(x), y)


        net = Net()
        with torch.autocast("cuda"):
            loss = net(x, y)
        """
    )
    assert {(f.code, f.location.line) for f in lint_source(source, "train.py")} == {("AMP105", 8)}


def test_bfloat16_mixed_precision_on_a_gpu_still_bans_bce_but_holds_the_fill(tmp_path: Path):
    # torch bans binary_cross_entropy under CUDA autocast in bfloat16 too; bfloat16 holds -1e9.
    root = lightning(tmp_path, '"bf16-mixed"')
    train = (root / "train.py").read_text(encoding="utf-8")
    (root / "train.py").write_text(train.replace("L.Trainer(", 'L.Trainer(accelerator="gpu", '))
    assert lint_tree(root) == {BCE_AT}
    (root / "train.py").write_text(train.replace("L.Trainer(", 'L.Trainer(accelerator="cpu", '))
    assert lint_tree(root) == set()


TRAIN_CUDA_AMP = """\
from torch.cuda.amp import autocast

from model import Net


def main(loader):
    model = Net()
    for x, mask in loader:
        with autocast():
            out = model(x, mask)
        out.sum().backward()
"""

TRAIN_PACKAGE = """\
import torch
import nets


def main(loader):
    model = nets.model.Net()
    for x, mask in loader:
        with torch.autocast("cuda"):
            out = model(x, mask)
        out.sum().backward()
"""


@pytest.mark.parametrize("use_cache", [False, True])
def test_the_deprecated_cuda_autocast_with_no_argument_is_float16(tmp_path: Path, use_cache: bool):
    # Its text names no dtype and no device: the root stays by its import from torch.cuda.amp.
    write(tmp_path, {"attention.py": ATTENTION.replace("FILL", "-1e9"), "model.py": MODEL, "train.py": TRAIN_CUDA_AMP})
    assert lint_tree(tmp_path, use_cache=use_cache) == {FILL_AT}


def test_a_model_reached_through_a_plainly_imported_package(tmp_path: Path):
    # ``import nets`` then ``nets.model.Net()``, with nothing imported in ``__init__.py``: the
    # package's modules are all in reach.
    write(tmp_path, {"train.py": TRAIN_PACKAGE})
    write(
        tmp_path / "nets",
        {
            "__init__.py": "",
            "attention.py": ATTENTION.replace("FILL", "-1e9"),
            "model.py": MODEL.replace("from attention import", "from .attention import"),
        },
    )
    (tmp_path / "nets" / "pyproject.toml").unlink()
    found = lint_tree(tmp_path)
    assert found == {("nets/attention.py", 13, "AMP301")}


def test_an_autocast_elsewhere_that_cannot_reach_the_fill_costs_no_finding(tmp_path: Path):
    # A float16 region in a module that imports nothing leading to the fill: no finding, and the
    # module holding only the fill is never summarized for it.
    other = TRAIN_FLAG.replace("from model import Net", "from other import Net").replace("MAKE", "Net()")
    other = other.replace("DEVICE", '"cuda"').replace("DTYPE", "torch.float16")
    write(
        tmp_path,
        {
            "attention.py": ATTENTION.replace("FILL", "-1e9"),
            "other.py": "from torch import nn\n\n\nclass Net(nn.Module):\n    def forward(self, x, mask):\n        return x\n",
            "train.py": other,
        },
    )
    assert lint_tree(tmp_path) == set()


TRAINER_PACKAGE = """\
import torch

from . import losses  # noqa: F401


class Trainer:
    def __init__(self, model, loss_function, optimizer):
        self.model = model
        self.loss_function = loss_function
        self.optimizer = optimizer

    def iteration(self, x, y):
        def compute_loss():
            return self.loss_function(self.model(x), y)

        with torch.autocast("cuda", dtype=torch.float16):
            loss = compute_loss()
        loss.backward()
        self.optimizer.step()
"""

LOSSES_PACKAGE = """\
import torch
from torch import nn


class AdversarialLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.criterion = nn.BCELoss()

    def forward(self, probs, target):
        return self.criterion(torch.sigmoid(probs), target)
"""


def test_a_closure_called_in_the_region_is_not_a_model_of_the_project(tmp_path: Path):
    # ``compute_loss()`` is a function the training step defines, not an object of unknown
    # class: it opens nothing of the package (a loss the user may hand in is not the package's
    # BCE). Called as the model itself (``self.model(x)``), the region runs the package's models.
    write(tmp_path / "engine", {"__init__.py": "", "trainer.py": TRAINER_PACKAGE, "losses.py": LOSSES_PACKAGE})
    (tmp_path / "engine" / "pyproject.toml").unlink()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n', encoding="utf-8")
    assert lint_tree(tmp_path) == set()
    trainer = tmp_path / "engine" / "trainer.py"
    trainer.write_text(trainer.read_text(encoding="utf-8").replace("loss = compute_loss()", "loss = self.model(x)"))
    assert lint_tree(tmp_path) == {("engine/losses.py", 11, "AMP105")}


LOSS_HELPERS = """\
import torch.nn.functional as F


def bce_loss(probs, target):
    return F.binary_cross_entropy(probs, target)


def l1_loss(x, y):
    return (x - y).abs().mean()
"""


def _open_region(tmp_path: Path, losses: str, user: str = "") -> None:
    trainer = TRAINER_PACKAGE.replace("loss = compute_loss()", "loss = self.model(x)")
    files = {"__init__.py": "", "trainer.py": trainer, "losses.py": losses}
    if user:
        files["heads.py"] = user
    write(tmp_path / "engine", files)
    (tmp_path / "engine" / "pyproject.toml").unlink()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n', encoding="utf-8")


def test_a_loss_helper_that_nothing_names_does_not_run_under_an_open_region(tmp_path: Path):
    # A model of unknown class runs in float16 autocast: the package's modules it may reach are
    # open, but a module-level function no code names (dead code) is not run by any model.
    _open_region(tmp_path, LOSS_HELPERS)
    assert lint_tree(tmp_path) == set()


def test_a_loss_helper_exported_by_name_and_called_by_a_test_only_is_not_run_either(tmp_path: Path):
    # ``__all__`` names it in a string, and a test module calls it: no training code does.
    exported = '__all__ = ["bce_loss"]\n\n' + LOSS_HELPERS
    _open_region(tmp_path, exported)
    write(
        tmp_path / "engine" / "tests",
        {"test_losses.py": "from engine.losses import bce_loss\n\n\ndef test_bce():\n    bce_loss(p, y)\n"},
    )
    (tmp_path / "engine" / "tests" / "pyproject.toml").unlink()
    assert lint_tree(tmp_path) == set()
    # Called by a module of the package that is no test, it may run.
    (tmp_path / "engine" / "heads.py").write_text(
        "from .losses import bce_loss\n\n\ndef head(p, y):\n    return bce_loss(p, y)\n", encoding="utf-8"
    )
    assert lint_tree(tmp_path) == {("engine/losses.py", 7, "AMP105")}


@pytest.mark.parametrize(
    ("losses", "user"),
    [
        (LOSS_HELPERS, "from .losses import bce_loss\n\n\ndef head(p, y):\n    return bce_loss(p, y)\n"),
        (LOSS_HELPERS + '\n\nLOSSES = {"bce": bce_loss, "l1": l1_loss}\n', ""),
    ],
    ids=["called-elsewhere", "held-in-a-table"],
)
def test_a_loss_helper_named_elsewhere_or_in_a_table_may_run(tmp_path: Path, losses: str, user: str):
    _open_region(tmp_path, losses, user)
    assert lint_tree(tmp_path) == {("engine/losses.py", 5, "AMP105")}
