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
        "import os\nos.chdir({folder!r})\nfrom click.testing import CliRunner\nfrom ampdoctor.cli import main\n"
        "r = CliRunner().invoke(main, ['lint', '--isolated', 'train.py'])\nassert r.exit_code == 1, r.output\n"
    ).format(folder=str(tmp_path))
    assert "ampdoctor.lint.facts" in _modules_after(code)  # cold: parsed and analysed
    warm = _modules_after(code)
    assert not {"ampdoctor.lint.facts", "ampdoctor.lint.rules", "libcst", "torch"} & warm
    assert (tmp_path / ".ampdoctor_cache" / "CACHEDIR.TAG").is_file()


def test_the_pre_commit_path_on_a_clean_file_imports_no_typing_dataclasses_or_hashlib(tmp_path):
    # What ``ampdoctor lint FILE`` costs is mostly start-up: these modules are not needed to lint.
    target = tmp_path / "train.py"
    clean = FIXTURE.parent / "clean_nanogpt_style.py"
    target.write_text(clean.read_text(encoding="utf-8"), encoding="utf-8")
    code = (
        "import os\nos.chdir({folder!r})\nfrom ampdoctor.entry import main\n"
        "try:\n    main(['lint', 'train.py'])\nexcept SystemExit as exit:\n    assert exit.code == 0, exit.code\n"
    ).format(folder=str(tmp_path))
    modules = _modules_after(code)
    assert "ampdoctor.lint.facts" in modules  # it did lint
    assert not {"typing", "dataclasses", "inspect", "hashlib", "tokenize", "click", "rich"} & modules


def test_the_pre_commit_path_reporting_findings_imports_neither_rich_nor_click(tmp_path):
    target = tmp_path / "train.py"
    target.write_text(FIXTURE.read_text(encoding="utf-8"), encoding="utf-8")
    code = (
        "import os\nos.chdir({folder!r})\nfrom ampdoctor.entry import main\n"
        "try:\n    main(['lint', 'train.py'])\nexcept SystemExit as exit:\n    assert exit.code == 1, exit.code\n"
    ).format(folder=str(tmp_path))
    modules = _modules_after(code)
    assert "ampdoctor.report.text" in modules  # the findings were printed with their snippets
    assert not {"rich", "click", "typing", "dataclasses"} & {m.split(".")[0] for m in modules}
