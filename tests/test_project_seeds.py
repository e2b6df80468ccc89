"""What the project tells a module's own rules (``project/seeds.py``): a helper in another module
that clips or unscales the gradients its caller scaled is found, and a module whose text can do
neither is not summarized to learn that."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from helpers import summaries_made
from hypothesis import given
from hypothesis import strategies as st

from ampdoctor.config import Settings
from ampdoctor.lint import LintRequest, known_codes, lint_paths
from ampdoctor.lint.passes import _CLIPPER_NAME
from ampdoctor.lint.project import store as store_module
from ampdoctor.lint.project.tokens import CLIP_OR_UNSCALE_WORDS
from ampdoctor.lint.vocabulary import CLIP_NAMES


def write(root: Path, files: dict[str, str]) -> None:
    (root / "pyproject.toml").write_text('[project]\nname = "p"\n', encoding="utf-8")
    for rel, text in files.items():
        (root / rel).write_text(textwrap.dedent(text), encoding="utf-8")


def lint_tree(root: Path) -> list[tuple[str, int, str]]:
    settings = Settings(root=root)
    run = lint_paths([root], LintRequest(settings, settings.enabled_codes(known_codes()), use_cache=False), cwd=root)
    return sorted((f.location.path, f.location.line, f.code) for f in run.findings)


def test_the_words_hold_every_clip_the_fact_model_knows():
    for name in CLIP_NAMES:
        assert CLIP_OR_UNSCALE_WORDS.search(name.encode())
    for name in ("clip_gradients", "_clip_grad_norm", "ClipGradNorm", "grad_clip", "gradclip_fn", "GradClipper"):
        assert _CLIPPER_NAME.search(name), name  # (the examples are clipper names)
        assert CLIP_OR_UNSCALE_WORDS.search(name.encode()), name
    assert CLIP_OR_UNSCALE_WORDS.search(b"scaler.unscale_(optimizer)")
    assert not CLIP_OR_UNSCALE_WORDS.search(b"def log_metrics(loss, step):\n    writer.add_scalar(loss, step)\n")


@given(
    st.lists(st.sampled_from(["clip", "Clip", "CLIP", "grad", "Grad", "_", "__", "norm", "per", "fn", "x"]), max_size=6)
)
def test_a_name_the_fact_model_takes_for_a_clipper_holds_the_words(parts):
    name = "".join(parts)
    if _CLIPPER_NAME.search(name):
        assert CLIP_OR_UNSCALE_WORDS.search(name.encode()), name


TRAIN = """\
import torch
from helpers import clip_gradients
from metrics import log_metrics


def train(model, loader, optimizer, writer):
    scaler = torch.amp.GradScaler("cuda")
    for step, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        scaler.scale(loss).backward()
        clip_gradients(model)
        scaler.step(optimizer)
        scaler.update()
        log_metrics(writer, loss, step)
"""
HELPERS = """\
import torch


def clip_gradients(model, max_norm=1.0):
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
"""
# Names a step (a helper token: not passed over as a module of plain names), clips nothing.
METRICS = """\
def log_metrics(writer, loss, step):
    writer.add_scalar("train/loss", float(loss), step)
"""


def test_a_helper_that_clips_is_found_and_one_that_cannot_is_not_summarized(tmp_path: Path, monkeypatch):
    write(tmp_path, {"train.py": TRAIN, "helpers.py": HELPERS, "metrics.py": METRICS})
    made: list[bytes] = []
    original = store_module.summarize_bytes
    monkeypatch.setattr(store_module, "summarize_bytes", lambda data: made.append(data) or original(data))
    # The clip in the helper runs on gradients still multiplied by the scale: AMP201 at the call.
    assert lint_tree(tmp_path) == [("train.py", 13, "AMP201")]
    assert any(b"def clip_gradients" in data for data in made)  # its summary says what it clips
    assert not any(b"def log_metrics" in data for data in made)


ACCUMULATE = """\
import torch
from helpers import backward_micro


def train(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        backward_micro(loss, scaler, optimizer)
        if (i + 1) % 4 == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
"""
BACKWARD_MICRO = """\
def backward_micro(loss, scaler, optimizer):
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
"""


def test_a_helper_that_unscales_the_scaler_it_is_handed_is_found(tmp_path: Path):
    # Its ``unscale_`` runs on every micro-step, the step on every fourth: the second unscale_
    # before a step raises (AMP206 at the call, with the helper's unscale seeded into the loop).
    write(tmp_path, {"train.py": ACCUMULATE, "helpers.py": BACKWARD_MICRO})
    assert lint_tree(tmp_path) == [("train.py", 10, "AMP206")]


OBJECTS = """\
import torch
from loggers import make_logger
from runners import make_runner


def train(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    runner = make_runner()
    logger = make_logger()
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        scaler.scale(loss).backward()
        runner.clip(model)
        logger.log_metrics(loss)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""
RUNNERS = """\
from engine import Runner


def make_runner(optimizer_name="adam"):
    return Runner(optimizer_name)
"""
ENGINE = """\
import torch


class Runner:
    def __init__(self, optimizer_name):
        self.optimizer_name = optimizer_name

    def clip(self, model):
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
"""
LOGGERS = """\
from logs import Logger


def make_logger(optimizer_name="adam"):
    return Logger(optimizer_name)
"""
LOGS = """\
class Logger:
    def __init__(self, optimizer_name):
        self.optimizer_name = optimizer_name

    def log_metrics(self, loss):
        print(self.optimizer_name, loss)
"""


@pytest.mark.parametrize("scans", [True, False])
def test_an_objects_value_is_worked_out_only_for_a_method_a_helper_of_the_project_has(
    tmp_path: Path, monkeypatch, scans: bool
):
    from ampdoctor.lint.project import checks
    from ampdoctor.lint.project.reports import Callers

    write(
        tmp_path,
        {"train.py": OBJECTS, "runners.py": RUNNERS, "engine.py": ENGINE, "loggers.py": LOGGERS, "logs.py": LOGS},
    )
    # A run of a whole tree (here: of any size) may scan the project's files for the clipping
    # modules; a run of a few files (the pre-commit hook) does not, and walks the logger's value.
    monkeypatch.setattr(checks, "SCANNED_TARGETS", 0 if scans else 24)
    scanned: list[str] = []
    with_class = Callers.with_class
    monkeypatch.setattr(Callers, "with_class", lambda self, kind: scanned.append(kind) or with_class(self, kind))
    made = summaries_made(monkeypatch)
    # ``runner.clip(model)``: a method of that name clips in engine.py, and the runner's value
    # (made in runners.py) says it is that one: gradients clipped while still scaled.
    assert lint_tree(tmp_path) == [("train.py", 14, "AMP201")]
    assert RUNNERS.encode() in made
    # ``logger.log_metrics(loss)``: no function of that name clips or unscales, so the logger's
    # value is not worked out, and the module that makes it is never parsed.
    assert (LOGGERS.encode() not in made) is scans
    assert ("clip_or_unscale" in scanned) is scans


def _summary_of(text: str) -> dict | None:
    from ampdoctor.lint.engine import parse_source
    from ampdoctor.lint.facts import build_facts
    from ampdoctor.lint.project.summary import summarize

    return summarize(build_facts(parse_source(text), text))


def test_the_helpers_are_found_in_the_clipping_modules_that_define_the_name_asked_about():
    from ampdoctor.lint.project.link import Project
    from ampdoctor.lint.project.seeds import _DEFINED, _Helpers

    texts = {
        "a.py": "import torch\n\n\ndef clip_all(model):\n    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n",
        "b.py": (
            "import torch\n\n\nclass Runner:\n    def clip(self, model):\n"
            "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        ),
        "c.py": "GRAD_CLIP = 1.0\n\n\ndef  log_metrics(loss):\n    print(loss)\n",
    }
    summarized: list[str] = []
    project = Project(
        set(texts), lambda rel: summarized.append(rel) or _summary_of(texts[rel]), text=lambda rel: texts[rel].encode()
    )
    helps = _Helpers(project, lambda: sorted(texts))
    assert helps("clip") and summarized == ["b.py"]  # a method of that name clips
    assert not helps("log_metrics") and summarized == ["b.py", "c.py"]  # defined there (however spaced), no clip
    assert not helps("step") and summarized == ["b.py", "c.py"]  # defined nowhere: nothing summarized
    # The names ``def`` gives, however spaced, a generic function's (Python 3.12) among them.
    assert _DEFINED.findall(b"def  a(x):\nasync def\tb():\ndef c[T](x: T):\n    undef = d") == [b"a", b"b", b"c"]
    assert helps("clip_all") and summarized == ["b.py", "c.py", "a.py"]
    assert helps("clip") and summarized == ["b.py", "c.py", "a.py"]  # asked once per name


def test_a_modules_text_is_searched_once_per_words_gate():
    from ampdoctor.lint.project.flow import Values
    from ampdoctor.lint.project.link import Project

    read: list[str] = []
    texts = {"a.py": b"def save_all(x):\n    torch.save(x, 'x.pt')\n", "b.py": b"def f():\n    pass\n"}
    project = Project(set(texts), lambda rel: None, text=lambda rel: read.append(rel) or texts[rel])
    gate = Values(project)._gate_for(CLIP_OR_UNSCALE_WORDS)
    assert [gate("a.py"), gate("b.py"), gate("a.py"), gate("b.py")] == [False, False, False, False]
    assert read == ["a.py", "b.py"]


SUPER_TRAINER = """\
import torch
from logging_base import LoggingTrainer


class AmpTrainer(LoggingTrainer):
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer
        self.scaler = torch.amp.GradScaler("cuda")

    def step(self, x, y):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.model(x, y)
        self.scaler.scale(loss).backward()
        super().{method}(loss)
        self.scaler.step(self.optimizer)
        self.scaler.update()
"""
LOGGING_BASE = """\
import torch
from base import BaseTrainer


class LoggingTrainer(BaseTrainer):
    def log_step(self, loss):
        print(float(loss))
"""
CLIPPING_BASE = """\
import torch


class BaseTrainer:
    def after_backward(self, loss):
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
"""


@pytest.mark.parametrize("helper", [True, False])
def test_a_super_call_walks_the_bases_only_for_a_name_a_helper_has(helper: bool):
    """``super().log_step(loss)`` asked about by the seeds (does it clip or unscale for its
    caller?): where no clipping module defines a ``log_step``, the bases are not walked and the
    module that defines it is never parsed."""
    from ampdoctor.lint.project.flow import Values
    from ampdoctor.lint.project.link import Project
    from ampdoctor.lint.project.outline import Outline

    texts = {
        "train.py": SUPER_TRAINER.format(method="log_step"),
        "logging_base.py": LOGGING_BASE,
        "base.py": CLIPPING_BASE,
    }
    summarized: list[str] = []

    def load(rel: str) -> dict | None:
        summarized.append(rel)
        return _summary_of(texts[rel])

    project = Project(set(texts), load, outline=lambda rel: Outline(texts[rel].encode()))
    values = Values(project)
    [call] = [c for c in values.flows("train.py")["AmpTrainer.step"]["calls"] if c["callee"] == "super.log_step"]
    found = values.target("train.py", "AmpTrainer.step", call, defined=lambda name: helper)
    if helper:
        assert found is not None and (found.module, found.name) == ("logging_base.py", "LoggingTrainer.log_step")
        assert "logging_base.py" in summarized
    else:
        assert found is None
        assert summarized == ["train.py"]


@pytest.mark.parametrize("method", ["after_backward", "log_step"])
def test_a_helper_a_base_class_runs_through_super_is_found(tmp_path: Path, monkeypatch, method: str):
    """``super().after_backward(loss)`` runs the base's clip on gradients still scaled: AMP201
    at the call, with the project scanned for helpers or not; ``log_step`` clips nothing."""
    from ampdoctor.lint.project import checks

    write(
        tmp_path,
        {"train.py": SUPER_TRAINER.format(method=method), "logging_base.py": LOGGING_BASE, "base.py": CLIPPING_BASE},
    )
    expected = [("train.py", 14, "AMP201")] if method == "after_backward" else []
    for scanned in (0, 24):
        monkeypatch.setattr(checks, "SCANNED_TARGETS", scanned)
        assert lint_tree(tmp_path) == expected


# A method that unscales its own object's scaler on every call, called on every micro-step by
# the training method of the same object while the step waits for the accumulation boundary.
OWN_HELPER = """\
import torch


class Trainer:
    def __init__(self, model, optimizer, accum=4):
        self.model = model
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda")
        self.accum = accum

    def clip_gradients(self):
        self.scaler.unscale_(self.optimizer)
        return torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)

    def train(self, loader):
        for i, batch in enumerate(loader):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.model(batch) / self.accum
            self.scaler.scale(loss).backward()
            self.clip_gradients()
            if (i + 1) % self.accum == 0:
                self.scaler.step(self.optimizer)
                self.scaler.update()
                self.optimizer.zero_grad()
"""


def test_a_method_that_unscales_its_own_scaler_is_found_where_its_caller_accumulates(tmp_path: Path):
    write(tmp_path, {"trainer.py": OWN_HELPER})
    assert lint_tree(tmp_path) == [("trainer.py", 20, "AMP206")]


def test_the_own_helper_is_found_from_a_subclass_in_another_module(tmp_path: Path):
    base = OWN_HELPER.split("    def train(")[0]
    sub = (
        "import torch\nfrom base import Trainer\n\n\nclass Accumulating(Trainer):\n    def train("
        + (OWN_HELPER.split("    def train(")[1])
    )
    write(tmp_path, {"base.py": base, "accumulating.py": sub})
    # The module alone takes ``self.clip_gradients()``, which it cannot see, for a clip of scaled
    # gradients (AMP201); the project shows that it unscales first, and withdraws that.
    assert lint_tree(tmp_path) == [("accumulating.py", 11, "AMP206")]


def test_a_clip_helper_of_another_module_that_only_clips_still_clips_scaled_gradients(tmp_path: Path):
    base = OWN_HELPER.split("    def train(")[0].replace("        self.scaler.unscale_(self.optimizer)\n", "")
    sub = (
        "import torch\nfrom base import Trainer\n\n\nclass Accumulating(Trainer):\n    def train("
        + OWN_HELPER.split("    def train(")[1]
    )
    write(tmp_path, {"base.py": base, "accumulating.py": sub})
    assert lint_tree(tmp_path) == [("accumulating.py", 11, "AMP201")]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # the helper's unscale_ waits for the same boundary as the step (neosr's closure)
        (
            "        self.scaler.unscale_(self.optimizer)\n",
            "        if self.steps % self.accum == 0:\n            self.scaler.unscale_(self.optimizer)\n",
        ),
        # an early return on the micro-steps that do not step
        (
            "        self.scaler.unscale_(self.optimizer)\n",
            "        if self.steps % self.accum != 0:\n            return None\n"
            "        self.scaler.unscale_(self.optimizer)\n",
        ),
        # the step is not gated: one unscale_ per step
        ("            if (i + 1) % self.accum == 0:\n", "            if True:\n"),
        # the helper steps and updates itself: not a helper that leaves the step to its caller
        (
            "        return torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)\n",
            "        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)\n"
            "        self.scaler.step(self.optimizer)\n        self.scaler.update()\n",
        ),
    ],
)
def test_an_own_helper_is_silent_where_its_unscale_runs_once_per_step(tmp_path: Path, before: str, after: str):
    assert before in OWN_HELPER
    write(tmp_path, {"trainer.py": OWN_HELPER.replace(before, after)})
    assert [f for f in lint_tree(tmp_path) if f[2] == "AMP206"] == []


def test_an_own_helper_called_on_another_object_is_not_taken_for_the_callers(tmp_path: Path):
    # ``self.other.clip_gradients()`` unscales the other object's scaler, not this one's.
    text = OWN_HELPER.replace("            self.clip_gradients()\n", "            self.other.clip_gradients()\n")
    text = text.replace(
        "        self.accum = accum\n", "        self.accum = accum\n        self.other = Trainer(model, optimizer)\n"
    )
    write(tmp_path, {"trainer.py": text})
    assert [f for f in lint_tree(tmp_path) if f[2] == "AMP206"] == []


def test_lint_source_reports_the_own_helper_and_nothing_the_project_pass_withdraws():
    # One text is a project of one module: the helper is seen, and no withdrawal shows as a finding.
    from ampdoctor import lint_source

    assert [(f.code, f.location.line) for f in lint_source(OWN_HELPER)] == [("AMP206", 20)]


def _subclass_of(base_text: str) -> dict[str, str]:
    """``base.py`` holding ``base_text``'s class up to ``train``, and ``accumulating.py`` with a
    subclass whose ``train`` is ``OWN_HELPER``'s."""
    sub = (
        "import torch\nfrom base import Trainer\n\n\nclass Accumulating(Trainer):\n    def train("
        + OWN_HELPER.split("    def train(")[1]
    )
    return {"base.py": base_text.split("    def train(")[0], "accumulating.py": sub}


def test_a_helper_that_clips_before_it_unscales_keeps_the_clip_finding(tmp_path: Path):
    # The clip runs on scaled gradients; the unscale_ after it does not help: AMP201 stays.
    clip_first = OWN_HELPER.replace(
        "        self.scaler.unscale_(self.optimizer)\n"
        "        return torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)\n",
        "        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)\n"
        "        self.scaler.unscale_(self.optimizer)\n        return norm\n",
    )
    assert clip_first != OWN_HELPER
    files = _subclass_of(clip_first)
    files["accumulating.py"] = files["accumulating.py"].replace(
        "            if (i + 1) % self.accum == 0:\n", "            if True:\n"
    )
    write(tmp_path, files)
    assert lint_tree(tmp_path) == [("accumulating.py", 11, "AMP201")]


def test_a_clipper_the_module_cannot_see_gets_no_unscale_inserted_before_it():
    # The module alone takes ``self.clip_gradients()`` for a clip (AMP201), but the method may
    # unscale first itself (it does, in ``base.py``): inserting an unscale_ would run it twice.
    from ampdoctor import lint_source

    module = """\
import torch
from base import Trainer


class Plain(Trainer):
    def train(self, loader):
        for batch in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.model(batch)
            self.scaler.scale(loss).backward()
            self.clip_gradients()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad()
"""
    findings = [f for f in lint_source(module) if f.code == "AMP201"]
    assert [f.location.line for f in findings] == [11]
    assert findings[0].fix is None
    # A clip the module sees still gets its unscale_ inserted.
    seen = module.replace("self.clip_gradients()", "torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)")
    assert [f.fix is not None for f in lint_source(seen) if f.code == "AMP201"] == [True]


@pytest.mark.parametrize(
    ("unscale", "found"),
    [
        # waits for the step's own boundary: one unscale_ per step
        ("    if (i + 1) % 4 == 0:\n        scaler.unscale_(optimizer)\n", []),
        ("    if (i + 1) % 4 != 0:\n        return\n    scaler.unscale_(optimizer)\n", []),
        # a setting, not the boundary: it still runs on every micro-step
        ("    if clip_grad:\n        scaler.unscale_(optimizer)\n", [("train.py", 10, "AMP206")]),
    ],
)
def test_a_handed_scaler_helper_under_a_condition(tmp_path: Path, unscale: str, found: list[tuple[str, int, str]]):
    helper = "def backward_micro(loss, scaler, optimizer, i=0, clip_grad=True):\n"
    helper += "    scaler.scale(loss).backward()\n" + unscale
    train = ACCUMULATE.replace("backward_micro(loss, scaler, optimizer)", "backward_micro(loss, scaler, optimizer, i)")
    write(tmp_path, {"train.py": train, "helpers.py": helper})
    assert lint_tree(tmp_path) == found
