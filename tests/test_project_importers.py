"""The modules that import a module (``float16_reach._Imports.importers``): found among the
modules whose import targets name it, the same as resolving every module's imports."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ampdoctor.lint.project.float16_reach import import_edges
from ampdoctor.lint.project.link import Project

ROOT = Path(__file__).resolve().parents[1]

TEXTS = {
    "train.py": "import pkg.models\nfrom pkg.engine import loop\nfrom tools import helpers as h\n",
    "eval.py": "import pkg\nfrom pkg.models.heads import Head\n",
    "pkg/__init__.py": "from .engine import loop\nfrom . import models\n",
    "pkg/engine/__init__.py": "",
    "pkg/engine/loop.py": "from ..models import heads\nfrom .hooks import *\nimport pkg.engine\n",
    "pkg/engine/hooks.py": "from pkg.models.heads import Head\n",
    "pkg/models/__init__.py": "from .heads import Head\nfrom .backbone import Backbone\n",
    "pkg/models/heads.py": "import torch\nfrom . import backbone\n",
    "pkg/models/backbone.py": "import torch.nn as nn\n",
    "tools/helpers.py": "from pkg.models import backbone as b\nimport loop\n",
    "tools/loop.py": "import numpy\n",
    "other/heads.py": "from .. import train\n",
    "__init__.py": "",
}


def _project(texts: dict[str, str]) -> Project:
    data = {rel: textwrap.dedent(text).encode() for rel, text in texts.items()}
    return Project(set(texts), lambda rel: None, text=data.get)


def _resolving_every_module(project: Project) -> dict[str, list[str]]:
    imports = import_edges(project)
    found: dict[str, set[str]] = {}
    for rel in sorted(project.files):
        for imported in imports._of(rel):
            found.setdefault(imported, set()).add(rel)
    return {module: sorted(rels) for module, rels in found.items()}


def _fixture_projects() -> list[dict[str, str]]:
    out = []
    for folder in sorted((ROOT / "fixtures" / "lint" / "projects").iterdir()):
        if folder.is_dir():
            out.append({str(p.relative_to(folder)): p.read_text() for p in folder.rglob("*.py")})
    return out


@pytest.mark.parametrize("texts", [TEXTS, *_fixture_projects()], ids=lambda t: sorted(t)[0])
def test_importers_are_those_that_resolving_every_module_finds(texts):
    expected = _resolving_every_module(_project(texts))
    project = _project(texts)  # (a fresh index: none of its modules' imports resolved yet)
    for module in sorted(project.files):
        assert import_edges(project).importers(module) == expected.get(module, []), module


def test_a_plain_import_of_a_package_imports_each_of_its_modules():
    project = _project(TEXTS)  # (held here: the index holds it weakly)
    importers = import_edges(project).importers
    # ``import pkg`` (eval.py) and ``import pkg.models`` (train.py) name no module of the
    # package by its own name; the others import it by name, absolutely or relatively.
    assert importers("pkg/models/backbone.py") == [
        "eval.py",
        "pkg/models/__init__.py",
        "pkg/models/heads.py",
        "tools/helpers.py",
        "train.py",
    ]
    # ``import pkg.engine`` in the module itself; ``import loop`` in tools/ is its neighbour's
    assert importers("pkg/engine/loop.py") == ["eval.py", "pkg/__init__.py", "pkg/engine/loop.py", "train.py"]
    assert importers("tools/loop.py") == ["tools/helpers.py"]
    assert importers("train.py") == ["other/heads.py"]  # ``from .. import train``
    assert importers("other/heads.py") == []
