"""Whether a long function's text names what its values are made of (``values.names_flow_word``):
the same answer as the expression ``FLOW_WORDS``, on every window of texts written to reach its
edges and on the functions of the project fixtures."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

from ampdoctor.lint.project.values import FLOW_WORDS, names_flow_word

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

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
