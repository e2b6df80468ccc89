"""House rules for ampdoctor's own code: no import cycle among its modules, no oversized module,
no two modules with one file name, and the project's own tool pins in one place.

The import graph is read with ``ast`` from the package's files, without importing anything. An
edge A -> B is an import of ampdoctor module B written in module A:

* every import at module level, including those inside module-level ``if``/``try`` blocks and
  class bodies, and those under ``if TYPE_CHECKING:`` (as pydeps and import-linter count them: a
  module that needs another's types to be read is tied to it);
* every relative import (``from . import x``, ``from .x import y``, ``from ..x import y``) at any
  depth, also inside functions and methods: an import deferred to keep start-up fast still ties
  the two modules together, so a cycle through one is still a knot. (ampdoctor imports its own
  modules only relatively; an absolute import inside a function is not counted.)

``from A import b`` points at the module ``A.b`` when there is one, otherwise at ``A``; the parent
packages that Python imports on the way are not counted as edges. A cycle is a strongly connected
component of more than one module (or a module importing itself).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import ampdoctor

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

PACKAGE = Path(ampdoctor.__file__).resolve().parent
ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 650


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _imports(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement, with whether it is at module level (outside any function)."""

    def walk(nodes, module_level: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                yield node, module_level
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield from walk(ast.iter_child_nodes(node), False)
            else:  # statements, and class bodies, which run on import like the module's
                yield from walk(ast.iter_child_nodes(node), module_level)

    yield from walk(tree.body, True)


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name in known:
                yield alias.name
        return
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        if node.module:
            base += node.module.split(".")
        source = ".".join(base)
    else:
        source = node.module or ""
    for alias in node.names:
        submodule = f"{source}.{alias.name}"
        if submodule in known:
            yield submodule
        elif source in known:
            yield source


def import_graph() -> dict[str, dict[str, list[int]]]:
    """module -> {imported module: [lines of the imports]}, as the module docstring describes."""
    files = module_files()
    known = set(files)
    graph: dict[str, dict[str, list[int]]] = {name: {} for name in files}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node, module_level in _imports(tree):
            relative = isinstance(node, ast.ImportFrom) and node.level > 0
            if not (module_level or relative):
                continue
            for target in _targets(node, name, path.name == "__init__.py", known):
                lines = graph[name].setdefault(target, [])
                if node.lineno not in lines:
                    lines.append(node.lineno)
    return graph


def strongly_connected(graph: dict[str, dict[str, list[int]]]) -> list[list[str]]:
    """Tarjan's algorithm, without recursion; components in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return sorted(components)


def cycles(graph: dict[str, dict[str, list[int]]]) -> list[list[str]]:
    return [c for c in strongly_connected(graph) if len(c) > 1 or c[0] in graph[c[0]]]


def describe_cycle(component: list[str], graph: dict[str, dict[str, list[int]]]) -> str:
    members, files = set(component), module_files()
    edges = [
        f"    {module} -> {target}  ({shown(files[module])}:{', '.join(map(str, lines))})"
        for module in component
        for target, lines in sorted(graph[module].items())
        if target in members
    ]
    return f"  {len(component)} modules: {', '.join(component)}\n" + "\n".join(edges)


def test_the_graph_sees_module_level_deferred_and_relative_imports():
    """The checks below would notice: known edges of today's code are in the graph."""
    graph = import_graph()
    assert "ampdoctor.records" in graph["ampdoctor.findings"]  # module level, relative
    assert "ampdoctor.catalog" in graph["ampdoctor.findings"]  # inside a method
    assert "ampdoctor.findings" in graph["ampdoctor.lint.rules.float16_range"]  # ``from ...findings``, in a function
    assert "ampdoctor.lint.engine" in graph["ampdoctor.lint"]  # ``from . import engine``: the submodule
    assert strongly_connected({"a": {"b": [1]}, "b": {"a": [1]}, "c": {"a": [1]}}) == [["a", "b"], ["c"]]
    assert cycles({"a": {"a": [1]}, "b": {}}) == [["a"]]


def test_relative_imports_resolve_to_the_module_they_load():
    known = {"ampdoctor", "ampdoctor.api", "ampdoctor.trace", "ampdoctor.trace.ops"}

    def targets(statement: str, module: str = "ampdoctor.trace.static", package: bool = False) -> list[str]:
        return list(_targets(ast.parse(statement).body[0], module, package, known))

    assert targets("from .. import lint_paths") == ["ampdoctor"]  # a name of the package
    assert targets("from .. import api") == ["ampdoctor.api"]  # a module of the package
    assert targets("from ..api import lint_paths") == ["ampdoctor.api"]
    assert targets("from . import ops") == ["ampdoctor.trace.ops"]
    assert targets("from .ops import quiet", "ampdoctor.trace", package=True) == ["ampdoctor.trace.ops"]
    assert targets("import ampdoctor.api, json") == ["ampdoctor.api"]
    assert targets("from json import loads") == []


def test_imports_are_told_module_level_or_deferred():
    tree = ast.parse(
        "import os\nTYPE_CHECKING = False\nif TYPE_CHECKING:\n    from .a import A\n"
        "class K:\n    from .b import B\n    def m(self):\n        from .c import C\n"
        "def f():\n    import json\n    g = lambda: 1\n"
    )
    found = [(ast.unparse(node), level) for node, level in _imports(tree)]
    assert found == [
        ("import os", True),
        ("from .a import A", True),
        ("from .b import B", True),
        ("from .c import C", False),
        ("import json", False),
    ]


def test_no_import_cycle_among_ampdoctor_modules():
    graph = import_graph()
    found = cycles(graph)
    assert not found, f"{len(found)} import cycle(s) among ampdoctor's modules:\n" + "\n".join(
        describe_cycle(component, graph) for component in found
    )


def test_no_module_over_the_size_limit():
    sizes = {shown(path): len(path.read_text(encoding="utf-8").splitlines()) for path in PACKAGE.rglob("*.py")}
    oversized = sorted((lines, path) for path, lines in sizes.items() if lines > MAX_LINES)
    assert not oversized, (
        f"{len(oversized)} module(s) over {MAX_LINES} lines (split them along their seams):\n"
        + "\n".join(f"  {path}: {lines} lines" for lines, path in reversed(oversized))
    )


def test_no_two_modules_share_a_file_name():
    """A module's file name is enough to find it (in a traceback, a doc, a review): no two modules
    of the package share one, packages' ``__init__.py`` aside."""
    by_name: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name != "__init__.py":
            by_name.setdefault(path.name, []).append(str(path.relative_to(PACKAGE.parent)))
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, "modules sharing a file name:\n" + "\n".join(
        f"  {name}: {', '.join(paths)}" for name, paths in sorted(shared.items())
    )


def test_ruff_for_pre_commit_is_the_pinned_one():
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M))
    hooks = (ROOT / ".pre-commit-config.yaml").read_text()
    assert set(re.findall(r"ruff==([\w.]+)", hooks)) == {pins["ruff"]}


def test_the_license_file_is_the_one_the_package_declares():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    text = (ROOT / "LICENSE").read_text()
    assert project["license"] == "MIT"  # the build backend ships LICENSE with it
    assert text.startswith("MIT License\n")
    assert all(f"Copyright (c) 2026 {author['name']}" in text for author in project["authors"])


def test_float16_range_is_defined_once_in_a_module_that_imports_nothing():
    """Both halves read float16's range from ``ampdoctor/float16.py``; lint must stay torch-free."""
    definitions = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == "FLOAT16_MAX" for t in targets):
                    definitions.append(path.relative_to(PACKAGE).as_posix())
    assert definitions == ["float16.py"]
    tree = ast.parse((PACKAGE / "float16.py").read_text(encoding="utf-8"))
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def _reported_from() -> set[tuple[str, str]]:
    """(code, module) for every check the three registries hold: lint's rules, the project
    checks, the runtime rules (modules relative to the package, as ``codes.py`` writes them)."""
    from ampdoctor.lint.project.checks import PROJECT_CHECKS
    from ampdoctor.lint.rules import lint_rules
    from ampdoctor.trace.rulebase import registered
    from ampdoctor.trace.rules import registered_codes

    assert registered_codes()  # importing the package loaded the runtime rules
    pairs = {(code, type(rule).__module__) for code, rule in lint_rules().items()}
    pairs |= {(code, check.function.__module__) for check in PROJECT_CHECKS for code in check.codes or ()}
    pairs |= {(entry.code, entry.check.__module__) for entry in registered()}
    return {(code, module.removeprefix("ampdoctor.")) for code, module in pairs}


def test_the_code_table_covers_every_catalog_code_and_nothing_else():
    from ampdoctor.catalog import all_rules
    from ampdoctor.codes import CODES

    assert list(CODES) == sorted(all_rules())


def test_the_code_table_names_exactly_the_modules_that_report_each_code():
    """``codes.py`` is the registry: each module it names for a code reports that code (every
    registry refuses the other direction when it loads), and a module outside the three kinds
    exists and mentions the code."""
    from ampdoctor.codes import CODES

    registered = _reported_from()
    kinds = ("lint.rules.", "lint.project.", "trace.rules.")
    named = {(code, module) for code, row in CODES.items() for module in row.modules if module.startswith(kinds)}
    assert named == registered, (sorted(named - registered), sorted(registered - named))
    for code, row in CODES.items():
        for module in row.modules:
            path = PACKAGE / (module.replace(".", "/") + ".py")
            assert path.is_file(), (code, module)
            if not module.startswith(kinds):
                assert code in path.read_text() or "PARSE_ERROR" in path.read_text(), (code, module)


def test_every_code_names_test_modules_that_exist_and_exercise_it():
    from ampdoctor.codes import CODES

    for code, row in CODES.items():
        assert row.tests, code
        for name in row.tests:
            path = ROOT / "tests" / name
            assert path.is_file(), (code, name)
            assert re.search(rf"\b{code}\b", path.read_text(encoding="utf-8")), (code, name)


def test_a_check_registered_from_a_module_its_row_does_not_name_is_refused():
    import pytest

    from ampdoctor.lint.project.checks import Check
    from ampdoctor.lint.rules import LintRule, register
    from ampdoctor.trace.rulebase import rule

    class Stray(LintRule):
        code = "AMP207"

    with pytest.raises(
        ValueError, match=r"AMP207 is reported from \S*test_house, which ampdoctor/codes.py does not name"
    ):
        register(Stray)
    with pytest.raises(ValueError, match=r"AMP501 is reported from \S*test_house.*its row: trace.rules.scale_rules"):
        rule("AMP501")(lambda observations, thresholds, locator: ())
    with pytest.raises(ValueError, match=r"AMP212 is reported from \S*test_house.*its row: lint.rules.scaler_setup\)"):
        Check(["AMP212"], test_the_code_table_covers_every_catalog_code_and_nothing_else, lambda f, r: ())


def test_no_module_reaches_into_the_trace_sessions_private_state():
    """What a session offers its extensions (``--compare``, what-if, TensorBoard) is public:
    listeners, ``gradients_of``, ``compared``; no other module reads or rewires a ``_`` member of
    a session."""
    reaching = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "session.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            owner = node.value
            name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
            if name == "session":
                reaching.append(f"{shown(path)}:{node.lineno}: .{node.attr}")
    assert not reaching, "\n".join(reaching)
