"""The two data-class bases: Value (immutable, compared by fields) and Record (mutable)."""

from __future__ import annotations

import copy
import pickle
import weakref

import pytest

from ampdoctor.findings import Edit, Finding, Fix, Location, Severity
from ampdoctor.records import Record, Value


class Point(Value):
    __slots__ = ("x", "y", "label")
    _uncompared = ("label",)

    def __init__(self, x: int, y: int = 0, label: str = "") -> None:
        self._set(x, y, label)


class Node(Record):
    __slots__ = ("name", "children", "parent")

    def __init__(self, name: str, parent: Node | None = None) -> None:
        self.name = name
        self.children: list[Node] = []
        self.parent = parent


def test_value_equality_hash_and_order_follow_the_compared_fields():
    assert Point(1, 2, "a") == Point(1, 2, "b")  # the label is not compared
    assert hash(Point(1, 2, "a")) == hash(Point(1, 2, "b"))
    assert Point(1, 2) != Point(1, 3)
    assert sorted([Point(2, 0), Point(1, 5), Point(1, 2)]) == [Point(1, 2), Point(1, 5), Point(2, 0)]
    assert Point(1) != (1, 0)  # never equal to a plain tuple
    assert len({Point(1, 2, "a"), Point(1, 2, "b"), Point(0)}) == 2


def test_value_is_immutable_and_replace_copies():
    point = Point(1, 2, "a")
    with pytest.raises(AttributeError, match="immutable"):
        point.x = 5
    with pytest.raises(AttributeError, match="immutable"):
        del point.y
    moved = point.replace(y=7)
    assert (moved.x, moved.y, moved.label) == (1, 7, "a")
    assert (point.x, point.y) == (1, 2)
    with pytest.raises(TypeError, match="no field 'z'"):
        point.replace(z=1)


def test_values_survive_pickle_and_copy():
    finding = Finding(
        "AMP201",
        Severity.ERROR,
        "message",
        Location("t.py", 3, 5, 3, 9),
        Fix("insert", (Edit(3, 1, 3, 1, "x"),)),
        help="do this",
        extra={"k": 1},
    )
    for clone in (pickle.loads(pickle.dumps(finding)), copy.deepcopy(finding), copy.copy(finding)):
        assert clone == finding
        assert clone.extra == {"k": 1}
        assert clone.fix.edits[0].content == "x"


def test_finding_extra_is_not_compared_and_defaults_to_a_fresh_dict():
    a = Finding("AMP201", Severity.ERROR, "m", Location("t.py"))
    b = Finding("AMP201", Severity.ERROR, "m", Location("t.py"), extra={"x": 1})
    assert a == b and hash(a) == hash(b)
    assert a.extra == {} and a.extra is not Finding("X", Severity.INFO, "m", Location("t.py")).extra


def test_repr_names_the_fields_and_stops_at_cycles():
    root = Node("root")
    child = Node("child", root)
    root.children.append(child)
    text = repr(root)
    assert text.startswith("Node(name='root', children=[Node(name='child', children=[], parent=Node(...))]")
    assert repr(Point(1, 2, "a")) == "Point(x=1, y=2, label='a')"


def test_repr_leaves_out_the_slot_that_lets_a_record_be_held_weakly():
    class Held(Record):
        __slots__ = ("name", "__weakref__")

        def __init__(self, name: str) -> None:
            self.name = name

    held = Held("h")
    assert weakref.ref(held)() is held
    assert repr(held) == "Held(name='h')"


def test_records_compare_by_identity_and_pickle():
    node = Node("n")
    assert node != Node("n") and node == node
    clone = pickle.loads(pickle.dumps(node))
    assert (clone.name, clone.children, clone.parent) == ("n", [], None)
