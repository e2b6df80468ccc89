"""The join of a function's names (``values.py`` ``run``): a name is evaluated again only when
what its last evaluation read has changed since, and it reaches what joining every name in each
round reaches: a value bound late in a loop flows back to the names read before it."""

from __future__ import annotations

import textwrap

from ampdoctor.lint.engine import parse_source
from ampdoctor.lint.facts import build_facts
from ampdoctor.lint.project.summary import summarize


def _flow(source: str, function: str) -> dict:
    source = textwrap.dedent(source)
    return summarize(build_facts(parse_source(source), source))["flows"][function]


# ``make_state()`` may land in the project: its value is the atom of the call (``C0``), which
# the link step resolves. (Not a scaler: a name that holds one is known as one from the start.)


def test_a_value_bound_late_in_a_loop_reaches_the_names_read_before_it():
    flow = _flow(
        """
        from helpers import make_state

        def make():
            x = None
            for _ in range(3):
                y = x
                x = z
                z = make_state()
            return y
        """,
        "make",
    )
    assert flow["ret"] == ["C0"]


def test_a_tuple_whose_elements_change_is_read_again_by_the_names_it_unpacks_into():
    # ``t`` holds the same tuple display before and after ``a`` joins: only its elements change.
    flow = _flow(
        """
        from helpers import make_state

        def pair():
            t = None
            for _ in range(2):
                first, second = t
                t = (a, a)
                a = make_state()
            return first
        """,
        "pair",
    )
    assert flow["ret"] == ["C0"]
    assert flow["tuples"] == [[["C0"], ["C0"]]]


def test_names_bound_in_order_need_no_second_evaluation_and_keep_their_values():
    flow = _flow(
        """
        from helpers import make_state

        def plain():
            state = make_state()
            other = state
            return other
        """,
        "plain",
    )
    assert flow["ret"] == ["C0"]


def test_atoms_spelled_alike_are_one_string_so_a_pickled_summary_holds_each_once():
    import pickle

    source = textwrap.dedent(
        """
        from helpers import load, move

        def step(batch, model):
            a = move(batch, model)
            b = move(batch, model)
            return load(a), load(b), batch + 1, model.x + 1


        def other(batch):
            return load(batch)
        """
    )
    summary = summarize(build_facts(parse_source(source), source))
    strings: dict[str, set[int]] = {}
    stack: list[object] = [summary["flows"]]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            strings.setdefault(item, set()).add(id(item))
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
    # Parameters, calls and their taint-only spellings, asked for many times, made once each.
    for atom in ("P0", "P1", "C0", "p0", "p1"):
        assert atom in strings and len(strings[atom]) == 1, atom
    again = pickle.loads(pickle.dumps(summary))
    assert again == summary


def test_the_taint_spellings_kept_for_reuse_are_bounded(monkeypatch):
    from ampdoctor.lint.project import value_atoms

    monkeypatch.setattr(value_atoms, "_LOWERED", {})
    monkeypatch.setattr(value_atoms, "_LOWERED_MOST", 8)
    for line in range(1, 40):
        atoms = frozenset({f"S@{line}:4", f"P{line}", "O", "A@float16@on@cuda"})
        assert value_atoms.lower(atoms) == frozenset({f"s@{line}:4", f"p{line}"})
        assert len(value_atoms._LOWERED) <= 8
