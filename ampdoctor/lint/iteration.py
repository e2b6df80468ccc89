"""How two training-step events of one frame relate on a pass through a loop body or a step
function: the questions the GradScaler protocol rules (AMP203–AMP213) ask again and again.

* *same iteration*: two events share their innermost loop (or both sit outside any loop);
  a backward pass may also sit deeper than the step it feeds (a micro-batch loop), so "this
  backward precedes that step" also accepts a backward nested inside the step's loop;
* *exclusive branches*: the two arms of one ``if``, or two ``if`` statements whose conditions
  are each other's negation (``if scaler is None`` / ``if scaler is not None``) never both run;
* *gated*: a call under an ``if`` that its partner is not under runs on some iterations only;
* *one pass*: the body that one iteration runs once (the innermost loop, or the step function),
  and whether what follows a path through it (control_paths.py) is the next pass.

Whenever the answer is unclear, callers stay silent.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator

from .model import AmpFacts, Block, Event, Frame
from .syntax import FUNCTION_TYPES

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from .control_paths import Path

_BRANCH_KINDS = ("if", "else")
ACCUMULATION_TEST = re.compile(r"%|accum|sync_grad|grad_acc|gradient_acc|grad_count|micro", re.I)


def _loop_key(event: Event) -> int | None:
    loop = event.call.loop
    return loop.ident if loop is not None else None


def same_iteration(a: Event, b: Event) -> bool:
    return _loop_key(a) == _loop_key(b)


def feeds(earlier: Event, later: Event) -> bool:
    """``earlier`` runs before ``later`` in ``later``'s iteration (possibly in a nested loop)."""
    if earlier.order >= later.order:
        return False
    loop = later.call.loop
    return loop is None or any(block.ident == loop.ident for block in earlier.path)


def is_prefix(short: tuple[Block, ...], long: tuple[Block, ...]) -> bool:
    return len(short) <= len(long) and all(a.ident == b.ident for a, b in zip(short, long))


def common_prefix(a: tuple[Block, ...], b: tuple[Block, ...]) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[n].ident == b[n].ident:
        n += 1
    return n


# Comparisons whose negation is another comparison: (positive spelling, negated?).
_COMPARISONS = {ast.Is: ("is", False), ast.IsNot: ("is", True), ast.Eq: ("==", False), ast.NotEq: ("==", True)}


def _condition(block: Block) -> tuple[str, bool] | None:
    """(normalised test, truth) that must hold inside an if/else arm.

    Tests are compared by structure (``ast.dump``), so spacing and parentheses do not matter.
    """
    if block.kind not in _BRANCH_KINDS or not isinstance(block.node, ast.If):
        return None
    test = block.node.test
    truth = block.kind == "if"
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, truth = test.operand, not truth
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _COMPARISONS:
        spelling, negated = _COMPARISONS[type(test.ops[0])]
        text = f"{ast.dump(test.left)} {spelling} {ast.dump(test.comparators[0])}"
        return text, truth != negated
    return ast.dump(test), truth


_JUMPS = (ast.Continue, ast.Break, ast.Return, ast.Raise)


def _ends_the_pass(block: Block) -> bool:
    """Whether an ``if``/``else`` arm ends with ``continue``, ``break``, ``return`` or ``raise``:
    what runs in it leaves the pass, and nothing after the ``if`` runs on that path."""
    node = block.node
    if type(node) is not ast.If:
        return False
    body = node.body if block.kind == "if" else node.orelse if block.kind == "else" else []
    return bool(body) and isinstance(body[-1], _JUMPS)


def leaves_the_pass(event: Event) -> bool:
    """Whether the event runs in an ``if``/``else`` arm that ends the pass (a skip branch)."""
    return any(block.kind in ("if", "else") and _ends_the_pass(block) for block in event.path)


def _skips_past(first: Event, later: Event) -> bool:
    """``first`` runs in an arm that ends the pass, and ``later`` comes after that arm."""
    inside = {id(block.node) for block in later.path}
    return first.order < later.order and any(
        block.kind in ("if", "else") and id(block.node) not in inside and _ends_the_pass(block) for block in first.path
    )


def exclusive(a: Event, b: Event) -> bool:
    """True when the two calls can never run in the same pass."""
    if _skips_past(a, b) or _skips_past(b, a):
        return True  # a skip branch: ``zero_grad(); scaler.step(); scaler.update(); continue``
    arms = {id(block.node): block.kind for block in a.path if block.kind in _BRANCH_KINDS}
    for block in b.path:
        kind = arms.get(id(block.node))
        if kind is not None and kind != block.kind:
            return True
    conditions = dict(c for c in map(_condition, a.path) if c is not None)
    for block in b.path:
        cond = _condition(block)
        if cond is not None and cond[0] in conditions and conditions[cond[0]] != cond[1]:
            return True
    return False


def accumulation_gate(facts: AmpFacts, blocks: Iterable[Block]) -> ast.If | None:
    for block in blocks:
        if block.kind in _BRANCH_KINDS and isinstance(block.node, ast.If):
            if ACCUMULATION_TEST.search(facts.text(block.node.test)):
                return block.node
    return None


def loop_binds(block: Block, name: str) -> bool:
    """Whether a ``for`` loop's target binds the root of ``name`` (unknown loops: yes)."""
    if not isinstance(block.node, (ast.For, ast.AsyncFor)):
        return True
    root = name.split(".", 1)[0]
    return root in set(target_names(block.node.target))


def target_names(target: ast.expr) -> Iterator[str]:
    """The names an assignment or ``for`` target binds (``i, (x, y)``: i, x, y)."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from target_names(element)
    elif isinstance(target, ast.Starred):
        yield from target_names(target.value)


def assigned_in(frame: Frame, facts: AmpFacts, name: str, block: Block) -> bool:
    """Whether ``name`` is (re)assigned inside ``block`` of ``frame``."""
    start, end = _block_orders(frame, block)
    return any(start <= a.order <= end for a in facts.assigned(frame, name))


def _block_orders(frame: Frame, block: Block) -> tuple[int, int]:
    inside = [c.order for c in frame.calls if any(b.ident == block.ident for b in c.path)]
    return (min(inside), max(inside)) if inside else (0, -1)


def pass_of(event: Event) -> ast.AST | None:
    """The body that one iteration runs once and that holds ``event``: its innermost loop, or the
    function it is in (a step function runs once per iteration of its caller)."""
    loop = event.call.loop
    if loop is not None:
        return loop.node
    node = event.call.frame.node
    return node if isinstance(node, FUNCTION_TYPES) else None


def in_pass(event: Event, node: ast.AST) -> bool:
    """Whether ``event`` sits in ``node``'s body itself, not in a loop nested inside it."""
    return pass_of(event) is node


def repeats(path: Path, node: ast.AST) -> bool:
    """Whether what follows ``path`` is the next pass through ``node``: the end of a loop body or a
    ``continue``; for a function, its end or a ``return`` (the caller's next iteration)."""
    from .control_paths import CONTINUE, NEXT, RETURN  # loaded already: ``path`` came from there

    if isinstance(node, FUNCTION_TYPES):
        return path.end in (NEXT, RETURN)
    return path.end in (NEXT, CONTINUE)
