"""A warm run of a whole project reuses the last run's cross-module findings when no project
file changed, and runs the project checks again whenever anything they depend on did."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from ampdoctor.config import Settings
from ampdoctor.lint import LintRequest, known_codes, lint_paths
from ampdoctor.lint.project import reuse
from ampdoctor.lint.project import run as project_run

TWIN = Path(__file__).resolve().parent.parent / "fixtures" / "lint" / "projects" / "checkpoint_helper" / "buggy"
FOUND = {("train.py", 37, "AMP211")}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(TWIN, root)
    old = time.time() - 60  # outside the racy window
    for path in root.rglob("*.py"):
        os.utime(path, (old, old))
    return root


@pytest.fixture
def checks(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = project_run.run_checks

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(project_run, "run_checks", counted)
    return calls


def lint(root: Path, paths=None, codes=None) -> set[tuple[str, int, str]]:
    settings = Settings(root=root, project=True)
    selected = codes or settings.enabled_codes(known_codes())
    run = lint_paths(paths or [root], LintRequest(settings, selected, use_cache=True), cwd=root)
    return {(f.location.path, f.location.line, f.code) for f in run.findings if f.code != "AMP401"}


def counted_stats(monkeypatch) -> list[str]:
    """The paths the reuse key ``stat``s from here on."""
    stats: list[str] = []

    class CountingOs:
        def __getattr__(self, name):
            return getattr(os, name)

        def stat(self, path, *args, **kwargs):
            stats.append(str(path))
            return os.stat(path, *args, **kwargs)

    monkeypatch.setattr(reuse, "os", CountingOs())
    return stats


def test_an_unchanged_project_reuses_the_findings(tree: Path, checks: list[int]):
    assert lint(tree) == FOUND
    assert lint(tree) == FOUND
    assert len(checks) == 1
    assert list((tree / ".ampdoctor_cache").glob("summaries-*-reports.json"))


def test_a_changed_file_runs_the_checks_again(tree: Path, checks: list[int]):
    assert lint(tree) == FOUND
    utils = tree / "utils.py"
    text = utils.read_text(encoding="utf-8")
    fixed = text.replace('"optimizer": optimizer.state_dict()', '"optimizer": optimizer.state_dict(), "scaler": None')
    assert fixed != text
    utils.write_text(fixed, encoding="utf-8")
    old = time.time() - 30
    os.utime(utils, (old, old))
    lint(tree)
    assert len(checks) == 2


def test_a_file_modified_just_now_is_not_trusted_by_its_time(tree: Path, checks: list[int]):
    # Modified within the racy window: it could change again with the same size and time, so
    # nothing is kept under a key that names them.
    os.utime(tree / "utils.py")
    assert lint(tree) == FOUND
    assert lint(tree) == FOUND
    assert len(checks) == 2


def test_other_codes_run_the_checks_again(tree: Path, checks: list[int]):
    assert lint(tree) == FOUND
    assert lint(tree, codes=frozenset({"AMP201"})) == set()
    assert len(checks) == 2


def test_a_run_on_a_few_files_does_not_stat_the_project(tree: Path, checks: list[int], monkeypatch):
    for index in range(6):
        (tree / f"extra_{index}.py").write_text("x = 1\n", encoding="utf-8")
    assert lint(tree) == FOUND
    stats = counted_stats(monkeypatch)
    assert lint(tree, [tree / "train.py"]) == FOUND
    assert stats == []
    assert len(checks) == 2


def test_a_whole_tree_run_keys_the_files_as_the_lint_pass_saw_them(tree: Path, checks: list[int], monkeypatch):
    # The second run is served from the result cache: the key takes each linted file's size and
    # time from there, and looks at no file again.
    assert lint(tree) == FOUND
    stats = counted_stats(monkeypatch)
    assert lint(tree) == FOUND
    assert stats == [] and len(checks) == 1  # reused


def test_the_key_from_what_the_lint_pass_saw_is_the_key_from_looking_again(tmp_path: Path):
    files = ["a.py", "pkg/b.py", "pkg/c.py"]
    old = time.time() - 60
    for rel in files:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(f"# {rel}\n", encoding="utf-8")
        os.utime(tmp_path / rel, (old, old))
    codes = frozenset({"AMP211"})
    looked = reuse.state_key(tmp_path, files, 3, codes, ["a.py"], [])
    assert looked is not None
    seen = {}
    for rel in files[:2]:  # c.py was not linted: looked at
        stat = os.stat(tmp_path / rel)
        seen[rel] = (stat.st_size, stat.st_mtime_ns)
    assert reuse.state_key(tmp_path, files, 3, codes, ["a.py"], [], seen) == looked
    # a size the lint pass saw differs from now: another key (the findings are of that text)
    assert reuse.state_key(tmp_path, files, 3, codes, ["a.py"], [], {**seen, "a.py": (99, seen["a.py"][1])}) != looked
    # a time within the racy window, seen or looked at: no key
    assert reuse.state_key(tmp_path, files, 3, codes, ["a.py"], [], {**seen, "a.py": (1, time.time_ns())}) is None
    # a missing file counts as missing; a name with a stray byte (not UTF-8) still makes a key
    assert reuse.state_key(tmp_path, [*files, "gone.py"], 4, codes, [], []) not in (None, looked)
    assert reuse.state_key(tmp_path, [*files, "b\udcff.py"], 4, codes, [], []) is not None


def test_a_damaged_reports_file_runs_the_checks(tree: Path, checks: list[int]):
    assert lint(tree) == FOUND
    for path in (tree / ".ampdoctor_cache").glob("summaries-*-reports.json"):
        path.write_text("{not json", encoding="utf-8")
    assert lint(tree) == FOUND
    assert len(checks) == 2


def _project(tmp_path: Path, **modules: str) -> Path:
    """A marked project of the given modules (name → source), written outside the racy window."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    old = time.time() - 60
    for name, source in modules.items():
        path = root / f"{name}.py"
        path.write_text(source)
        os.utime(path, (old, old))
    return root


def test_summaries_the_checks_made_on_demand_do_not_change_what_the_next_run_checks(tmp_path: Path, checks):
    # ``helpers.py`` holds nothing the lint pass summarizes; the checks summarize it on demand to
    # follow train.py's calls. The next run must check the same files: it reuses the findings.
    root = _project(
        tmp_path,
        helpers="import torch\n\n\ndef build():\n    return torch.nn.Linear(4, 4)\n\n\ndef batches():\n    return []\n",
        train=(
            "import torch\nfrom helpers import batches, build\n\nmodel = build()\n"
            "optimizer = torch.optim.AdamW(model.parameters())\nscaler = torch.amp.GradScaler('cuda')\n"
            "for x, y in batches():\n    with torch.autocast('cuda', dtype=torch.float16):\n        loss = model(x, y)\n"
            "    scaler.scale(loss).backward()\n    scaler.step(optimizer)\n    scaler.update()\n"
            "    torch.save({'model': model.state_dict(), 'optimizer': optimizer.state_dict()}, 'ckpt.pt')\n"
        ),
    )
    first = lint(root)
    assert first == {("train.py", 13, "AMP211")}
    assert lint(root) == first
    assert lint(root) == first
    assert len(checks) == 1


def test_a_served_result_keeps_whether_the_file_holds_what_float16_breaks(tmp_path: Path, monkeypatch):
    # losses.py is passed over by the lint pass (no rule of its own can fire) but holds a BCE
    # that float16 autocast set up elsewhere would break: a later run served from the cache
    # knows it without reading the file again.
    root = _project(
        tmp_path,
        losses="import torch.nn.functional as F\n\n\ndef bce(p, y):\n    return F.binary_cross_entropy(p, y)\n",
        plain="def add(a, b):\n    return a + b\n",
    )
    settings = Settings(root=root, project=True)
    request = LintRequest(settings, settings.enabled_codes(known_codes()), use_cache=True)
    cold = {r.path: r.half_risk for r in lint_paths([root], request, cwd=root).results}
    assert cold == {"losses.py": True, "plain.py": False}
    read = []
    real_text = project_run.SummaryStore.text

    def text(self, rel):
        read.append(rel)
        return real_text(self, rel)

    monkeypatch.setattr(project_run.SummaryStore, "text", text)
    warm = {r.path: r.half_risk for r in lint_paths([root], request, cwd=root).results}
    assert warm == cold
    assert read == []
