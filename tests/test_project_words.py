"""The first test of which modules may call a function: the module's text holds the function's
name as a whole word (``project/words.py``). A module asked about many names (one that defines
many functions, each looked for in turn) is answered from the set of its words, made once; the
answers and the findings are the same either way."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import copy_twin, project_findings

from ampdoctor.lint.project import words
from ampdoctor.lint.project.words import Words

TEXT = b"from utils import train_10, naive_step\nx = train_10(model)  # na\xc3\xafve_step\ny = loader.step()\n"
QUESTIONS = {
    "train_10": True,
    "train_1": False,  # only inside a longer word
    "rain_10": False,
    "step": True,
    "naive_step": True,
    "na\u00efve_step": True,  # not one ASCII word: searched as it is
    "model": True,
    "absent": False,
    "loader.step": True,  # not one word: as a string
    "utils.train_10": False,
}


@pytest.mark.parametrize("searches", [0, 3, 1000])
def test_whole_words_whether_searched_or_looked_up(monkeypatch, searches: int):
    monkeypatch.setattr(words, "SEARCHES", searches)
    index = Words()
    for _ in range(3):  # asked again: before and after the set of words is made
        assert {q: index.names("m.py", TEXT, q) for q in QUESTIONS} == QUESTIONS


def test_the_set_of_words_is_made_once_a_module_is_asked_often(monkeypatch):
    monkeypatch.setattr(words, "SEARCHES", 2)
    index = Words()
    index.names("m.py", TEXT, "absent")
    index.names("m.py", TEXT, "model")
    assert "m.py" not in index._sets
    index.names("m.py", TEXT, "train_1")
    assert b"train_10" in index._sets["m.py"] and b"train_1" not in index._sets["m.py"]
    index.names("other.py", b"train_1()", "train_1")
    assert "other.py" not in index._sets  # counted per module


PADDING = """

def apply_step_{i}(optimizer, scaler):
    scaler.step(optimizer)
    scaler.update()
"""


@pytest.mark.parametrize("searches", [0, 1000])
def test_callers_are_found_the_same_from_searches_or_word_sets(tmp_path: Path, monkeypatch, searches: int):
    # the step helper's module defines 40 more helpers before it: the modules are asked about
    # each, so with a small budget the caller's words are looked up, not searched
    monkeypatch.setattr(words, "SEARCHES", searches)
    root = copy_twin("shared_step_helper", "buggy", tmp_path / "p")
    helpers = root / "optim_utils.py"
    text = helpers.read_text(encoding="utf-8")
    head, _, rest = text.partition("\n\ndef apply_step(")
    padding = "".join(PADDING.format(i=i) for i in range(40))
    helpers.write_text(head + padding + "\n\ndef apply_step(" + rest, encoding="utf-8")
    line = 1 + (head + padding + "\n\ndef apply_step(" + rest).splitlines().index(
        "    scaler.update()  # expect: AMP208"
    )
    assert project_findings(root, ("AMP208",)) == {("optim_utils.py", line, "AMP208")}
