"""Lint must never import torch, and the CLI module must stay light."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "lint" / "buggy_classic_mistakes.py"


def _modules_after(code: str) -> set[str]:
    script = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_linting_a_file_imports_neither_torch_nor_libcst():
    modules = _modules_after(
        "from click.testing import CliRunner\nfrom ampdoctor.cli import main\n"
        f"r = CliRunner().invoke(main, ['lint', '--isolated', '--no-cache', {str(FIXTURE)!r}])\nassert r.exit_code == 1, r.output\n"
    )
    assert "ampdoctor.lint.facts" in modules  # it did lint
    assert not {m for m in modules if m.split(".")[0] in ("torch", "libcst")}


def test_importing_the_cli_is_light():
    modules = _modules_after("import ampdoctor.cli")
    heavy = {"torch", "libcst", "rich", "numpy"}
    assert not heavy & {m.split(".")[0] for m in modules}


def test_importing_the_package_is_light():
    modules = _modules_after("import ampdoctor")
    assert not {"torch", "libcst", "rich", "click"} & {m.split(".")[0] for m in modules}


def test_a_warm_cache_does_not_even_import_the_rules(tmp_path):
    target = tmp_path / "train.py"
    target.write_text(FIXTURE.read_text(encoding="utf-8"), encoding="utf-8")
    code = (
        f"import os\nos.chdir({str(tmp_path)!r})\nfrom click.testing import CliRunner\nfrom ampdoctor.cli import main\n"
        "r = CliRunner().invoke(main, ['lint', '--isolated', 'train.py'])\nassert r.exit_code == 1, r.output\n"
    )
    assert "ampdoctor.lint.facts" in _modules_after(code)  # cold: parsed and analysed
    warm = _modules_after(code)
    assert not {"ampdoctor.lint.facts", "ampdoctor.lint.rules", "libcst", "torch"} & warm
    assert (tmp_path / ".ampdoctor_cache" / "CACHEDIR.TAG").is_file()


def _plain_lint_modules(tmp_path, fixture: Path, exit_code: int) -> set[str]:
    """The modules ``ampdoctor lint FILE`` (the pre-commit invocation) loads for a copy of ``fixture``."""
    (tmp_path / "train.py").write_text(fixture.read_text(encoding="utf-8"), encoding="utf-8")
    code = (
        f"import os\nos.chdir({str(tmp_path)!r})\nfrom ampdoctor.entry import main\n"
        f"try:\n    main(['lint', 'train.py'])\nexcept SystemExit as exit:\n    assert exit.code == {exit_code}, exit.code\n"
    )
    return _modules_after(code)


# What ``ampdoctor lint FILE`` costs is mostly start-up: none of these is needed to lint or report.
NOT_ON_THE_LINT_PATH = {
    "typing",
    "dataclasses",
    "inspect",
    "hashlib",
    "tokenize",
    "click",
    "rich",
    "torch",
    "libcst",
    "pathspec",
}


# Parts of the lint half that a typical training script does not need: each is imported on first
# use (the exact gate is for the tests; the others serve apex calls, deprecated calls, literals).
LOADED_ON_DEMAND = {
    "ampdoctor.lint.gate",
    "ampdoctor.lint.apex.plan",
    "ampdoctor.lint.textpos",
    "ampdoctor.lint.textscan.literals",
}


def test_the_pre_commit_path_on_a_clean_file_loads_only_what_linting_needs(tmp_path):
    modules = _plain_lint_modules(tmp_path, FIXTURE.parent / "clean_nanogpt_style.py", 0)
    assert "ampdoctor.lint.facts" in modules  # it did lint
    assert not NOT_ON_THE_LINT_PATH & {m.split(".")[0] for m in modules}
    assert not LOADED_ON_DEMAND & modules


def test_the_pre_commit_path_reporting_findings_loads_only_what_linting_needs(tmp_path):
    modules = _plain_lint_modules(tmp_path, FIXTURE, 1)
    assert "ampdoctor.lint.report.text" in modules  # the findings were printed with their snippets
    assert not NOT_ON_THE_LINT_PATH & {m.split(".")[0] for m in modules}


def test_gitignore_support_is_loaded_only_to_walk_a_folder_that_has_one(tmp_path):
    # three projects: no run is served by another's cache. A .gitignore of plain lines only
    # (``build/``) is read without pathspec: it translates a line when a path first fits it.
    ignores = {"named": "build/\ndata/*\n", "walked": "build/\ndata/*\n", "plain": "build/\n*.log\n"}
    for folder, text in ignores.items():
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "train.py").write_text(FIXTURE.read_text(encoding="utf-8"), encoding="utf-8")
        (tmp_path / folder / ".gitignore").write_text(text, encoding="utf-8")
    code = (
        "import os\nos.chdir({folder!r})\nfrom ampdoctor.entry import main\n"
        "try:\n    main(['lint', {target!r}])\nexcept SystemExit as exit:\n    assert exit.code == 1, exit.code\n"
    )
    named_file = _modules_after(code.format(folder=str(tmp_path / "named"), target="train.py"))
    walked_folder = _modules_after(code.format(folder=str(tmp_path / "walked"), target="."))
    walked_plain = _modules_after(code.format(folder=str(tmp_path / "plain"), target="."))
    for modules in (named_file, walked_folder, walked_plain):
        assert "ampdoctor.lint.facts" in modules  # each linted
    assert "pathspec" not in named_file
    assert "pathspec" in walked_folder
    assert "pathspec" not in walked_plain
