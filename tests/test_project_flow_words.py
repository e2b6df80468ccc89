"""Whether a long function's text names what its values are made of (``flow_words.names_flow_word``):
the same answer as the expression ``FLOW_WORDS``, on every window of texts written to reach its
edges and on the functions of the project fixtures; and the two other text shortcuts of the
flows' shared context: a module that does not say ``GradScaler`` builds none, and the names its
statements store are those a full walk finds."""

from __future__ import annotations

import ast
import random
import re
from pathlib import Path

import pytest

from ampdoctor.lint.project.flow_words import names_flow_word

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

# The reference: the words as one expression (what the module searched with before).
FLOW_WORDS = re.compile(
    r"save|ckpt|checkpoint|snapshot|persist|dump|optim|[Ss]caler|state_dict|autocast|(?<![A-Za-z])amp|"
    r"Adam|SGD|precision|fp16|half|clip_grad|unscale_|backward"
)

TEXTS = [
    "def f(x):\n    return x + 1\n",
    "example = clamp(sample)\n",  # ``amp`` after a letter, three times
    "use_amp = True\n",  # after ``_``
    "cfg.amp\n",
    "amp",
    "Amp and AMP\n",
    "é_amp ñamp\n",  # after a letter that is not ASCII
    "self.optimizer.step()\n",
    "torch.save(state, path)\n",
    "loss.backward()\n",
    "scaler.unscale_(opt)\n",
    "clip_grad_norm_(params, 1.0)\n",
    "model.half()\n",
    "precision=16\n",
    "Adam SGD fp16\n",
    "ckpt = snapshot; persist(dump)\n",
    "state_dict autocast Scaler\n",
    "clip_gra d unscale optimi sav\n",  # parts of words only
]


def _windows(text: str) -> list[tuple[int, int]]:
    return [(start, end) for start in range(len(text) + 1) for end in range(start, len(text) + 1)]


@pytest.mark.parametrize("text", TEXTS)
def test_every_window_answers_as_the_expression(text: str) -> None:
    for start, end in _windows(text):
        expected = FLOW_WORDS.search(text, start, end) is not None
        assert names_flow_word(text, start, end) is expected, (text, start, end)


def test_random_texts_answer_as_the_expression() -> None:
    pieces = ["amp", "s", "ave", "x", "_", " ", "\n", "optim", "half", "é", "A", "cl", "ip_grad", "SG", "D"]
    rng = random.Random(7)
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(1, 12)))
        for start, end in _windows(text):
            assert names_flow_word(text, start, end) is (FLOW_WORDS.search(text, start, end) is not None)


def test_the_fixtures_functions_answer_as_the_expression() -> None:
    checked = 0
    for path in sorted(FIXTURES.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        offsets = [0]
        for line in source.splitlines(keepends=True):
            offsets.append(offsets[-1] + len(line))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
                start, end = offsets[node.lineno - 1], offsets[node.end_lineno]
                assert names_flow_word(source, start, end) is (FLOW_WORDS.search(source, start, end) is not None)
                checked += 1
    assert checked > 500


def test_every_scaler_constructor_is_spelled_with_its_class_name() -> None:
    # What lets a module whose text does not say ``GradScaler`` build none (``value_atoms``'s
    # ``_scaler_constructions``, ``checkpoints.BUILDS_SCALER_TEXT``).
    from ampdoctor.lint.vocabulary import GRAD_SCALER_NAMES

    assert all("GradScaler" in name.rsplit(".", 1)[-1] for name in GRAD_SCALER_NAMES)


MODULE_CODE = """import torch
x = 1
a, (b, *c) = f()
for i, j in pairs:
    k = [m for m in range(i) if (n := m)]
with open(p) as fh, g() as (h1, h2):
    pass
if cond:
    def helper(arg):
        inner = arg
    class Inside:
        field = 2
lam = lambda q: (r := q)
del x
print(x)
y: int = 3
z += 1


def top(u):
    v = u


class Top:
    w = 1
"""


def test_module_level_names_are_those_a_full_walk_stores() -> None:
    from ampdoctor.lint.project.value_atoms import _module_level_names

    tree = ast.parse(MODULE_CODE)
    expected = {
        node.id
        for stmt in tree.body
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        for node in ast.walk(stmt)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
    }
    assert _module_level_names(tree) == expected
    assert {
        "x",
        "a",
        "b",
        "c",
        "i",
        "j",
        "k",
        "m",
        "n",
        "fh",
        "h1",
        "h2",
        "inner",
        "field",
        "lam",
        "r",
        "y",
        "z",
    } <= expected
    assert not {"v", "w", "u"} & expected
    for path in sorted(FIXTURES.rglob("*.py"))[:200]:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except SyntaxError:
            continue
        assert _module_level_names(tree) == {
            node.id
            for stmt in tree.body
            if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            for node in ast.walk(stmt)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
        }
