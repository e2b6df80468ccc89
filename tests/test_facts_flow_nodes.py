"""``AmpFacts.flow_nodes``: per top-level function or method and for the module body, the nodes a
value flow starts from, kept by the fact model's walk. They are those a walk of the function's
own body finds, in its order: nested functions' bodies in, their decorators, defaults and
annotations out, nested classes out, a lambda's body in and its defaults out."""

from __future__ import annotations

import ast
from pathlib import Path

from ampdoctor.lint.facts import build_facts
from ampdoctor.lint.project.function_parts import qualname

ROOT = Path(__file__).resolve().parent.parent

KINDS = (
    ast.Assign,
    ast.AnnAssign,
    ast.AugAssign,
    ast.For,
    ast.AsyncFor,
    ast.With,
    ast.AsyncWith,
    ast.Return,
    ast.Yield,
    ast.YieldFrom,
    ast.Global,
    ast.NamedExpr,
    ast.comprehension,
    ast.Call,
)


def _fields(node: ast.AST) -> list[ast.AST]:
    """The node's children in source order: in field order, but a dict's keys and values in pairs
    and a conditional expression's body before its test."""
    if isinstance(node, ast.Dict):
        return [child for pair in zip(node.keys, node.values) for child in pair if child is not None]
    if isinstance(node, ast.IfExp):
        return [node.body, node.test, node.orelse]
    found: list[ast.AST] = []
    for _name, value in ast.iter_fields(node):
        if isinstance(value, ast.AST):
            found.append(value)
        elif isinstance(value, list):
            found.extend(item for item in value if isinstance(item, ast.AST))
    return found


def _walked(body: list[ast.stmt], module: bool) -> list[ast.AST]:
    """A plain walk of a function's (or the module's) own code, in source order."""
    found: list[ast.AST] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.ClassDef):
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if not module:
                for stmt in node.body:
                    visit(stmt)
            return
        if isinstance(node, KINDS):
            found.append(node)
        if isinstance(node, ast.Lambda):
            visit(node.body)
            return
        for child in _fields(node):
            visit(child)

    for stmt in body:
        visit(stmt)
    return found


def _check(source: str) -> int:
    tree = ast.parse(source)
    facts = build_facts(tree, source)
    flowing = [("<module>", tree)]
    flowing.extend((name, node) for node, frame in facts.functions if (name := qualname(frame)) is not None)
    for name, node in flowing:
        assert [id(n) for n in facts.flow_nodes[id(node)]] == [id(n) for n in _walked(node.body, name == "<module>")], (
            name
        )
    return len(flowing)


CODE = """
import torch

handler = lambda x, d=make_default(): send(x, d)
table = {key(): value() for key, value in pairs()}


@register(name=f())
def train(model, optimizer=build(), *, scaler: Scaler = make_scaler()) -> Out(1):
    global STEP
    step = 0

    @torch.no_grad()
    def closure(batch=default_batch()):
        nonlocal step
        step += 1
        return model(batch)

    class Local:
        field = compute()

        def method(self):
            return hidden()

    for x, y in loader():
        with torch.autocast("cuda"), ctx() as (a, b):
            loss = (out := closure(x)).sum()
        try:
            scaler.scale(loss).backward()
        except RuntimeError as error:
            report(error)
        finally:
            cleanup()
    match state():
        case {"k": value} if check(value):
            keep(value)
    yield from gen()
    return [fz(z) for z in zs if g(z)] if ready() else None, lambda q=h(): q


class Trainer(Base, metaclass=meta()):
    attribute = make()

    def fit(self, data=[load()]):
        self.scaler = torch.amp.GradScaler("cuda")
        total: float = 0.0
        value: int
        return self.loop(data)

    class Inner:
        def step(self):
            return inner_call()


if condition():
    def conditional():
        return made()
"""


def test_the_shapes_a_function_may_take() -> None:
    assert _check(CODE) == 5  # the module, train, Trainer.fit, Trainer.Inner's step, conditional
    tree = ast.parse(CODE)
    facts = build_facts(tree, CODE)
    train = next(node for node, _frame in facts.functions if node.name == "train")
    calls = [ast.unparse(n.func) for n in facts.flow_nodes[id(train)] if isinstance(n, ast.Call)]
    assert "model" in calls  # the closure's body
    assert not {"build", "make_scaler", "Out", "register", "f", "default_batch", "compute", "hidden"} & set(calls)
    module_calls = [ast.unparse(n.func) for n in facts.flow_nodes[id(tree)] if isinstance(n, ast.Call)]
    assert "send" in module_calls and "make_default" not in module_calls  # a lambda's body, not its defaults
    assert "condition" in module_calls and "made" not in module_calls


def test_every_fixture_and_test_module() -> None:
    checked = 0
    for path in sorted([*ROOT.joinpath("fixtures").rglob("*.py"), *ROOT.joinpath("tests").rglob("*.py")]):
        source = path.read_text(encoding="utf-8")
        try:
            ast.parse(source)
        except SyntaxError:
            continue
        checked += _check(source)
    assert checked > 2000
