"""Paths through one pass of a loop body (or one call of a function): which training-step events
can happen together in one iteration, and in what order.

The fact model records, for every call, the blocks (loops, branch arms) around it; that answers
"A comes before B in the text" and "A and B sit in the two arms of one ``if``". Protocol mistakes
hide in the paths between: an ``unscale_`` followed by a ``continue`` that skips ``update()``, an
``update()`` under one condition followed by another optimizer's step under another. This module
enumerates the paths of one pass through a body, keeping only the events (scaler and optimizer
calls) on each, so that "on some path of one iteration" and "on every path" are plain queries.

What a path knows about its conditions (``Assumptions``):

* an ``if`` whose test was decided earlier on the path takes the same arm again, so two
  ``if (i + 1) % accum == 0:`` blocks run together or not at all, and ``x == 0`` excludes
  ``x == 1``;
* ``flag = True`` / ``flag = False`` decides a later ``if flag:``; any other assignment to a name
  forgets what was known about tests that mention it.

Exception handlers are not followed (an exception is not an iteration of the loop), a nested loop
runs its body once, and a body with too many distinct paths has no answer (None): rules stay
silent then.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Sequence

from .model import AmpFacts, Event, Frame
from .syntax import dotted

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing

# Beyond this many distinct paths through one body the question has no answer.
MAX_PATHS = 256

# How a path ends: it reaches the end of the body ("next"), or leaves through a statement.
NEXT, CONTINUE, BREAK, RETURN, RAISE = "next", "continue", "break", "return", "raise"


class TooManyPaths(Exception):
    pass


class Decision(tuple[ast.If, bool, int, ast.expr]):
    """An ``if`` on a path: the node, the arm taken (True: body), how many events preceded it, and
    its test with names bound to tests replaced by them (``sync`` → ``(i + 1) % accum == 0``)."""

    __slots__ = ()

    def __new__(cls, node: ast.If, truth: bool, position: int, test: ast.expr) -> Decision:
        return tuple.__new__(cls, (node, truth, position, test))

    @property
    def node(self) -> ast.If:
        return self[0]

    @property
    def truth(self) -> bool:
        return self[1]

    @property
    def position(self) -> int:
        return self[2]

    @property
    def test(self) -> ast.expr:
        return self[3]


class Path:
    """One way through a body: its events in order, how it ended, and the decisions on the way."""

    __slots__ = ("events", "end", "jump", "decisions", "assumptions")

    def __init__(
        self,
        events: tuple[Event, ...],
        end: str,
        jump: ast.stmt | None,
        decisions: tuple[Decision, ...],
        assumptions: Assumptions,
    ) -> None:
        self.events = events
        self.end = end  # NEXT, CONTINUE, BREAK, RETURN or RAISE
        self.jump = jump  # the continue/break/return/raise statement, when one ended it
        self.decisions = decisions
        self.assumptions = assumptions

    def index(self, event: Event) -> int:
        for position, found in enumerate(self.events):
            if found is event:
                return position
        return -1

    def __repr__(self) -> str:
        kinds = ", ".join(e.kind.value for e in self.events)
        return f"Path([{kinds}], end={self.end})"


# --------------------------------------------------------------------------------------
# What a path knows about conditions
# --------------------------------------------------------------------------------------


def _text(node: ast.AST) -> str:
    return ast.unparse(node)


def _names(node: ast.AST) -> frozenset[str]:
    """What a test reads: each name, and each attribute chain on a name with its prefixes
    (``self.scaler is None``: ``self``, ``self.scaler``), so that assigning ``self.grad_norm``
    forgets nothing of it, and assigning ``self.scaler`` (or ``self``) does."""
    found: set[str] = set()
    for n in ast.walk(node):
        if type(n) is ast.Name:
            found.add(n.id)
        elif type(n) is ast.Attribute:
            spelled = dotted(n)
            if spelled is not None:
                found.add(spelled)
    return frozenset(found)


def _assigned(target: ast.AST) -> frozenset[str]:
    """What an assignment target changes: a name, an attribute chain (``self.grad_norm``), the
    container an item is stored into (``self.state[k] = v`` changes ``self.state``)."""
    if isinstance(target, (ast.Name, ast.Attribute)):
        spelled = dotted(target)
        if spelled is not None:
            return frozenset({spelled})
        return _names(target)
    if isinstance(target, (ast.Subscript, ast.Starred)):
        return _assigned(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        return frozenset().union(*(_assigned(e) for e in target.elts))
    return _names(target)


_NEGATED = {ast.IsNot: ast.Is, ast.NotEq: ast.Eq, ast.NotIn: ast.In}


def _canonical(test: ast.expr) -> tuple[str, bool]:
    """(key, negated): ``x is not None`` is the negation of the key of ``x is None``."""
    if type(test) is ast.Compare and len(test.ops) == 1 and type(test.ops[0]) in _NEGATED:
        positive = ast.Compare(test.left, [_NEGATED[type(test.ops[0])]()], test.comparators)
        return _text(positive), True
    return _text(test), False


def _equality(test: ast.expr) -> tuple[str, object, bool] | None:
    """``x == 3`` → ("x", 3, True); ``x != 3`` → ("x", 3, False); else None."""
    if type(test) is not ast.Compare or len(test.ops) != 1 or type(test.ops[0]) not in (ast.Eq, ast.NotEq):
        return None
    left, right = test.left, test.comparators[0]
    if type(left) is ast.Constant and type(right) is not ast.Constant:
        left, right = right, left
    if type(right) is not ast.Constant:
        return None
    return _text(left), right.value, type(test.ops[0]) is ast.Eq


if TYPE_CHECKING:
    # What ``Assumptions.key`` returns: its truths and its values, sorted.
    _AssumptionsKey = tuple[tuple[tuple[str, bool], ...], tuple[tuple[str, str], ...]]


class Assumptions:
    """Tests known true or false on a path, and expressions known equal to a constant."""

    __slots__ = ("truths", "values", "_key")

    def __init__(
        self,
        truths: dict[str, tuple[bool, frozenset[str]]] | None = None,
        values: dict[str, tuple[object, frozenset[str]]] | None = None,
    ) -> None:
        self.truths = truths or {}
        self.values = values or {}
        self._key: _AssumptionsKey | None = None

    def key(self) -> _AssumptionsKey:
        if self._key is None:
            self._key = (
                tuple(sorted((k, v[0]) for k, v in self.truths.items())),
                tuple(sorted((k, repr(v[0])) for k, v in self.values.items())),
            )
        return self._key

    def evaluate(self, test: ast.expr) -> bool | None:
        """True/False when the path already decides ``test``, else None."""
        if type(test) is ast.Constant:
            return bool(test.value)
        if type(test) is ast.UnaryOp and type(test.op) is ast.Not:
            inner = self.evaluate(test.operand)
            return None if inner is None else not inner
        if type(test) is ast.BoolOp:
            results = [self.evaluate(value) for value in test.values]
            decisive = type(test.op) is ast.Or  # Or: any True decides; And: any False decides
            if decisive in results:
                return decisive
            return (not decisive) if all(r is not None for r in results) else None
        equality = _equality(test)
        if equality is not None and equality[0] in self.values:
            expr, constant, positive = equality
            known = self.values[expr][0]
            if type(known) is type(constant):
                return (known == constant) == positive
        key, negated = _canonical(test)
        known = self.truths.get(key)
        if known is None:
            return None
        return known[0] != negated

    def assume(self, test: ast.expr, truth: bool) -> Assumptions:
        truths, values = dict(self.truths), dict(self.values)
        self._record(test, truth, truths, values)
        return Assumptions(truths, values)

    def _record(
        self,
        test: ast.expr,
        truth: bool,
        truths: dict[str, tuple[bool, frozenset[str]]],
        values: dict[str, tuple[object, frozenset[str]]],
    ) -> None:
        if type(test) is ast.UnaryOp and type(test.op) is ast.Not:
            self._record(test.operand, not truth, truths, values)
            return
        if type(test) is ast.BoolOp and (type(test.op) is ast.And) == truth:
            # ``a and b`` holds: both hold; ``a or b`` fails: both fail.
            for value in test.values:
                self._record(value, truth, truths, values)
            return
        equality = _equality(test)
        if equality is not None and equality[2] == truth:
            values[equality[0]] = (equality[1], _names(test))
        key, negated = _canonical(test)
        truths[key] = (truth != negated, _names(test))

    def forget(self, names: frozenset[str]) -> Assumptions:
        """What is left known after ``names`` are assigned."""
        if not names:
            return self
        truths = {k: v for k, v in self.truths.items() if not v[1] & names}
        values = {k: v for k, v in self.values.items() if not v[1] & names}
        if len(truths) == len(self.truths) and len(values) == len(self.values):
            return self
        return Assumptions(truths, values)


# --------------------------------------------------------------------------------------
# The walk
# --------------------------------------------------------------------------------------


class _State:
    __slots__ = ("events", "decisions", "assumptions")

    def __init__(self, events: tuple[Event, ...], decisions: tuple[Decision, ...], assumptions: Assumptions) -> None:
        self.events = events
        self.decisions = decisions
        self.assumptions = assumptions

    def key(self) -> tuple[tuple[int, ...], _AssumptionsKey]:
        return tuple(id(e) for e in self.events), self.assumptions.key()


if TYPE_CHECKING:
    # A path that left a body: its state, how it ended, and the statement that ended it.
    _Jump = tuple[_State, str, ast.stmt]


def _targets(stmt: ast.stmt) -> frozenset[str]:
    if type(stmt) is ast.Assign:
        return frozenset().union(*(_assigned(t) for t in stmt.targets))
    if type(stmt) is ast.AugAssign or type(stmt) is ast.AnnAssign:
        return _assigned(stmt.target)
    return frozenset()


class _Walker:
    def __init__(self, by_statement: dict[int, list[Event]]) -> None:
        self.by_statement = by_statement
        # ``do_step = (i + 1) % accum == 0``: a later ``if do_step:`` is decided like the test
        # itself. A name assigned twice in the body is no alias (None).
        self.aliases: dict[str, ast.expr | None] = {}

    def _resolve(self, test: ast.expr) -> ast.expr:
        if type(test) is ast.Name:
            return self.aliases.get(test.id) or test
        if type(test) is ast.UnaryOp and type(test.op) is ast.Not:
            return ast.UnaryOp(ast.Not(), self._resolve(test.operand))
        if type(test) is ast.BoolOp:
            return ast.BoolOp(test.op, [self._resolve(value) for value in test.values])
        return test

    def _note_alias(self, stmt: ast.stmt) -> None:
        if type(stmt) is not ast.Assign or len(stmt.targets) != 1 or type(stmt.targets[0]) is not ast.Name:
            for name in _targets(stmt):
                self.aliases[name] = None
            return
        name, value = stmt.targets[0].id, stmt.value
        is_test = type(value) in (ast.Compare, ast.BoolOp) or (type(value) is ast.UnaryOp and type(value.op) is ast.Not)
        self.aliases[name] = value if is_test and name not in self.aliases else None

    def _emit(self, stmt: ast.AST, states: list[_State]) -> list[_State]:
        events = self.by_statement.get(id(stmt))
        if not events:
            return states
        return [_State(s.events + tuple(events), s.decisions, s.assumptions) for s in states]

    def block(self, body: Sequence[ast.stmt], states: list[_State]) -> tuple[list[_State], list[_Jump]]:
        """Run ``body`` from ``states``: (states that fall through, (state, end, statement) that jumped)."""
        jumped: list[_Jump] = []
        for stmt in body:
            if not states:
                break
            states, out = self.statement(stmt, states)
            jumped.extend(out)
            states = _dedupe(states)
            if len(states) + len(jumped) > MAX_PATHS:
                raise TooManyPaths
        return states, jumped

    def statement(self, stmt: ast.stmt, states: list[_State]) -> tuple[list[_State], list[_Jump]]:
        kind = type(stmt)
        handler = _STATEMENTS.get(kind)
        if handler is not None:
            return handler(self, stmt, states)
        if kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            return states, []  # defined here, run elsewhere
        states = self._emit(stmt, states)
        names = _targets(stmt)
        if names:
            self._note_alias(stmt)
            states = [_State(s.events, s.decisions, s.assumptions.forget(names)) for s in states]
            if type(stmt) is ast.Assign and len(stmt.targets) == 1 and type(stmt.targets[0]) is ast.Name:
                value = stmt.value
                if type(value) is ast.Constant and type(value.value) is bool:
                    states = [
                        _State(s.events, s.decisions, s.assumptions.assume(stmt.targets[0], value.value))
                        for s in states
                    ]
        return states, []

    def _matters(self, stmt: ast.If) -> bool:
        """Whether the arms hold an event, a jump or a flag set to True/False (else one arm is as
        good as the other, and following both would only multiply the paths)."""
        for node in ast.walk(stmt):
            kind = type(node)
            if kind in _JUMPS or (node is not stmt and id(node) in self.by_statement):
                return True
            if type(node) is ast.Assign and type(node.value) is ast.Constant and type(node.value.value) is bool:
                return True
        return False

    def _if(self, stmt: ast.If, states: list[_State]) -> tuple[list[_State], list[_Jump]]:
        states = self._emit(stmt, states)
        if not self._matters(stmt):
            names = frozenset().union(*(_targets(n) for n in ast.walk(stmt) if isinstance(n, ast.stmt)))
            for name in names:
                self.aliases[name] = None
            return [_State(s.events, s.decisions, s.assumptions.forget(names)) for s in states], []
        test = self._resolve(stmt.test)
        body_in: list[_State] = []
        else_in: list[_State] = []
        for s in states:
            known = s.assumptions.evaluate(test)
            position = len(s.events)
            if known is not False:
                assumed = s.assumptions if known else s.assumptions.assume(test, True)
                body_in.append(_State(s.events, s.decisions + (Decision(stmt, True, position, test),), assumed))
            if known is not True:
                assumed = s.assumptions if known is False else s.assumptions.assume(test, False)
                else_in.append(_State(s.events, s.decisions + (Decision(stmt, False, position, test),), assumed))
        body_out, body_jumps = self.block(stmt.body, body_in)
        else_out, else_jumps = self.block(stmt.orelse, else_in)
        return body_out + else_out, body_jumps + else_jumps

    def _loop(self, stmt: ast.For | ast.AsyncFor | ast.While, states: list[_State]) -> tuple[list[_State], list[_Jump]]:
        # A nested loop: its body once; its continue/break stay inside it.
        states = self._emit(stmt, states)
        if not isinstance(stmt, ast.While):
            names = _names(stmt.target)
            states = [_State(s.events, s.decisions, s.assumptions.forget(names)) for s in states]
        out, jumps = self.block(stmt.body, states)
        finished = out + [s for s, end, _ in jumps if end == CONTINUE]
        broke = [s for s, end, _ in jumps if end == BREAK]
        leaving = [j for j in jumps if j[1] in (RETURN, RAISE)]
        after_else, else_jumps = self.block(stmt.orelse, finished)
        return after_else + broke, leaving + else_jumps

    def _with(self, stmt: ast.With | ast.AsyncWith, states: list[_State]) -> tuple[list[_State], list[_Jump]]:
        return self.block(stmt.body, self._emit(stmt, states))

    def _try(self, stmt: ast.Try, states: list[_State]) -> tuple[list[_State], list[_Jump]]:
        # Handlers are not followed: an exception is not how an iteration normally goes.
        states = self._emit(stmt, states)
        out, jumps = self.block(stmt.body, states)
        out, else_jumps = self.block(stmt.orelse, out)
        out, final_jumps = self.block(stmt.finalbody, out)
        # A continue, break or return inside the try runs the finally block on its way out.
        for state, end, jump in jumps + else_jumps:
            through, inner = self.block(stmt.finalbody, [state])
            final_jumps.extend((s, end, jump) for s in through)
            final_jumps.extend(inner)
        return out, final_jumps

    def _match(self, stmt: ast.Match, states: list[_State]) -> tuple[list[_State], list[_Jump]]:
        states = self._emit(stmt, states)
        outs, jumps = list(states), []  # no case matched
        for case in stmt.cases:
            out, case_jumps = self.block(case.body, states)
            outs.extend(out)
            jumps.extend(case_jumps)
        return outs, jumps


def _jump(end: str) -> Callable[[_Walker, ast.stmt, list[_State]], tuple[list[_State], list[_Jump]]]:
    """The handler of a statement that leaves the body (``continue``, ``return`` ...) as ``end``."""

    def handle(walker: _Walker, stmt: ast.stmt, states: list[_State]) -> tuple[list[_State], list[_Jump]]:
        states = walker._emit(stmt, states)
        return [], [(s, end, stmt) for s in states]

    return handle


if TYPE_CHECKING:
    from typing import Any

    # How ``_Walker.statement`` runs one kind of statement (the statement: an instance of the key).
    _Handler = Callable[[_Walker, Any, list[_State]], tuple[list[_State], list[_Jump]]]

_STATEMENTS: dict[type[ast.stmt], _Handler] = {
    ast.If: _Walker._if,
    ast.For: _Walker._loop,
    ast.AsyncFor: _Walker._loop,
    ast.While: _Walker._loop,
    ast.With: _Walker._with,
    ast.AsyncWith: _Walker._with,
    ast.Try: _Walker._try,
    ast.Continue: _jump(CONTINUE),
    ast.Break: _jump(BREAK),
    ast.Return: _jump(RETURN),
    ast.Raise: _jump(RAISE),
}
if hasattr(ast, "TryStar"):
    _STATEMENTS[ast.TryStar] = _Walker._try
if hasattr(ast, "Match"):
    _STATEMENTS[ast.Match] = _Walker._match


_JUMPS = (ast.Continue, ast.Break, ast.Return, ast.Raise)


def _dedupe(states: list[_State]) -> list[_State]:
    if len(states) < 2:
        return states
    seen: dict[tuple[tuple[int, ...], _AssumptionsKey], _State] = {}
    for state in states:
        seen.setdefault(state.key(), state)
    return list(seen.values())


# --------------------------------------------------------------------------------------
# Queries
# --------------------------------------------------------------------------------------


def _by_statement(frame: Frame) -> dict[int, list[Event]]:
    found: dict[int, list[Event]] = {}
    for event in frame.events:
        found.setdefault(id(event.call.statement), []).append(event)
    return found


def body_paths(
    frame: Frame, body: Sequence[ast.stmt], statements: dict[int, list[Event]] | None = None
) -> list[Path] | None:
    """Every path through one pass of ``body`` (a loop body or a function body) of ``frame``
    (``statements``: the frame's events by statement, when known)."""
    walker = _Walker(_by_statement(frame) if statements is None else statements)
    try:
        out, jumps = walker.block(body, [_State((), (), Assumptions())])
    except TooManyPaths:
        return None
    paths = [Path(s.events, NEXT, None, s.decisions, s.assumptions) for s in out]
    paths.extend(Path(s.events, end, stmt, s.decisions, s.assumptions) for s, end, stmt in jumps)
    return paths


class PathIndex:
    """Paths of the bodies of one module's frames, computed on first request (several rules ask
    about the same loop)."""

    __slots__ = ("_paths", "_statements")

    def __init__(self) -> None:
        self._paths: dict[int, tuple[ast.AST, list[Path] | None]] = {}
        # Each frame's events by statement, made once per frame (a script's module frame holds
        # every loop of the file).
        self._statements: dict[int, tuple[Frame, dict[int, list[Event]]]] = {}

    def of(self, frame: Frame, node: ast.AST) -> list[Path] | None:
        """Paths of one pass through ``node``: a loop (its body) or the frame's function."""
        found = self._paths.get(id(node))
        if found is not None and found[0] is node:
            return found[1]
        body = (
            node.body
            if isinstance(node, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.Module))
            else []
        )
        known = self._statements.get(id(frame))
        if known is None or known[0] is not frame:
            known = self._statements[id(frame)] = (frame, _by_statement(frame))
        paths = body_paths(frame, body, known[1])
        self._paths[id(node)] = (node, paths)
        return paths


def paths_of(facts: AmpFacts, frame: Frame, node: ast.AST) -> list[Path] | None:
    """The paths of one pass through ``node`` (a loop, or ``frame``'s function) in ``facts``'
    module; None when there are too many to follow. Computed on the first question and kept."""
    index = facts._paths  # None until the first question
    if not isinstance(index, PathIndex):
        index = facts._paths = PathIndex()
    return index.of(frame, node)


def some(paths: Iterable[Path] | None, predicate: Callable[[Path], bool]) -> bool:
    """Whether ``predicate`` holds on some path (never, when the paths are unknown)."""
    return paths is not None and any(predicate(p) for p in paths)


def every(paths: Iterable[Path] | None, predicate: Callable[[Path], bool]) -> bool | None:
    """Whether ``predicate`` holds on every path; None when the paths are unknown."""
    if paths is None:
        return None
    return all(predicate(p) for p in paths)


def arm_taken(path: Path, block_node: ast.AST) -> bool | None:
    """The arm of ``if`` node ``block_node`` that ``path`` took (True: its body), or None."""
    for decision in path.decisions:
        if decision.node is block_node:
            return decision.truth
    return None
