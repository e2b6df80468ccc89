"""The pieces of the project analysis: summaries, the root of a file list, the link step, the
summary cache, and the cross-module checks' silence where the link is not certain."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from ampdoctor.config import Settings
from ampdoctor.lint import LintRequest, known_codes, lint_paths
from ampdoctor.lint.engine import parse_source
from ampdoctor.lint.facts import build_facts
from ampdoctor.lint.project import store as store_module
from ampdoctor.lint.project.link import Project
from ampdoctor.lint.project.root import module_name, project_root
from ampdoctor.lint.project.run import project_folder
from ampdoctor.lint.project.store import SummaryStore
from ampdoctor.lint.project.summary import summarize


def summary_of(source: str) -> dict:
    source = textwrap.dedent(source)
    return summarize(build_facts(parse_source(source), source))


def write(root: Path, files: dict[str, str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text('[project]\nname = "p"\n', encoding="utf-8")
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def project_of(files: dict[str, str]) -> Project:
    summaries = {rel: summary_of(text) for rel, text in files.items()}
    return Project(set(files), summaries.get)


def lint_tree(root: Path, paths=None, use_cache=False) -> list:
    settings = Settings(root=root)
    codes = settings.enabled_codes(known_codes())
    run = lint_paths(paths or [root], LintRequest(settings, codes, use_cache=use_cache), cwd=root)
    return sorted((f.location.path, f.location.line, f.code) for f in run.findings)


SCRIPT = """\
import torch
from utils import save_checkpoint

scaler = torch.amp.GradScaler("cuda")
for x in loader:
    with torch.autocast("cuda"):
        loss = model(x)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    save_checkpoint(model, optimizer, "ckpt.pt")
"""
HELPER = """\
import torch

def save_checkpoint(model, optimizer, path):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
"""


# ---- summaries ------------------------------------------------------------------------


def test_summary_is_plain_json_data_and_names_parameters_and_saves():
    summary = summary_of(HELPER)
    assert json.loads(json.dumps(summary)) == summary
    function = summary["functions"]["save_checkpoint"]
    assert function["params"] == ["model", "optimizer", "path"]
    # What the save writes, as abstract values: the states of its first two parameters.
    (save,) = summary["flows"]["save_checkpoint"]["saves"]
    assert set(save[1]) == {"P0", "P1"}


def test_summary_values_name_the_parameters_a_spread_or_a_field_comes_from():
    summary = summary_of("""\
        import torch
        def save(model, optimizer, extra, path):
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), **extra}, path)
        def save2(model, optimizer, extra_state, epoch, path):
            torch.save({"optimizer": optimizer.state_dict(), "extra": extra_state, "epoch": epoch}, path)
        """)
    assert "P2" in summary["flows"]["save"]["saves"][0][1]
    assert {"P1", "P2", "P3"} <= set(summary["flows"]["save2"]["saves"][0][1])


def test_summary_records_a_clip_before_a_parameter_step_only_without_unscale():
    summary = summary_of("""\
        import torch
        def step(model, optimizer, scaler):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
        def step_unscaled(model, optimizer, scaler):
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
        """)
    assert summary["functions"]["step"]["clips"][0]["param"] == "scaler"
    assert "clips" not in summary["functions"]["step_unscaled"]


# ---- root ---------------------------------------------------------------------------------


def test_project_root_is_the_nearest_marked_folder_shared_by_all_paths(tmp_path: Path):
    write(tmp_path / "a", {"pkg/train.py": "", "pkg/utils.py": ""})
    write(tmp_path / "b", {"x.py": ""})
    assert project_root([tmp_path / "a/pkg/train.py", tmp_path / "a/pkg/utils.py"]) == (tmp_path / "a").resolve()
    assert project_root([tmp_path / "a/pkg/train.py", tmp_path / "b/x.py"]) is None
    assert module_name(tmp_path / "a/pkg/__init__.py", tmp_path / "a") == "pkg"


def test_an_installed_package_is_not_part_of_the_project_around_its_environment(tmp_path: Path):
    # The project's listing skips environment folders; a package linted inside one is its own.
    installed = ".venv/lib/python3.11/site-packages/pkg"
    write(tmp_path, {"train.py": "", f"{installed}/mod.py": "", "venv/lib/other/x.py": ""})
    assert project_root([tmp_path / installed / "mod.py"]) is None
    assert project_root([tmp_path / "venv/lib/other/x.py"]) is None
    assert project_folder([str(tmp_path / installed / "mod.py")]) == ((tmp_path / installed).resolve(), False)
    # A marked package inside the environment is still its own project.
    write(tmp_path / installed, {"sub/a.py": ""})
    assert project_root([tmp_path / installed / "sub/a.py"]) == (tmp_path / installed).resolve()
    assert project_root([tmp_path / "train.py"]) == tmp_path.resolve()
    assert module_name(tmp_path / "a/pkg/utils.py", tmp_path / "a") == "pkg.utils"


# ---- link ---------------------------------------------------------------------------------


def test_summary_leaves_out_calls_no_cross_module_rule_asks_about():
    summary = summary_of("import utils\n" + "".join(f"y{i} = model(x{i})\n" for i in range(200)))
    assert summary["calls"] == []


def _call(project: Project, module: str, callee: str) -> dict:
    return next(c for c in project.calls(module) if c["callee"] == callee)


def test_link_follows_relative_imports_reexports_and_aliases():
    project = project_of(
        {
            "pkg/__init__.py": "from .io import save_checkpoint\n",
            "pkg/io.py": HELPER,
            # (in a loop: the summary keeps only the calls a cross-module rule may ask about)
            "pkg/train.py": "from . import io\nfrom pkg import save_checkpoint\nsave = io.save_checkpoint\n"
            "for epoch in range(3):\n    save_checkpoint(m, o, p)\n    io.save_checkpoint(m, o, p)\n"
            "    save(m, o, p)\n",
        }
    )
    for callee in ("save_checkpoint", "io.save_checkpoint", "save"):
        target = project.resolve_call("pkg/train.py", _call(project, "pkg/train.py", callee))
        assert (target.module, target.name, target.skip) == ("pkg/io.py", "save_checkpoint", 0), callee


def test_link_follows_self_methods_base_classes_and_objects_of_project_classes():
    project = project_of(
        {
            "base.py": "class Base:\n    def save(self, path):\n        pass\n",
            "trainer.py": "from base import Base\nfrom saver import Saver\n"
            "class Trainer(Base):\n    def __init__(self):\n        self.saver = Saver()\n"
            "    def fit(self):\n        local = Saver()\n        for step in range(3):\n"
            "            self.save('p')\n            self.saver.write(1)\n            local.write(2)\n",
            "saver.py": "class Saver:\n    def write(self, epoch):\n        pass\n",
        }
    )
    calls = {c["callee"]: project.resolve_call("trainer.py", c) for c in project.calls("trainer.py")}
    assert (calls["self.save"].module, calls["self.save"].name, calls["self.save"].skip) == ("base.py", "Base.save", 1)
    assert calls["self.saver.write"].name == "Saver.write"
    assert calls["local.write"].name == "Saver.write"


def test_link_resolves_nothing_it_cannot_be_sure_of():
    project = project_of(
        {
            "train.py": "import json\nimport torch\nfrom thirdparty import save\n"
            "def f(saver, cls_name):\n  for i in range(3):\n    saver.save(1)\n    save(2)\n"
            "    getattr(saver, cls_name)(3)\n    torch.save(4, 'x')\n    json.dump(5)\n",
        }
    )
    calls = project.calls("train.py")
    assert {c["callee"] for c in calls} == {"saver.save", "save", "json.dump"}
    assert all(project.resolve_call("train.py", c) is None for c in calls)


# ---- cross-module checks, end to end on small projects ----------------------------------


def test_helper_without_the_scaler_is_reported_at_the_call(tmp_path: Path):
    write(tmp_path, {"train.py": SCRIPT, "utils.py": HELPER})
    assert lint_tree(tmp_path) == [("train.py", 11, "AMP211")]


@pytest.mark.parametrize(
    "script, helper",
    [
        # The helper saves the scaler it is handed, and the caller hands it over.
        (
            SCRIPT.replace('optimizer, "ckpt.pt")', 'optimizer, "ckpt.pt", scaler)'),
            HELPER.replace("path):", "path, scaler=None):").replace(
                "optimizer.state_dict()}", 'optimizer.state_dict(), "scaler": scaler and scaler.state_dict()}'
            ),
        ),
        # The helper saves whatever extra state it is given, and the caller gives the scaler's.
        (
            SCRIPT.replace('optimizer, "ckpt.pt")', 'optimizer, "ckpt.pt", scaler=scaler.state_dict())'),
            HELPER.replace("path):", "path, **extra):").replace(
                "optimizer.state_dict()}", "optimizer.state_dict(), **extra}"
            ),
        ),
        # The checkpoint spreads a mapping the module takes from ``import *``: it may hold anything.
        (
            SCRIPT,
            HELPER.replace("import torch", "import torch\nfrom settings import *").replace(
                "optimizer.state_dict()}", "optimizer.state_dict(), **EXTRA}"
            ),
        ),
    ],
)
def test_helper_that_may_carry_the_scaler_is_not_reported(tmp_path: Path, script: str, helper: str):
    write(tmp_path, {"train.py": script, "utils.py": helper})
    assert lint_tree(tmp_path) == []


@pytest.mark.parametrize(
    "helper",
    [
        HELPER.replace("path):", "path, scaler=None):"),  # takes a scaler it never saves
        HELPER.replace("path):", "path, **kw):"),  # takes keywords it never saves
        # saves the scaler, but none is handed over
        HELPER.replace("path):", "path, scaler=None):").replace(
            "optimizer.state_dict()}", 'optimizer.state_dict(), "scaler": scaler and scaler.state_dict()}'
        ),
    ],
)
def test_helper_that_takes_a_scaler_but_is_not_handed_one_is_reported(tmp_path: Path, helper: str):
    write(tmp_path, {"train.py": SCRIPT, "utils.py": helper})
    assert lint_tree(tmp_path) == [("train.py", 11, "AMP211")]


def test_call_that_passes_the_scaler_or_spreads_arguments_is_not_reported(tmp_path: Path):
    script = SCRIPT.replace('save_checkpoint(model, optimizer, "ckpt.pt")', "save_checkpoint(*parts)").replace(
        "from utils import save_checkpoint", "from utils import save_checkpoint\nfrom settings import *"
    )
    write(tmp_path, {"train.py": script, "utils.py": HELPER})
    assert lint_tree(tmp_path) == []
    script = SCRIPT + 'torch.save(scaler.state_dict(), "scaler.pt")\n'
    write(tmp_path, {"train.py": script, "utils.py": HELPER})
    assert lint_tree(tmp_path) == []


UPDATE = """\
import torch

def update(model, optimizer, scaler):
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
"""
CALLER = """\
import torch
from helpers import update

scaler = torch.amp.GradScaler("cuda")
for x in loader:
    with torch.autocast("cuda"):
        loss = model(x)
    scaler.scale(loss).backward()
    {unscale}update(model, optimizer, scaler)
"""


def test_update_helper_is_silent_when_any_caller_unscales_first(tmp_path: Path):
    write(
        tmp_path,
        {
            "helpers.py": UPDATE,
            "a.py": CALLER.format(unscale=""),
            "b.py": CALLER.format(unscale="scaler.unscale_(optimizer)\n    "),
        },
    )
    assert lint_tree(tmp_path) == []
    write(tmp_path, {"b.py": CALLER.format(unscale="")})
    assert lint_tree(tmp_path) == [("helpers.py", 4, "AMP201")]


def test_noqa_on_the_anchor_line_suppresses_a_cross_module_finding(tmp_path: Path):
    write(tmp_path, {"train.py": SCRIPT.replace('"ckpt.pt")', '"ckpt.pt")  # noqa: AMP211'), "utils.py": HELPER})
    assert lint_tree(tmp_path) == []


def test_a_failing_project_pass_is_said_in_one_line_and_the_files_own_findings_stand(
    tmp_path: Path, monkeypatch, capsys
):
    from ampdoctor.lint.project import run as run_module

    buggy = (Path(__file__).parent.parent / "fixtures" / "lint" / "buggy_no_update.py").read_text(encoding="utf-8")
    write(tmp_path, {"train.py": SCRIPT, "utils.py": HELPER, "buggy.py": buggy})
    own = [f for f in lint_tree(tmp_path) if f[2] != "AMP211"]
    assert own  # the file-local findings the failed pass must leave standing
    capsys.readouterr()

    def broken(*args, **kwargs):
        raise KeyError("functions")

    monkeypatch.setattr(run_module, "link_results", broken)
    monkeypatch.delenv("AMPDOCTOR_DEBUG", raising=False)
    assert lint_tree(tmp_path) == own
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["ampdoctor: the project analysis failed (KeyError: 'functions'); file-local findings only"]


# ---- the summary cache --------------------------------------------------------------------


def test_unchanged_files_are_summarized_once_and_a_changed_one_again(tmp_path: Path, monkeypatch):
    write(tmp_path, {"train.py": SCRIPT, "utils.py": HELPER})
    assert lint_tree(tmp_path, use_cache=True) == [("train.py", 11, "AMP211")]
    made = []
    original = store_module.summarize_bytes
    monkeypatch.setattr(store_module, "summarize_bytes", lambda data: made.append(data) or original(data))
    # The files' modification times must be older than the cache by the racy margin.
    import os
    import time

    old = time.time() - 10
    for name in ("train.py", "utils.py"):
        os.utime(tmp_path / name, (old, old))
    lint_tree(tmp_path, use_cache=True)  # re-hashes the touched files once, records their new times
    made.clear()
    assert lint_tree(tmp_path, [tmp_path / "train.py"], use_cache=True) == [("train.py", 11, "AMP211")]
    assert made == []
    # The helper now writes the weights alone: an export, not a checkpoint to resume from.
    export = HELPER.replace(', "optimizer": optimizer.state_dict()}', "}")
    (tmp_path / "utils.py").write_text(export, encoding="utf-8")
    assert lint_tree(tmp_path, [tmp_path / "train.py"], use_cache=True) == []
    assert len(made) == 1


def test_store_survives_a_broken_cache_file(tmp_path: Path):
    write(tmp_path, {"train.py": SCRIPT, "utils.py": HELPER})
    folder = tmp_path / ".ampdoctor_cache"
    store = SummaryStore(tmp_path, folder)
    folder.mkdir()
    store.path.write_text("{not json", encoding="utf-8")
    assert SummaryStore(tmp_path, folder).summary("utils.py")["functions"]["save_checkpoint"]


TRAINER = """\
import torch

class Trainer:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer
        self.scaler = None

    def train_epoch(self, loader):
        {make}
        for x in loader:
            with torch.autocast("cuda"):
                loss = self.model(x)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()

    def fit(self, loader, epochs):
        for epoch in range(epochs):
            self.train_epoch(loader)
"""


def test_scaler_rebuilt_on_self_by_a_method_called_per_epoch(tmp_path: Path):
    write(tmp_path, {"trainer.py": TRAINER.format(make='self.scaler = torch.amp.GradScaler("cuda")')})
    assert lint_tree(tmp_path) == [("trainer.py", 9, "AMP205")]
    lazy = 'if self.scaler is None:\n            self.scaler = torch.amp.GradScaler("cuda")'
    write(tmp_path, {"trainer.py": TRAINER.format(make=lazy)})
    assert lint_tree(tmp_path) == []


def test_lint_source_follows_calls_between_the_texts_own_functions():
    import ampdoctor

    source = TRAINER.format(make='self.scaler = torch.amp.GradScaler("cuda")')
    (finding,) = ampdoctor.lint_source(source, "trainer.py")
    assert (finding.code, finding.location.line) == ("AMP205", 9)
    assert [(r.path, r.line) for r in finding.related] == [("trainer.py", 19)]
    noqa = source.replace('GradScaler("cuda")', 'GradScaler("cuda")  # noqa: AMP205')
    assert ampdoctor.lint_source(noqa, "trainer.py") == []


def test_a_marked_folder_too_large_to_be_a_project_links_nothing(tmp_path: Path, monkeypatch):
    from ampdoctor.lint.project import run as run_module

    write(tmp_path, {"train.py": SCRIPT, "utils.py": HELPER})
    monkeypatch.setattr(run_module, "MAX_PROJECT_FILES", 1)
    assert lint_tree(tmp_path) == []


def test_dict_literal_handed_straight_to_a_helper_that_saves_it(tmp_path: Path):
    helper = "import torch\n\ndef save_checkpoint(state, filename='c.pth'):\n    torch.save(state, filename)\n"
    call = 'save_checkpoint(model, optimizer, "ckpt.pt")'
    literal = 'save_checkpoint({"state_dict": model.state_dict(), "optimizer": optimizer.state_dict()})'
    write(tmp_path, {"train.py": SCRIPT.replace(call, literal), "utils.py": helper})
    assert lint_tree(tmp_path) == [("train.py", 11, "AMP211")]
    with_scaler = literal.replace("})", ', "scaler": scaler.state_dict()})')
    write(tmp_path, {"train.py": SCRIPT.replace(call, with_scaler)})
    assert lint_tree(tmp_path) == []


def test_without_a_marked_folder_the_project_is_the_linted_files(tmp_path: Path):
    folder = tmp_path / "scripts"
    folder.mkdir()
    (folder / "train.py").write_text(SCRIPT, encoding="utf-8")
    (folder / "utils.py").write_text(HELPER, encoding="utf-8")
    settings = Settings(root=tmp_path)
    codes = settings.enabled_codes(known_codes())

    def run(paths):
        findings = lint_paths(paths, LintRequest(settings, codes), cwd=tmp_path).findings
        return sorted((f.location.path, f.location.line, f.code) for f in findings)

    # No pyproject.toml, setup.cfg or .git above: the folder linted is the project...
    assert run([folder]) == [("scripts/train.py", 11, "AMP211")]
    # ...and a file linted alone has no other module to link to.
    assert run([folder / "train.py"]) == []


# ---- a module is not summarized only to learn that its function runs no backward ----------


def test_text_test_is_certain_only_for_an_own_top_level_definition_without_the_pattern():
    from ampdoctor.lint.project.store import BACKWARD_TEXT, defines_without

    module = textwrap.dedent('''\
        """Helpers."""
        import torch

        hook_names = ["_backward_hooks"]


        def move(
            batch,
            device,
        ):
            return batch.to(device)


        def run(loss):
            loss.backward()


        class Runner:
            def go(self, x):
                return x
    ''').encode()
    assert defines_without(module, "move", BACKWARD_TEXT)
    assert defines_without(module, "Runner.go", BACKWARD_TEXT)
    assert not defines_without(module, "run", BACKWARD_TEXT)  # runs one
    assert not defines_without(module, "absent", BACKWARD_TEXT)  # may come from elsewhere
    assert not defines_without(module, "Runner.a.b", BACKWARD_TEXT)
    # The name bound again by the module's own code: which one a call lands in is not certain.
    assert not defines_without(module + b"move = torch.nn.Module.to\n", "move", BACKWARD_TEXT)
    assert not defines_without(module + b"from steps import move\n", "move", BACKWARD_TEXT)
    # A backward the module's imports hand to any of its functions.
    assert not defines_without(b"from torch.autograd import backward as bw\n" + module, "move", BACKWARD_TEXT)
    assert not defines_without(
        module.replace(b"class Runner:", b"class Runner:\n    step = loss.backward"), "Runner.go", BACKWARD_TEXT
    )
    # A line at the left margin inside a string of the function: where it ends is not known.
    cut = module.replace(
        b"    return batch.to(device)", b'    """Moves the batch.\n\nSee the loader.\n"""\n    return batch.to(device)'
    )
    assert cut != module
    assert not defines_without(cut, "move", BACKWARD_TEXT)


def test_the_store_answers_each_text_question_once_and_finds_a_modules_blocks_once(tmp_path: Path, monkeypatch):
    from ampdoctor.lint.project.outline import blocks
    from ampdoctor.lint.project.store import BACKWARD_TEXT, SummaryStore, defines_without

    texts = {
        "helpers.py": b"def move(batch):\n    return batch\n\n\ndef run(loss):\n    loss.backward()\n",
        "other.py": b"class Runner:\n    def go(self, x):\n        return x\n\n\nmove = None\n",
    }
    for rel, data in texts.items():
        (tmp_path / rel).write_bytes(data)
    found: list[int] = []
    monkeypatch.setattr(store_module, "blocks", lambda lines: found.append(len(lines)) or blocks(lines))
    asked = [(rel, name) for rel in texts for name in ("move", "run", "Runner.go", "absent")]
    store = SummaryStore(tmp_path, None)
    first = [store.defines_without(rel, name, BACKWARD_TEXT) for rel, name in asked]
    assert first == [defines_without(texts[rel], name, BACKWARD_TEXT) for rel, name in asked]
    assert first.count(True) == 2  # helpers.move, other.Runner.go
    assert len(found) == 2  # once per module, not per question
    calls = []
    monkeypatch.setattr(store_module, "defines_without", lambda *a: calls.append(a) or defines_without(*a))
    assert [store.defines_without(rel, name, BACKWARD_TEXT) for rel, name in asked] == first
    assert calls == [] and len(found) == 2  # asked again: answered from what the store knows


CHAIN_TRAIN = """\
import torch

from steps import run_step


def train(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = run_step(model, batch, scaler)
        scaler.step(optimizer)
        scaler.update()
    return loss
"""
CHAIN_STEPS = """\
from passes import finish


def run_step(model, batch, scaler):
    loss = model(batch).mean()
    finish(loss, scaler)
    return loss
"""
CHAIN_PASSES = """\
import torch


def finish(loss, scaler):
    scaler.scale(loss).backward()


def unrelated(loss):
    loss.backward()
"""


@pytest.mark.parametrize("runs", [True, False])
def test_a_backward_two_calls_away_is_found_and_a_function_without_one_is_not_parsed(
    tmp_path: Path, monkeypatch, runs: bool
):
    passes = CHAIN_PASSES if runs else CHAIN_PASSES.replace("scaler.scale(loss).backward()", "return scaler")
    write(tmp_path, {"pyproject.toml": "", "train.py": CHAIN_TRAIN, "steps.py": CHAIN_STEPS, "passes.py": passes})
    made = []
    original = store_module.summarize_bytes
    monkeypatch.setattr(store_module, "summarize_bytes", lambda data: made.append(data) or original(data))
    findings = lint_tree(tmp_path, [tmp_path / "train.py"])
    assert findings == ([("train.py", 10, "AMP101")] if runs else [])
    assert (passes.encode() in made) is runs  # summarized only when its function may run a backward


def test_calls_naming_is_the_scan_it_replaces():
    source = textwrap.dedent(
        """
        import torch
        from helpers import train as train_fast

        def train(model): ...
        def train_1(model): ...

        def main(model, trainer):
            train(model)
            train_fast(model)
            trainer.train_1(model)
            train(model)
            torch.save(model.state_dict(), "m.pt")
        """
    )
    project = project_of({"main.py": source})
    calls = project.calls("main.py")
    assert len(calls) == 4  # the calls that may land in the project
    for part in ("train", "train_1", "save", "state_dict", "model", "nothing", "n_1"):
        expected = [call for call in calls if part in call["callee"]]
        assert project.calls_naming("main.py", part) == expected, part
    assert [c["callee"] for c in project.calls_naming("main.py", "train")] == [
        "train",
        "train_fast",
        "trainer.train_1",
        "train",
    ]
    assert project.calls_naming("missing.py", "train") == []


def test_a_lazy_binding_hashes_once_and_compares_by_what_it_holds():
    from ampdoctor.lint.project.flow import Lazy

    inner = Lazy((("a.py", "f", ("P0",), (), 0),))
    same = Lazy((("a.py", "f", ("P0",), (), 0),))
    other = Lazy((("a.py", "g", ("P0",), (), 0),))
    assert inner == same and hash(inner) == hash(same) and inner != other
    assert inner != ("lazy", inner.parts)  # not a plain tuple of the same parts
    # A chain of bindings, each holding its caller's twice, as call chains do: as plain tuples
    # its hash walked 2**depth parts on every look-up.
    chain = inner
    for depth in range(60):
        chain = Lazy((("m.py", f"f{depth}", ("P0",), (("P0", chain), ("P1", chain)), depth),))
    memo = {("m.py", "f", "P0", (("P0", chain),)): 1}
    assert memo[("m.py", "f", "P0", (("P0", chain),))] == 1


def test_bindings_of_the_same_call_are_equal_memo_keys(tmp_path):
    from ampdoctor.lint.project.flow import Lazy, Values

    files = {
        "helpers.py": "def save(model, optimizer, path):\n    return {'o': optimizer.state_dict()}\n",
        "train.py": (
            "from helpers import save\n\ndef run(model, optimizer):\n    return save(model, optimizer, 'x.pt')\n"
        ),
    }
    project = project_of(files)
    values = Values(project)
    call = values.flow("train.py", "run")["calls"][0]
    target = values.target("train.py", "run", call)
    assert target is not None and target.module == "helpers.py"
    first = values.bind("train.py", "run", call, target, (), 0)
    second = values.bind("train.py", "run", call, target, (), 0)
    assert first == second and hash(first) == hash(second)
    assert any(type(value) is Lazy for _name, value in first)


def test_names_bound_once_at_module_level_feed_aliases_and_int_constants():
    # One query of the fact model (``bound_once_at_module``) serves the summary's aliases and
    # the float8 rules' layer sizes: a name bound twice, or bound in a function, is neither.
    from ampdoctor.lint.rules.linear_sizes import int_constants

    source = (
        "import utils\n"
        "save = utils.save_checkpoint\n"
        "N_CLASSES = 10\n"
        "WIDTH = 64\n"
        "WIDTH = 128\n"
        "restore = utils.load\n"
        "restore = utils.load_checkpoint\n"
        "FLAG = True\n"
        "def f():\n"
        "    DEPTH = 3\n"
        "    helper = utils.helper\n"
    )
    facts = build_facts(parse_source(source), source)
    once = facts.bound_once_at_module()
    assert sorted(once) == ["FLAG", "N_CLASSES", "save"]
    assert int_constants(facts) == {"N_CLASSES": 10}
    assert summarize(facts)["aliases"] == {"save": "utils.save_checkpoint"}


def test_a_module_is_found_the_same_from_every_folder_and_each_answer_is_kept_once():
    files = {"pkg/__init__.py", "pkg/utils.py", "apps/a/train.py", "apps/b/train.py", "apps/b/extra/eval.py"}
    project = Project(files, lambda rel: None)
    for importer in ("apps/a/train.py", "apps/b/train.py", "apps/b/extra/eval.py"):
        assert project.find_module(importer, "pkg.utils") == ("pkg/utils.py", [])
        assert project.find_module(importer, "pkg.utils.save") == ("pkg/utils.py", ["save"])
        assert project.find_module(importer, "torch.nn") is None
    # a module never imports itself: the package's other module is the answer from within it
    assert project.find_module("pkg/utils.py", "pkg") == ("pkg/__init__.py", [])
    answers = [known["pkg.utils"] for folder, known in project.modules._found.items() if folder.startswith("apps")]
    assert len(answers) == 3 and all(answer is answers[0] for answer in answers)
