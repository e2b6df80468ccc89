"""What the lint pass reads of a file's bytes for the project pass (``project/tokens.py``), and
that the project pass then reads no file again for it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ampdoctor.config import Settings
from ampdoctor.lint import LintRequest, engine, known_codes, lint_paths
from ampdoctor.lint.project import store as store_module
from ampdoctor.lint.project.tokens import (
    CLASSES,
    CLIP_OR_UNSCALE,
    FLOAT16_AUTOCAST,
    class_statements,
    float16_risk,
    has_class,
    import_targets,
    packed_imports,
    token_classes,
    unpacked_imports,
    wanted_without_rules,
)

# The reference: one line-anchored regular expression per statement kind over the whole text.
_FROM = re.compile(rb"^[ \t]*from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]*(\([^)]*\)|[^\n#;]*)", re.MULTILINE)
_PLAIN = re.compile(rb"^[ \t]*import[ \t]+([^\n#;]+)", re.MULTILINE)
_NAME = re.compile(rb"[A-Za-z_]\w*")


def _reference(data: bytes) -> list[tuple[str, bool]]:
    found = []
    for match in _FROM.finditer(data):
        base = match.group(1).decode()
        found.append((base, False))
        for name in _NAME.findall(match.group(2)):
            if name != b"as":
                found.append((f"{base}{name.decode()}" if base.endswith(".") else f"{base}.{name.decode()}", False))
    for match in _PLAIN.finditer(data):
        for part in match.group(1).split(b","):
            if part.split():
                found.append((part.split()[0].decode(), True))
    return found


IMPORTS = b'''\
"""A module: the word import in a docstring is no import."""
import os, sys as system
import torch.nn.functional as F  # a comment
from . import utils
from ..engine import (
    train_one_epoch,
    evaluate as run_eval,
)
from importlib import import_module
from pkg.sub import a; import b
x = 1  # import nothing
def f():
    from .models import build_model
    import_module("x")
    return build_model
if True: import hidden
'''


def test_import_targets_match_the_line_anchored_reading():
    found = import_targets(IMPORTS)
    assert sorted(found) == sorted(_reference(IMPORTS))
    assert ("..engine.train_one_epoch", False) in found and ("..engine.evaluate", False) in found
    assert (".models.build_model", False) in found  # inside a function too
    assert ("torch.nn.functional", True) in found and ("sys", True) in found
    assert all(target != "hidden" for target, _plain in found)  # not at the start of a line


def test_import_targets_on_the_repository_own_sources():
    root = Path(__file__).resolve().parent.parent
    for path in sorted((root / "ampdoctor").rglob("*.py")) + sorted((root / "fixtures").rglob("*.py")):
        data = path.read_bytes()
        assert sorted(import_targets(data)) == sorted(_reference(data)), path
        assert unpacked_imports(packed_imports(import_targets(data))) == import_targets(data), path


def test_packed_imports_come_back_as_they_were():
    pairs = [("torch", True), (".", False), ("..engine.train", False), ("", False), ("a.b", True)]
    assert unpacked_imports(packed_imports(pairs)) == pairs
    assert unpacked_imports(packed_imports([])) == []


SAMPLES = {
    "scaler and epochs": b"scaler = torch.amp.GradScaler('cuda')\nfor epoch in range(3):\n    pass\n",
    "lightning float16": b'trainer = Trainer(precision="16-mixed")\n',
    "lightning integer": b"trainer = Trainer(precision=16)\n",
    "fabric": b'fabric = L.Fabric(accelerator="cuda", precision="16-mixed")\n',
    "precision outside lightning": b'config = dict(precision="16-mixed")\n',
    "precision word only": b"precision = compute_precision(y, p)\n",
    "float16 autocast": b'with torch.autocast("cuda", dtype=torch.float16):\n    y = model(x)\n',
    "cpu autocast": b'with torch.autocast("cpu", dtype=torch.bfloat16):\n    y = model(x)\n',
    "deprecated scaler, no autocast": b"scaler = torch.cuda.amp.GradScaler()\n",
    "fill": b"scores = scores.masked_fill(mask, -1e9)\n",
    "where": b"y = torch.where(mask, x, -1e9)\n",
    "full word only": b"full = True\nwhere = None\nfill = 0\n",
    "bce": b"loss = F.binary_cross_entropy(p, y)\n",
    "nothing": b"x = 1\n",
    "clip helper": b"def clip_gradients(model):\n    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n",
    "clipper class": b"class ClipGradNorm:\n    pass\n",
    "upper case": b"GRAD_CLIP = 1.0\n",
    "unscale": b"scaler.unscale_(optimizer)\n",
    "clip word only": b"x = x.clip(0, 1)\ngrad = None\n",
}


@pytest.mark.parametrize("data", SAMPLES.values(), ids=SAMPLES.keys())
def test_token_classes_agree_with_each_class_asked_on_its_own(data: bytes):
    expected = {kind for kind in CLASSES if has_class(data, kind)}
    assert token_classes(data) == expected
    # With the prefilter's answers handed over (the way the lint pass calls it): the same.
    seen: dict[bytes, bool] = {}
    engine.passes_prefilter(data, engine.prefilter_spec(frozenset(known_codes())), seen)
    assert token_classes(data, seen) == expected
    assert float16_risk(data, seen) == float16_risk(data)


def test_the_classes_of_some_samples():
    assert token_classes(SAMPLES["scaler and epochs"]) == {"scaler", "epoch"}
    assert "precision" in token_classes(SAMPLES["lightning integer"])
    assert "precision" not in token_classes(SAMPLES["precision word only"])
    assert "precision" in token_classes(SAMPLES["fabric"])
    assert "precision" not in token_classes(SAMPLES["precision outside lightning"])
    assert FLOAT16_AUTOCAST in token_classes(SAMPLES["float16 autocast"])
    for name in ("clip helper", "clipper class", "upper case", "unscale"):
        assert CLIP_OR_UNSCALE in token_classes(SAMPLES[name]), name
    assert CLIP_OR_UNSCALE not in token_classes(SAMPLES["clip word only"])
    assert token_classes(SAMPLES["cpu autocast"]) == {"autocast"}
    assert token_classes(SAMPLES["deprecated scaler, no autocast"]) == {"scaler"}
    assert token_classes(SAMPLES["full word only"]) == frozenset()
    assert float16_risk(SAMPLES["where"]) and not float16_risk(SAMPLES["full word only"])


def test_a_clip_helper_is_summarized_only_when_it_steps_something_with_an_argument():
    helper = b"def update(scaler, optimizer, model):\n    clip_grad_norm_(model.parameters(), 1.0)\n    scaler.step(\n        optimizer)\n"
    plain = b"def update(optimizer, model):\n    clip_grad_norm_(model.parameters(), 1.0)\n    optimizer.step()\n"
    assert wanted_without_rules(helper)
    assert not wanted_without_rules(plain)
    for step in ("optimizer.step(closure)", "optimizer.step(**kwargs)", "optimizer.step(lambda: loss)"):
        assert not wanted_without_rules(plain.replace(b"optimizer.step()", step.encode()))


def test_a_checkpoint_module_is_summarized_only_when_it_calls_a_checkpoint_writer():
    # torch's test helpers say "recomputes from saved inputs" and "the scaler value" in comments:
    # summarizing that 1.3 MB module doubled the lint's peak memory on the torch tree.
    words = b"# recomputes from saved inputs\n# the scaler value of the seed\ndef f(x):\n    return x\n"
    assert not wanted_without_rules(words)
    calls = ("torch.save(state, path)", "save_checkpoint (state)", "self._save(\n    state)", "dump_ckpt(state)")
    for call in calls:
        saver = words + f"def g(state, path):\n    {call}\n".encode()
        assert wanted_without_rules(saver), call
        assert not wanted_without_rules(saver.replace(b"scaler", b"other")), call


PROJECT = {
    "pyproject.toml": "",
    "train.py": """\
import torch
from model import Net

model = Net()
with torch.autocast("cuda", dtype=torch.float16):
    y = model(torch.randn(2, 4))
""",
    "model.py": """\
import torch


class Net(torch.nn.Module):
    def forward(self, x):
        return x.masked_fill(x > 0, -1e9)
""",
    **{f"other_{i}.py": f"VALUE_{i} = {i}\n" for i in range(30)},
}


@pytest.mark.parametrize("use_cache", [False, True], ids=["no cache", "cold cache"])
def test_the_project_pass_reads_no_file_again_for_its_token_classes(tmp_path: Path, monkeypatch, use_cache: bool):
    for name, text in PROJECT.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    asked: list[str] = []
    real = store_module._has_class

    def counting(data: bytes, kind: str) -> bool:
        asked.append(kind)
        return real(data, kind)

    monkeypatch.setattr(store_module, "_has_class", counting)
    imports_read: list[bytes] = []
    real_imports = store_module.import_targets
    monkeypatch.setattr(store_module, "import_targets", lambda data: imports_read.append(data) or real_imports(data))
    monkeypatch.chdir(tmp_path)
    request = LintRequest(Settings(root=tmp_path), frozenset(known_codes()), jobs=1, use_cache=use_cache)
    run = lint_paths([tmp_path], request, cwd=tmp_path)
    codes = [(Path(r.path).name, f.code) for r in run.results for f in r.findings]
    assert ("model.py", "AMP301") in codes  # the float16 pass ran and asked its questions
    assert asked == []  # answered from what the lint pass read
    assert imports_read == []  # the import index too


_CLASS_LINE = re.compile(rb"^[ \t]*class[ \t]+(\w+)[ \t]*\(([^)]*)\)", re.MULTILINE)


def _class_reference(data: bytes) -> list[tuple[str, tuple[str, ...]]]:
    """The reference: one line-anchored expression over the whole text."""
    found = []
    for match in _CLASS_LINE.finditer(data):
        names = []
        for base in match.group(2).split(b","):
            short = base.strip().rsplit(b".", 1)[-1].split(b"[", 1)[0]
            if short and b"=" not in base:
                names.append(short.decode(errors="replace"))
        found.append((match.group(1).decode(), tuple(names)))
    return found


@given(
    st.lists(
        st.sampled_from(
            [b"class", b" ", b"\t", b"\n", b"A", b"Base", b"(", b")", b",", b".", b"[T]", b"x=1", b"subclass", b"#"]
        ),
        max_size=24,
    )
)
def test_class_statements_match_the_line_anchored_reading(parts):
    data = b"".join(parts)
    assert class_statements(data) == _class_reference(data)


def test_class_statements_on_the_repository_own_sources():
    root = Path(__file__).resolve().parent.parent
    for path in sorted((root / "ampdoctor").rglob("*.py")) + sorted((root / "tests").rglob("*.py")):
        data = path.read_bytes()
        assert class_statements(data) == _class_reference(data), path


def test_the_class_statements_of_some_samples():
    text = b'''\
class Plain:
    pass
class Trainer(BaseTrainer, mixins.LoggingMixin, metaclass=abc.ABCMeta):
    class Config(pkg.configs.Base[T]):
        pass
class Wide(
    nn.Module,
    Generic[T],
):
    pass
"""An example:
class InDocstring(Base):
"""
'''
    assert class_statements(text) == [
        ("Trainer", ("BaseTrainer", "LoggingMixin")),
        ("Config", ("Base",)),
        ("Wide", ("Module", "Generic")),
        ("InDocstring", ("Base",)),  # (a text search: a candidate the summaries then turn away)
    ]
    assert class_statements(b"def f():\n    return 1\n") == []
    # The word again on the line of a statement, after it: still one statement.
    once = b'class Twice(Base): kind = "class"\n'
    assert class_statements(once) == _class_reference(once) == [("Twice", ("Base",))]


SUBCLASSED = {
    "base.py": """\
import torch


class BaseTrainer:
    def save(self, path):
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}, path)
""",
    "amp_trainer.py": """\
import torch
from base import BaseTrainer


class AmpTrainer(BaseTrainer):
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer
        self.scaler = torch.amp.GradScaler("cuda")

    def step(self, loss):
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
""",
    **{f"other_{i}.py": f"class Thing{i}(object):\n    VALUE = {i}\n" for i in range(30)},
}


def test_the_subclass_index_reads_no_file_the_lint_pass_read(tmp_path: Path, monkeypatch):
    # The base class's save leaves out the scaler its subclass trains with (AMP211, found
    # through the index of class statements): each statement as the lint pass read it.
    for name, text in SUBCLASSED.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n', encoding="utf-8")
    read: list[bytes] = []
    real = store_module.class_statements

    def counting(data: bytes) -> list[tuple[str, tuple[str, ...]]]:
        read.append(data)
        return real(data)

    monkeypatch.setattr(store_module, "class_statements", counting)
    request = LintRequest(Settings(root=tmp_path), frozenset(known_codes()), jobs=1, use_cache=False)
    run = lint_paths([tmp_path], request, cwd=tmp_path)
    codes = [(Path(r.path).name, f.code) for r in run.results for f in r.findings]
    assert ("base.py", "AMP211") in codes
    assert read == []  # every module's statements came from the lint pass
    # Linting one file, the others are read for them (they were not linted in this run).
    run = lint_paths([tmp_path / "base.py"], request, cwd=tmp_path)
    assert [(Path(r.path).name, f.code) for r in run.results for f in r.findings] == [("base.py", "AMP211")]
    assert len(read) == len(SUBCLASSED) - 1


@given(
    st.lists(
        st.sampled_from(
            ["clip", "Clip", "CLIP", "cLiP", "grad", "Grad", "GRAD", "_", "unscale_", "UnScale_", "x", " "]
        ),
        max_size=8,
    )
)
def test_the_clip_class_on_lowered_bytes_is_the_case_folding_search(parts):
    data = "".join(parts).encode()
    assert (CLIP_OR_UNSCALE in token_classes(data)) == has_class(data, CLIP_OR_UNSCALE)


def test_a_class_missing_from_a_stored_entry_is_looked_up_in_the_file(tmp_path: Path):
    # An entry whose flags were written before the last class was added (one flag short): the
    # classes it has are read from it, the missing one from the file's bytes.
    from ampdoctor.lint.project.store import SummaryStore
    from ampdoctor.lint.project.store_format import stored_classes

    assert CLASSES[-1] == CLIP_OR_UNSCALE
    older = "".join("1" if kind == "scaler" else "0" for kind in CLASSES[:-1])
    assert stored_classes(older) == {kind: kind == "scaler" for kind in CLASSES[:-1]}
    (tmp_path / "helpers.py").write_bytes(SAMPLES["clip helper"])
    store = SummaryStore(tmp_path, None)
    store.entries["helpers.py"] = {"key": "", "classes": stored_classes(older)}
    store._verified.add("helpers.py")  # as if the file were unchanged since
    assert store.has_class("helpers.py", "scaler")  # as stored, though the text has no scaler
    assert store.has_class("helpers.py", CLIP_OR_UNSCALE)  # from the file


def test_the_files_summarized_without_rules_are_the_same_with_the_prefilter_searches():
    from ampdoctor.lint.engine import passes_prefilter, prefilter_spec
    from ampdoctor.lint.rules import lint_rules

    spec = prefilter_spec(list(lint_rules()))
    root = Path(__file__).resolve().parent.parent
    wanted = 0
    for path in sorted([*root.joinpath("fixtures").rglob("*.py"), *root.joinpath("tests").rglob("*.py")]):
        data = path.read_bytes()
        seen: dict[bytes, bool] = {}
        passes_prefilter(data, spec, seen)
        token_classes(data, seen)
        answer = wanted_without_rules(data)
        assert wanted_without_rules(data, seen) is answer, path
        wanted += answer
    assert wanted > 20
    # A token the prefilter found absent is not searched for again, nor one that holds it.
    seen = {b".half": False, b"convert_to_fp16": False, b"clip_grad": False, b"autocast": False}
    assert not wanted_without_rules(b"model.half()\nreturn model\nclip_grad autocast", seen)
