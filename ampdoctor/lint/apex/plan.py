"""What the apex → torch.amp migration can do for one module, decided on the ``ast``.

The lint path stays on the interpreter's parser: this module reads AmpFacts and answers the
questions a finding must answer before any fix is computed — can the module be migrated at
all (an ``opt_level`` torch.amp has no equivalent for, apex objects with no direct torch
counterpart), and which statements of each iteration compute the loss that goes into
``amp.scale_loss`` (they are wrapped in autocast), or where a ``# TODO(ampdoctor)`` comment
goes because they cannot be told. The plan is plain data (line numbers), so the libcst codemod
(migration.py) can apply it later, in a worker process or not at all.
"""

from __future__ import annotations

import ast

from ...records import Value
from .reach import scaler_reach

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Iterator

    from ..model import AmpFacts, CallSite
    from ..syntax import Arg

# apex names the codemod rewrites (after the ``apex.`` prefix); anything else of apex.amp,
# apex.fp16_utils or apex.parallel keeps the module from being migrated automatically.
AMP_FUNCTIONS = ("initialize", "scale_loss", "master_params", "state_dict", "load_state_dict")
PARALLEL_DIRECT = ("parallel.DistributedDataParallel", "parallel.convert_syncbn_model")
# apex DistributedDataParallel keywords that torch's DistributedDataParallel does the same
# without: ``delay_allreduce`` only changes when the all-reduce runs, not the gradients.
DDP_DROPPABLE = ("delay_allreduce",)
SUPPORTED_LEVELS = ("O1", "O2")

_UNSUPPORTED_LEVEL = {
    "O0": "opt_level O0 trains in float32 without mixed precision; remove amp.initialize and "
    "amp.scale_loss by hand instead of adding torch.amp",
    "O3": "opt_level O3 runs the model purely in float16 (no float32 master weights); torch.amp has no "
    "such mode, since autocast keeps the weights in float32: migrate by hand after deciding whether "
    "O1-style autocast (float32 weights) is acceptable",
}
FP16_UTILS = {
    "FP16_Optimizer": "FP16_Optimizer keeps float16 model weights with float32 master "
    "copies and its own loss scaler; there is no direct torch equivalent: keep the model in float32, "
    "use the plain optimizer, `torch.autocast` for the forward and a `torch.amp.GradScaler` "
    "(`optimizer.backward(loss)` → `scaler.scale(loss).backward()`)",
    "network_to_half": "network_to_half casts the model to float16 (batch norm kept in "
    "float32); with torch.amp the model stays float32 and `torch.autocast` picks float16 per op",
}


class MigrationPlan(Value):
    """``wraps``: (first line, last line) of statement runs to put under autocast; ``todos``:
    (line, text, reported line) comments to leave above the statement at ``line``, about the
    apex call whose statement starts at ``reported line``; ``blocker``: why the module cannot be
    migrated automatically, or None; ``threads``: module-level functions that receive the scaler
    as a keyword-only parameter; ``method``: the scaler is ``self.scaler`` (reach.py)."""

    __slots__ = ("wraps", "todos", "blocker", "threads", "method")
    wraps: tuple[tuple[int, int], ...]
    todos: tuple[tuple[int, str, int], ...]
    blocker: str | None
    threads: tuple[str, ...]
    method: bool

    def __init__(
        self,
        wraps: tuple[tuple[int, int], ...] = (),
        todos: tuple[tuple[int, str, int], ...] = (),
        blocker: str | None = None,
        threads: tuple[str, ...] = (),
        method: bool = False,
    ) -> None:
        self._set(wraps, todos, blocker, threads, method)


def plan_migration(facts: AmpFacts) -> MigrationPlan:
    blocker = _blocker(facts)
    if blocker is not None:
        return MigrationPlan(blocker=blocker)
    reach = scaler_reach(facts)
    if reach.blocker is not None:
        return MigrationPlan(blocker=reach.blocker)
    models = _model_spellings(facts)
    scale_calls = {id(s.node) for s in facts.calls if s.qname == "apex.amp.scale_loss"}
    wraps: list[tuple[int, int]] = []
    todos: list[tuple[int, str, int]] = []
    planned: set[int] = set()  # scale_loss blocks planned with the ``if`` around them
    for block in _blocks(facts.module):  # outer blocks first
        _plan_block(block, models, scale_calls, planned, wraps, todos)
    todos += _scaled_gradient_reads(facts)
    for site in facts.calls:
        if site.qname == "apex.amp.initialize":
            level = _literal(site.arg(keyword="opt_level"))
            if site.arg(keyword="opt_level") is not None and level is None:
                text = ast.unparse(site.arg(keyword="opt_level").value)  # type: ignore[union-attr]
                # The codemod writes this one itself, above the scaler (line 0: placed by no line).
                todos.append((0, opt_level_note(text), site.statement.lineno))
    return MigrationPlan(tuple(sorted(wraps)), tuple(sorted(todos)), None, reach.threads, reach.method)


def _plan_block(
    block: list[ast.stmt],
    models: set[str],
    scale_calls: set[int],
    planned: set[int],
    wraps: list[tuple[int, int]],
    todos: list[tuple[int, str, int]],
) -> None:
    """The autocast runs and TODOs for the ``amp.scale_loss`` blocks of one statement list."""
    runs: list[tuple[int, int]] = []
    for index, statement in enumerate(block):
        holder = statement
        if isinstance(statement, ast.If) and len(statement.body) == 1:
            # ``if fp16: with amp.scale_loss(...)`` / ``else: loss.backward()``: the loss is
            # computed before the ``if``, in this block.
            holder = statement.body[0]
        call = _scale_loss_call(holder, scale_calls)
        if call is None or id(holder) in planned:
            continue
        planned.add(id(holder))
        found = _forward_run(block, index, call, models, scale_calls)
        if isinstance(found[1], int):
            runs.append(found)
        else:  # the TODO goes above the loss's computation when there is one, else above the backward
            place = statement if found[0] is None else block[found[0]]
            todos.append((place.lineno, found[1], holder.lineno))
    # Two losses computed in one forward give overlapping runs: one autocast block.
    for first, last in _merged(runs):
        wraps.append((block[first].lineno, block[last].lineno))


_CLIPS = ("clip_grad_norm_", "clip_grad_value_")


def _scaled_gradient_reads(facts: AmpFacts) -> list[tuple[int, str, int]]:
    """``amp.master_params(o)`` other than clipped: apex had unscaled the gradients by then,
    GradScaler has not (the migration adds ``unscale_`` only before a clip)."""
    clipped = {
        id(s.node.args[0])
        for s in facts.calls
        if s.node.args and ((s.qname or s.method or "").rsplit(".", 1)[-1] in _CLIPS)
    }
    todos = []
    for site in facts.calls:
        if site.qname == "apex.amp.master_params" and id(site.node) not in clipped:
            optimizer = ast.unparse(site.node.args[0]) if site.node.args else "optimizer"
            note = (
                f"the gradients are still scaled here: call `scaler.unscale_({optimizer})` first if they are "
                "read (apex had unscaled them), once per step"
            )
            todos.append((site.statement.lineno, note, site.statement.lineno))
    return todos


def opt_level_note(text: str) -> str:
    return f"opt_level came from `{text}`; migrated as O1 (float16 autocast and a GradScaler)"


def _blocker(facts: AmpFacts) -> str | None:
    functions = {(s.qname or "")[len("apex.amp.") :] for s in facts.calls if (s.qname or "").startswith("apex.amp.")}
    if functions - {"initialize"} and "initialize" not in functions:
        return (
            "amp.initialize is not called in this module, so the migration cannot tell where the "
            "GradScaler that replaces it should be created"
        )
    for site in facts.calls:
        qname = site.qname or ""
        if not qname.startswith("apex."):
            continue
        name = qname[len("apex.") :]
        if name.startswith("amp."):
            function = name[len("amp.") :]
            if function not in AMP_FUNCTIONS:
                return f"`apex.amp.{function}` has no automatic migration"
            if function == "initialize":
                level = _literal(site.arg(keyword="opt_level"))
                if level in _UNSUPPORTED_LEVEL:
                    return _UNSUPPORTED_LEVEL[level]
                if level is not None and level not in SUPPORTED_LEVELS:
                    return f"unknown opt_level {level!r}"
                if any(isinstance(a, ast.Starred) for a in site.node.args) or any(
                    k.arg is None for k in site.node.keywords
                ):
                    return "amp.initialize takes arguments from `*`/`**` unpacking, so its opt_level cannot be read"
                if not _is_whole_statement(site):
                    return (
                        "amp.initialize is part of a larger expression; the migration rewrites it only as a statement"
                    )
                if _is_nested_in_branch(site):
                    return (
                        "amp.initialize runs under a condition other than one plain `if` around it alone; "
                        "the scaler and autocast would need the same condition (`enabled=`): migrate by hand"
                    )
            if function == "scale_loss" and not _is_sole_with_item(site):
                return "amp.scale_loss is used other than as the only item of a `with` statement"
        elif name.startswith("fp16_utils."):
            function = name[len("fp16_utils.") :]
            return FP16_UTILS.get(function, "it has no direct torch equivalent")
        elif name == "parallel.DistributedDataParallel":
            extra = [k.arg for k in site.node.keywords if k.arg not in DDP_DROPPABLE]
            if extra:
                return (
                    f"apex DistributedDataParallel's `{extra[0]}=` has no equivalent in "
                    "torch.nn.parallel.DistributedDataParallel"
                )
        elif name.startswith("parallel.") and name not in PARALLEL_DIRECT:
            return f"`apex.{name}` has no direct torch equivalent"
    return None


def _is_whole_statement(site: CallSite) -> bool:
    """``targets = amp.initialize(...)`` or ``amp.initialize(...)`` on its own line."""
    statement = site.statement
    return (
        isinstance(statement, (ast.Assign, ast.Expr))
        and statement.value is site.node
        and (not isinstance(statement, ast.Assign) or len(statement.targets) == 1)
    )


def _is_sole_with_item(site: CallSite) -> bool:
    statement = site.statement
    return (
        isinstance(statement, ast.With) and len(statement.items) == 1 and statement.items[0].context_expr is site.node
    )


def _is_nested_in_branch(site: CallSite) -> bool:
    """Under a condition, other than ``if flag:`` holding the statement directly with no
    ``else`` (the flag then switches the scaler and autocast: ``enabled=flag``)."""
    branches = [
        block
        for block in site.path
        if block.kind in ("if", "else", "except", "match") and not _is_main_guard(block.node)
    ]
    if not branches:
        return False
    if len(branches) > 1 or branches[-1] is not site.path[-1] or branches[-1].kind != "if":
        return True
    guard = branches[-1].node
    return bool(guard.orelse) or site.statement not in guard.body  # type: ignore[attr-defined]  # (an ``if``)


def _is_main_guard(node: ast.AST) -> bool:
    """``if __name__ == "__main__":``: the script's body, not a condition on mixed precision."""
    test = getattr(node, "test", None)
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def _literal(arg: Arg | None) -> str | None:
    value = getattr(arg, "value", None)
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value
    return None


def _model_spellings(facts: AmpFacts) -> set[str]:
    """How the models handed to amp.initialize are written (``model``, ``self.net``, ``m1``)."""
    names: set[str] = set()
    for site in facts.calls:
        if site.qname != "apex.amp.initialize" or not site.node.args:
            continue
        first = site.node.args[0]
        items = first.elts if isinstance(first, (ast.List, ast.Tuple)) else [first]
        names.update(ast.unparse(item) for item in items)
        statement = site.statement
        if isinstance(statement, ast.Assign):
            target = statement.targets[0]
            first_target = target.elts[0] if isinstance(target, ast.Tuple) and target.elts else target
            items = first_target.elts if isinstance(first_target, (ast.List, ast.Tuple)) else [first_target]
            names.update(ast.unparse(item) for item in items)
    return names


def _blocks(module: ast.Module) -> Iterator[list[ast.stmt]]:
    """Every statement list of the module."""
    stack: list[ast.AST] = [module]
    while stack:
        node = stack.pop()
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block
                stack.extend(block)
        for handler in getattr(node, "handlers", ()):
            yield handler.body
            stack.extend(handler.body)
        for case in getattr(node, "cases", ()):
            yield case.body
            stack.extend(case.body)


def _scale_loss_call(statement: ast.stmt, scale_calls: set[int]) -> ast.Call | None:
    if isinstance(statement, ast.With):
        for item in statement.items:
            if id(item.context_expr) in scale_calls and isinstance(item.context_expr, ast.Call):
                return item.context_expr
    return None


def _forward_run(
    block: list[ast.stmt], index: int, call: ast.Call, models: set[str], scale_calls: set[int]
) -> tuple[int, int] | tuple[int | None, str]:
    """(first index, last index) of the statements before ``block[index]`` that compute the
    loss from a model, or (index of the loss's assignment or None, the text of a TODO saying
    why they cannot be told)."""
    todo = 'put the forward pass that computes `{}` under `with torch.autocast("cuda", dtype=torch.float16):`'
    if not call.args:
        return None, todo.format("the loss") + " (the loss is not a positional argument of amp.scale_loss)"
    loss = call.args[0]
    todo = todo.format(ast.unparse(loss))
    names = {n.id for n in ast.walk(loss) if isinstance(n, ast.Name)}
    start = index
    while start > 0 and not _is_boundary(block[start - 1], scale_calls):
        start -= 1
    end = next((p for p in range(index - 1, start - 1, -1) if _assigns(block[p], names)), None)
    if end is None:
        return None, todo + " (it is not computed in the block of the backward)"
    first = next((p for p in range(start, end + 1) if _mentions(block[p], models)), None)
    if first is None:
        return end, todo + " (it is computed here without a visible call of a model given to amp.initialize)"
    if any(_scale_loss_call(block[p], scale_calls) is not None for p in range(first, end + 1)):
        return end, todo + " (it is computed after an earlier backward)"
    return first, end


def _merged(runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for first, last in sorted(runs):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(last, merged[-1][1]))
        else:
            merged.append((first, last))
    return merged


def _is_boundary(statement: ast.stmt, scale_calls: set[int]) -> bool:
    """A statement that ends the previous iteration's work: a plain backward or a step (an
    ``amp.scale_loss`` block of another loss of the same forward is not one)."""
    if _scale_loss_call(statement, scale_calls) is not None:
        return False
    for node in ast.walk(statement):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("backward", "step"):
                return True
    return False


def _assigns(statement: ast.stmt, names: set[str]) -> bool:
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, (ast.AugAssign, ast.AnnAssign)):
        targets = [statement.target]
    else:
        return False
    return any(isinstance(n, ast.Name) and n.id in names for t in targets for n in ast.walk(t))


def _mentions(statement: ast.stmt, models: set[str]) -> bool:
    """Whether the statement runs a model: calls it (or its ``forward``), or hands it to a call.
    ``model.train()`` or ``model.zero_grad()`` is not a forward pass."""
    for node in ast.walk(statement):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "forward":
            func = func.value
        if _spelled(func, models) or any(_spelled(a, models) for a in node.args):
            return True
        if any(_spelled(k.value, models) for k in node.keywords):
            return True
    return False


def _spelled(node: ast.AST, models: set[str]) -> bool:
    if isinstance(node, ast.Subscript):  # ``models[0](x)``
        node = node.value
    return isinstance(node, (ast.Name, ast.Attribute)) and ast.unparse(node) in models
