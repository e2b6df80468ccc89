"""A module's outline: what its text says for certain, and that resolving a call on outlines
first never changes where it lands."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from ampdoctor.config import Settings
from ampdoctor.lint import LintRequest, known_codes, lint_paths
from ampdoctor.lint.engine import parse_source
from ampdoctor.lint.facts import build_facts
from ampdoctor.lint.project import store as store_module
from ampdoctor.lint.project.flow import Values
from ampdoctor.lint.project.link import Project
from ampdoctor.lint.project.outline import Outline, Uncertain
from ampdoctor.lint.project.store import BACKWARD_TEXT, defines_without
from ampdoctor.lint.project.summary import summarize

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "lint" / "projects"

BASES = '''\
"""Test helpers."""
import unittest

import expecttest
from torch.nn import Module as TorchModule

from .loops import Loop, run_backward

TOLERANCE = 1e-3
hooks = ["_backward_hooks"]


class TestCase(expecttest.TestCase):
    """Usage::

        class MyTest(TestCase):
            ...
    """

    precision = TOLERANCE

    def setUp(self):
        super().setUp()
        self.case = TestCase()

    def check(self, model):
        self.assertTrue(isinstance(model, TestCase))


class Trainer(
    Loop,
    metaclass=type,
):
    def fit(self, loss):
        run_backward(loss)


def helper(x):
    TestCase = x  # a local of its own
    return TestCase
'''


def outline(text: str) -> Outline:
    return Outline(textwrap.dedent(text).encode())


def test_an_outline_answers_what_the_text_says_for_certain():
    module = outline(BASES)
    assert module.class_bases("TestCase") == ["expecttest.TestCase"]
    assert module.class_bases("Trainer") == ["Loop"]  # a header over several lines
    assert module.class_bases("Missing") is None
    assert module.has_function("TestCase.assertTrue") is False
    assert module.has_function("missing") is False
    with pytest.raises(Uncertain):
        module.has_function("TestCase.check")  # it may: the summary says
    with pytest.raises(Uncertain):
        module.has_function("helper")
    assert module.import_of("expecttest") == "expecttest"
    assert module.import_of("TorchModule") == "torch.nn.Module"
    assert module.import_of("Loop") == ".loops.Loop"
    assert module.import_of("unittest") == "unittest"
    assert module.import_of("TestCase") is None
    assert module.alias("expecttest") is None
    assert module.alias("TestCase") is None  # uses and locals of a function bind no alias
    with pytest.raises(Uncertain):
        module.alias("TOLERANCE")  # assigned at module level


def test_an_outline_walks_each_block_for_the_names_it_assigns_once(monkeypatch):
    from ampdoctor.lint.project import outline as outline_module

    walked = []
    real = outline_module._stored
    monkeypatch.setattr(outline_module, "_stored", lambda tree: walked.append(tree) or real(tree))
    text = "try:\n    import apex\n    from apex import amp\nexcept ImportError:\n    pass\n"
    module = outline(text)
    assert [module.alias("apex"), module.alias("amp")] == [None, None]
    assert len(walked) == 1  # three occurrences in one block: its tree walked once
    bound = outline(text.replace("pass", "amp = None"))
    assert bound.alias("apex") is None
    with pytest.raises(Uncertain):  # the names kept from the first walk
        bound.alias("amp")
    assert len(walked) == 2


def test_an_outline_is_uncertain_where_the_text_may_mislead():
    # Bound again by the module's own code: by an assignment, in a class body, by a second import.
    with pytest.raises(Uncertain):
        outline(BASES + "expecttest = None\n").alias("expecttest")
    with pytest.raises(Uncertain):
        outline(BASES.replace("    precision = TOLERANCE", "    expecttest = TOLERANCE")).alias("expecttest")
    with pytest.raises(Uncertain):
        outline(BASES + "from other import expecttest\n").import_of("expecttest")
    # An import in an ``else`` block, which does not parse alone.
    with pytest.raises(Uncertain):
        outline("if X:\n    import a\nelse:\n    import b as a\n").import_of("a")
    assert outline("try:\n    import a\nexcept ImportError:\n    pass\n").import_of("a") == "a"
    # A class of that name twice, or inside a block, or also imported: the summary says which.
    with pytest.raises(Uncertain):
        outline(BASES + "\n\nclass TestCase:\n    pass\n").class_bases("TestCase")
    with pytest.raises(Uncertain):
        outline("if X:\n    class A(B):\n        pass\n").class_bases("A")
    with pytest.raises(Uncertain):
        outline("from x import A\n\n\nclass A(B):\n    pass\n").class_bases("A")
    # A header that does not parse on its own (a one-line class).
    with pytest.raises(Uncertain):
        outline("class A(B): pass\n").class_bases("A")
    # Names that are not plain ASCII identifiers are left to the summary.
    with pytest.raises(Uncertain):
        outline("class Ä(B):\n    pass\n").class_bases("Ä")


def test_the_text_test_on_a_function_still_holds_after_the_move():
    module = b"import torch\n\n\ndef move(batch):\n    return batch\n\n\ndef run(loss):\n    loss.backward()\n"
    assert defines_without(module, "move", BACKWARD_TEXT)
    assert not defines_without(module, "run", BACKWARD_TEXT)


def _summary(data: bytes) -> dict | None:
    source = data.decode("utf-8")
    return summarize(build_facts(parse_source(source), source))


def _fixture(root: Path) -> tuple[set[str], dict[str, dict | None], Callable[[str], Outline | None]]:
    """A fixture project's files, their summaries, and a way to read each one's outline."""
    files = {p.relative_to(root).as_posix() for p in root.rglob("*.py")}
    summaries = {rel: _summary((root / rel).read_bytes()) for rel in files}

    def outline_of(rel: str) -> Outline | None:
        return Outline((root / rel).read_bytes())

    return files, summaries, outline_of


def _landings(root: Path, with_outlines: bool) -> list:
    files, summaries, outline_of = _fixture(root)
    found = []
    for rel in sorted(files):
        for call in (summaries[rel] or {}).get("calls", []):
            for without in (None, BACKWARD_TEXT):
                project = Project(files, summaries.get, outline=outline_of if with_outlines else None)
                target = project.resolve_call(rel, call, without)
                found.append((rel, call["callee"], target and (target.module, target.name, target.skip)))
    return found


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()))
def test_every_call_of_the_project_fixtures_lands_where_it_did_without_outlines(name: str):
    root = FIXTURES / name
    assert _landings(root, True) == _landings(root, False)


def _recording(texts: dict[str, str], summarized: list[str]) -> Project:
    """A project of ``texts`` that notes in ``summarized`` each module it summarizes."""

    def load(rel: str) -> dict | None:
        summarized.append(rel)
        return _summary(texts[rel].encode())

    return Project(
        set(texts), load, outline=lambda rel: Outline(texts[rel].encode()), text=lambda rel: texts[rel].encode()
    )


def test_a_class_constructed_from_another_module_is_found_without_summarizing_the_modules_it_passes():
    texts = {
        "train.py": "import torch\n\nfrom models import Net\n\n\ndef main():\n    model = Net()\n",
        "models/__init__.py": "from .net import Net\n",
        "models/net.py": "import torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        return x\n",
    }
    summarized: list[str] = []
    project = _recording(texts, summarized)
    project.summary("train.py")
    assert project.resolve_class_on_text_first("train.py", ["Net"]) == ("models/net.py", "Net")
    assert project.resolve_class_on_text_first("train.py", ["torch", "nn", "Linear"]) is None
    assert summarized == ["train.py"]
    # Where the text is not certain (the class is defined twice), the summaries decide.
    texts["models/net.py"] += "\n\nif torch.cuda.is_available():\n    class Net(torch.nn.Module):\n        pass\n"
    fresh = _recording(texts, summarized)
    assert fresh.resolve_class_on_text_first("train.py", ["Net"]) == ("models/net.py", "Net")
    assert "models/net.py" in summarized


def _classes(root: Path, with_outlines: bool) -> list:
    files, summaries, outline_of = _fixture(root)
    found = []
    for rel in sorted(files):
        for call in (summaries[rel] or {}).get("calls", []):
            project = Project(files, summaries.get, outline=outline_of if with_outlines else None)
            found.append((rel, call["callee"], project.resolve_class_on_text_first(rel, call["callee"].split("."))))
    return found


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()))
def test_every_callee_of_the_project_fixtures_names_the_class_it_did_without_outlines(name: str):
    root = FIXTURES / name
    found = _classes(root, True)
    assert found == _classes(root, False)
    # and the classes are those the full walk names
    files, summaries, _outline_of = _fixture(root)
    project = Project(files, summaries.get)
    for rel, callee, answer in found:
        spelled = project.resolve_spelled(rel, callee.split("."))
        assert answer == (spelled[:2] if spelled is not None and spelled[2] == "class" else None)


def test_a_factory_function_is_no_class_without_summarizing_its_module():
    texts = {
        "train.py": "from models import build_model, Net\n\n\ndef main():\n    build_model()\n    Net()\n",
        "models.py": (
            "import torch\n\n\ndef build_model():\n    return Net()\n\n\n"
            "class Net(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
        ),
    }
    summarized: list[str] = []
    project = _recording(texts, summarized)
    project.summary("train.py")
    # ``def build_model`` may be a nested function for all the outline knows, but the name is no
    # class of the module either way.
    assert project.resolve_class_on_text_first("train.py", ["build_model"]) is None
    assert project.resolve_class_on_text_first("train.py", ["Net"]) == ("models.py", "Net")
    assert summarized == ["train.py"]
    # A class of the name beside a ``def`` of it: which one the name is, the summary says.
    texts["models.py"] += "\n\nclass build_model:\n    pass\n"
    fresh = _recording(texts, summarized)
    fresh.summary("train.py")
    assert fresh.resolve_class_on_text_first("train.py", ["build_model"]) is None  # the summary: a function first
    assert "models.py" in summarized


def test_a_package_without_helper_tokens_is_read_as_an_outline(tmp_path: Path):
    from ampdoctor.lint.project.store import SummaryStore

    (tmp_path / "models").mkdir()
    texts = {
        "train.py": "import torch\nfrom models import Net\n\n\ndef main(optimizer):\n    model = Net()\n",
        "models/__init__.py": "from .net import Net\n",
        "models/net.py": "import torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        return x\n",
    }
    for rel, text in texts.items():
        (tmp_path / rel).write_text(text, encoding="utf-8")
    store = SummaryStore(tmp_path, None)
    assert store.outline("models/__init__.py") is not None  # no helper token: an outline all the same
    project = Project(set(texts), store.summary, store.defines_without, store.outline, store.text)
    project.summary("train.py")
    assert project.resolve_class_on_text_first("train.py", ["Net"]) == ("models/net.py", "Net")
    assert store.made == 1  # train.py alone: the package's ``__init__`` was not parsed


def test_a_constructed_class_whose_module_names_no_value_is_left_to_the_calls_fallback():
    from ampdoctor.lint.project.flow import Values

    texts = {
        "train.py": "from nets import Net\nfrom state import Holder\n\n\ndef main(o):\n    Net()\n    Holder(o)\n",
        "nets.py": "import torch\n\n\nclass Net(torch.nn.Module):\n    pass\n",
        "state.py": "class Holder:\n    def __init__(self, optimizer):\n        self.optimizer = optimizer\n",
    }
    summarized: list[str] = []
    project = _recording(texts, summarized)
    project.summary("train.py")
    values = Values(project)
    assert values.construction("train.py", "Net") is None  # a model: it holds what it is given
    assert values.construction("train.py", "Holder") == ("state.py", "Holder")
    assert values.construction("train.py", "Net", words=None) == ("nets.py", "Net")
    assert summarized == ["train.py"]


TRAIN = """\
import torch

from helpers import TestCase


class TestAmp(TestCase):
    def test_step(self, model, batch):
        with torch.autocast("cuda", dtype=torch.float16):
            self.assertTrue(model(batch) is not None)
"""
FIT = """\
import torch

from helpers import TestCase


class TestAmp(TestCase):
    def test_step(self, model, batch):
        with torch.autocast("cuda", dtype=torch.float16):
            self.fit(model(batch).sum())
"""
RUNNER = """\
import expecttest


class Trainer(object):
    def fit(self, loss):
        loss.backward()


class TestCase(Trainer, expecttest.TestCase):
    pass
"""


@pytest.mark.parametrize("script", ["library_method", "project_method"])
def test_a_base_class_module_is_parsed_only_where_the_call_may_land_in_it(tmp_path: Path, monkeypatch, script: str):
    if script == "library_method":
        train, helpers = TRAIN, BASES.replace("from .loops import Loop, run_backward\n", "")
    else:
        train, helpers = FIT, RUNNER
    (tmp_path / "pyproject.toml").write_text("", encoding="utf-8")
    (tmp_path / "train.py").write_text(train, encoding="utf-8")
    (tmp_path / "helpers.py").write_text(helpers, encoding="utf-8")
    made = []
    original = store_module.summarize_bytes
    monkeypatch.setattr(store_module, "summarize_bytes", lambda data: made.append(data) or original(data))
    settings = Settings(root=tmp_path)
    request = LintRequest(settings, settings.enabled_codes(known_codes()))
    run = lint_paths([tmp_path / "train.py"], request, cwd=tmp_path)
    findings = sorted((f.location.line, f.code) for f in run.findings)
    if script == "project_method":
        assert findings == [(9, "AMP101")]  # self.fit runs the backward inside autocast
        assert helpers.encode() in made
    else:
        # self.assertTrue comes from a library class, through a project class in a module that
        # is never parsed.
        assert findings == []
        assert helpers.encode() not in made


@pytest.mark.parametrize("ending", ["", "\n", "\n\n"])
def test_a_blocks_text_is_the_modules_lines_it_spans(ending: str):
    data = (BASES.rstrip("\n") + ending).encode()
    outline = Outline(data)
    outline._split()
    lines = data.split(b"\n")
    for _kind, start, end in outline._blocks:
        for stop in range(start, end + 1):
            assert outline._text(start, stop) == b"\n".join(lines[start:stop])


def test_a_call_that_lands_for_certain_on_outlines_leaves_the_modules_it_passes_unparsed():
    texts = {
        "train.py": "import torch\nfrom pkg import save_state\n\n\ndef main(optimizer):\n    save_state(optimizer)\n",
        "pkg/__init__.py": "from .impl import save_state\n",
        "pkg/impl.py": "import torch\n\n\ndef save_state(optimizer):\n    torch.save(optimizer.state_dict(), 'o.pt')\n",
    }
    summarized: list[str] = []
    project = _recording(texts, summarized)
    [call] = [c for c in project.summary("train.py")["calls"] if c["callee"] == "save_state"]
    project.summary("pkg/impl.py")  # the lint pass summarized it: its function is known for certain
    target = project.resolve_call("train.py", call)
    assert target is not None and (target.module, target.name) == ("pkg/impl.py", "save_state")
    assert summarized == ["train.py", "pkg/impl.py"]  # the package's ``__init__`` was read as an outline
    # Without outlines, the same landing.
    plain = Project(set(texts), lambda rel: _summary(texts[rel].encode()))
    found = plain.resolve_call("train.py", call)
    assert found is not None and (found.module, found.name, found.skip) == (target.module, target.name, target.skip)


def _bases_and_subclasses(root: Path, with_outlines: bool) -> tuple[list, list]:
    files, summaries, outline_of = _fixture(root)
    project = Project(
        files,
        summaries.get,
        outline=outline_of if with_outlines else None,
        text=lambda rel: (root / rel).read_bytes(),
    )
    values = Values(project)
    bases, subclasses = [], []
    for rel in sorted(files):
        for name in sorted((summaries[rel] or {}).get("classes", {})):
            bases.append((rel, name, project.class_bases_on_text_first(rel, name)))
            subclasses.append((rel, name, values.subclasses(rel, name)))
    return bases, subclasses


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()))
def test_every_class_of_the_project_fixtures_has_the_bases_and_subclasses_it_had_without_outlines(name: str):
    root = FIXTURES / name
    with_outlines = _bases_and_subclasses(root, True)
    assert with_outlines == _bases_and_subclasses(root, False)
    _files, summaries, _outline_of = _fixture(root)
    for rel, cls, bases in with_outlines[0]:
        assert bases == summaries[rel]["classes"][cls]["bases"]


def test_a_candidate_subclass_is_read_from_its_outline():
    """``Quiet(Trainer)`` names another ``Trainer`` (a library's): the subclass index offers it,
    and its module is read as an outline, not summarized, to find that out."""
    texts = {
        "base.py": "class Trainer:\n    pass\n",
        "amp.py": "from base import Trainer\n\n\nclass AmpTrainer(Trainer):\n    pass\n",
        "elsewhere.py": "from lightning import Trainer\n\n\nclass Quiet(Trainer):\n    pass\n",
    }
    summarized: list[str] = []
    project = _recording(texts, summarized)
    assert Values(project).subclasses("base.py", "Trainer") == [("amp.py", "AmpTrainer")]
    assert "elsewhere.py" not in summarized and "amp.py" not in summarized


def test_the_names_a_block_stores_are_those_a_full_walk_finds():
    import ast

    from ampdoctor.lint.project.outline import _stored

    root = Path(__file__).resolve().parent.parent
    checked = 0
    for path in sorted([*root.joinpath("fixtures").rglob("*.py"), *root.joinpath("tests").rglob("*.py")]):
        try:
            tree = ast.parse(path.read_bytes())
        except SyntaxError:
            continue
        walked = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        assert _stored(tree) == walked, path
        checked += 1
    assert checked > 300
    tree = ast.parse(
        "a = 1\nb, [c, *d] = e\nfor f in g: h += f\nwith i() as (j, k): l[m] = n.o\ndel p\nq = [r for r in s]"
    )
    assert _stored(tree) == {"a", "b", "c", "d", "f", "h", "j", "k", "q", "r"}
