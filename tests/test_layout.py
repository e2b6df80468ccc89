"""The package's layout stays untied: no import circle among the lint modules and the top-level
modules they use, read from the source (every import statement, at module level or inside a
function, except those under ``if TYPE_CHECKING:``, which never run)."""

from __future__ import annotations

import ast
from pathlib import Path

import ampdoctor

PACKAGE = Path(ampdoctor.__file__).resolve().parent


def _modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ["ampdoctor", *path.relative_to(PACKAGE).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _imports(name: str, path: Path, is_package: bool, known: set[str]) -> set[str]:
    targets: set[str] = set()
    here = name.split(".") if is_package else name.split(".")[:-1]

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names if alias.name in known)
            elif isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    submodule = f"{module}.{alias.name}"
                    if submodule in known:
                        targets.add(submodule)
                    elif module in known:
                        targets.add(module)
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    visit([s for s in inner if isinstance(s, (ast.stmt, ast.excepthandler))])

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    targets.discard(name)
    return targets


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, is_package, known) for name, (path, is_package) in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_lazy_imports_and_skips_type_checking_ones():
    graph = import_graph()
    assert "ampdoctor.lint.engine" in graph["ampdoctor.lint"]  # imported inside a function
    assert "ampdoctor.lint.facts" in graph["ampdoctor.lint.engine"]
    assert "ampdoctor.lint.rules" in graph["ampdoctor.lint.rules.amp201_202_scaler"]  # ``from . import``


def test_no_import_circle_in_lint_and_the_top_level_modules():
    graph = import_graph()
    outside_trace = [c for c in circles(graph) if not any(m.startswith("ampdoctor.trace") for m in c)]
    assert outside_trace == []
