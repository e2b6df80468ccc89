"""``Callers.defining``: the modules where ``def {name}`` occurs, answered from an index of the
words after each ``def `` when the modules' texts can be read, the same as searching each text
for the name."""

from __future__ import annotations

import pytest

from ampdoctor.lint.project.reports import Callers

TEXTS = {
    "a.py": b"def train_step(self):\n    pass\n\ndef backward_grad_update(x):\n    pass\n",
    "b.py": b"class T:\n    def train_step_amp(self):\n        pass\n",
    "c.py": b"# undef step\ndef  spaced(x):\n    pass\nasync def \xc3\xa9tape(x):\n    pass\n",
    "d.py": b"def train(model):\n    pass\n",
    "e.py": b"x = 1\n",
}
SCALER = {"a.py", "b.py", "c.py", "e.py"}  # d.py holds no token of that class


def _callers(text: bool) -> tuple[Callers, list[str]]:
    read: list[str] = []

    def contents(rel: str) -> bytes | None:
        read.append(rel)
        return TEXTS.get(rel)

    callers = Callers(
        [*TEXTS, "gone.py"],
        lambda rel, kind: kind == "any" or rel in SCALER,
        lambda rel, name: rel in TEXTS and name.encode() in TEXTS[rel],
        lambda rel, word: False,
        contents if text else None,
    )
    return callers, read


@pytest.mark.parametrize(
    "name",
    ["train_step", "train", "backward_grad_update", "step", "spaced", "étape", "missing", "train_step_amp", "a.b"],
)
@pytest.mark.parametrize("kind", ["any", "scaler"])
def test_index_answers_as_the_search(name: str, kind: str) -> None:
    indexed, _ = _callers(text=True)
    searched, _ = _callers(text=False)
    assert indexed.defining(name, kind) == searched.defining(name, kind)


def test_what_the_index_answers() -> None:
    callers, _ = _callers(text=True)
    # a prefix of a longer name, as the text search finds it; in the files' order
    assert callers.defining("train") == ["a.py", "b.py", "d.py"]
    assert callers.defining("train", "scaler") == ["a.py", "b.py"]
    assert callers.defining("step") == ["c.py"]  # ``undef step`` holds ``def step``
    assert callers.defining("spaced") == []  # two spaces after ``def``
    assert callers.defining("étape") == ["c.py"]
    assert callers.defining("missing") == []


def test_each_text_is_read_once() -> None:
    callers, read = _callers(text=True)
    for name in ("train_step", "backward_grad_update", "step", "train"):
        callers.defining(name, "scaler")
    assert sorted(read) == sorted(SCALER)
