"""AMP1xx: what runs inside autocast regions."""

from __future__ import annotations

import ast
from collections.abc import Iterable

from ...findings import Applicability
from ..fixes import SourceLines
from ..model import AmpFacts, CallSite
from ..passes import downcast_dtype
from ..syntax import iter_nodes
from ..vocabulary import Enabled, EventKind
from . import AUTOCAST, FixPlan, LintRule, NodeEdit, Report, register

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import ClassVar

    from ..model import Region


# Events of a training step: a half model beside them is trained, and its casts are this rule's.
_TRAINING = (EventKind.BACKWARD, EventKind.SCALED_BACKWARD, EventKind.OPTIMIZER_STEP, EventKind.SCALER_STEP)


def _where(site: CallSite) -> str:
    region = site.region
    if region is not None and region.enabled is Enabled.MAYBE:
        return "inside an autocast region that may be enabled"
    return "inside an autocast region"


@register
class BackwardInAutocast(LintRule):
    code = "AMP101"
    tokens = ("autocast",)
    anchors = AUTOCAST

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        # A backward handed to a framework (``accelerator.backward(loss)``) is still one.
        ends: dict[int, ast.With] | None = None  # made on the first finding: one walk per module
        for event in facts.events(EventKind.BACKWARD, EventKind.SCALED_BACKWARD, EventKind.DELEGATED_BACKWARD):
            site = event.call
            if not site.in_autocast:
                continue
            if ends is None:
                ends = _with_endings(facts.module)
            what = "torch.autograd.backward()" if site.qname else "backward()"
            yield Report(
                self.code,
                site.node,
                f"`{what}` runs {_where(site)}; backward ops would reuse the forward's autocast dtypes",
                help="Close the `with autocast(...)` block after the loss is computed and call backward outside it",
                fix=self._fix(site, facts, ends),
                statement=site.statement,
            )

    def _fix(self, site: CallSite, facts: AmpFacts, ends: dict[int, ast.With]) -> FixPlan | None:
        """Dedent the backward out of its ``with`` block when it is the block's last statement."""
        statement = site.statement
        if not (type(statement) is ast.Expr and statement.value is site.node):
            return None
        ref = next((r for r in reversed(site.withs) if r.region is not None), None)
        if ref is None or ref.decorator:
            return None
        with_node = ends.get(id(statement))
        if (
            with_node is None
            or len(with_node.items) != 1
            or with_node.items[0].context_expr is not ref.expr
            or len(with_node.body) < 2
        ):
            return None
        edit = _dedent_last_statement(facts.lines, with_node)
        if edit is None:
            return None
        return FixPlan("Move the backward call out of the autocast block", (edit,), Applicability.UNSAFE)


def _with_endings(module: ast.Module) -> dict[int, ast.With]:
    """Each (synchronous) ``with`` of the module by the id of its body's last statement."""
    ends: dict[int, ast.With] = {}
    stack: list[ast.AST] = [module]
    while stack:
        node = stack.pop()
        if type(node) is ast.With:
            ends[id(node.body[-1])] = node
        for name in _BODIES:
            stack.extend(child for child in getattr(node, name, ()) if isinstance(child, _BLOCK_HOLDERS))
    return ends


# Where statements are nested: the bodies of compound statements, except handlers, match cases.
_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")
_BLOCK_HOLDERS = (ast.stmt, ast.excepthandler, *((ast.match_case,) if hasattr(ast, "match_case") else ()))


def _dedent_last_statement(lines: SourceLines, with_node: ast.With) -> NodeEdit | None:
    """An edit that moves the last statement of the ``with`` body, and the comment lines just
    above it, to the ``with``'s indentation; a comment at the end of the line before stays."""
    statement, previous = with_node.body[-1], with_node.body[-2]
    outer = _indentation(lines, with_node)
    inner = _indentation(lines, statement)
    previous_end = previous.end_lineno or previous.lineno  # parsed: end_lineno is always set
    if outer is None or inner is None or previous_end >= statement.lineno:
        return None  # the statement shares its line with another one
    first = _first_comment_line(lines, previous_end, statement.lineno, inner)
    moved = [_shift(lines.text(number), inner, outer) for number in range(first, statement.lineno)]
    text = _moved_statement(lines, statement, inner, outer)
    if text is None:
        return None
    end = lines.span(statement)
    if end is None:
        return None  # a parsed statement always has its position
    newline = lines.newline()
    return NodeEdit("replace_range", text=newline.join([*moved, text]), span=(first, 1, end[2], end[3]))


def _indentation(lines: SourceLines, statement: ast.stmt) -> str | None:
    """The whitespace before a statement, or None when other code precedes it on its line."""
    prefix = lines.text(statement.lineno)[: lines.column(statement.lineno, statement.col_offset) - 1]
    return None if prefix.strip(" \t\f") else prefix


def _first_comment_line(lines: SourceLines, after: int, line: int, indent: str) -> int:
    """The first of the comment lines (blank lines between them included) directly above
    ``line`` and below line ``after``; ``line`` itself when there are none. A comment indented
    deeper than ``indent`` closes the block above and stays with it."""
    first = line
    number = line - 1
    while number > after:
        text = lines.text(number)
        stripped = text.lstrip(" \t\f")
        if stripped.startswith("#"):
            if len(text) - len(stripped) > len(indent):
                break
            first = number
        elif stripped:
            break
        number -= 1
    return first


def _shift(text: str, inner: str, outer: str) -> str:
    """One line moved from the block's indentation to the ``with``'s (less indented lines stay)."""
    return outer + text[len(inner) :] if text.startswith(inner) else text


def _moved_statement(lines: SourceLines, statement: ast.stmt, inner: str, outer: str) -> str | None:
    """The statement's text at the ``with``'s indentation."""
    end = lines.span(statement)
    if end is None:
        return None
    text = [lines.text(number) for number in range(statement.lineno, end[2] + 1)]
    text[-1] = text[-1][: end[3] - 1]
    if len(text) > 1 and _has_multiline_string(statement):
        # Re-indenting text line by line would change the string's content.
        return _render_at_indent(text, outer, lines.newline())
    return lines.newline().join(_shift(line, inner, outer) for line in text)


def _has_multiline_string(statement: ast.stmt) -> bool:
    return any(
        (type(node) is ast.Constant or type(node) is ast.JoinedStr) and (node.end_lineno or 0) > node.lineno
        for node in iter_nodes(statement)
    )


def _render_at_indent(text: list[str], indent: str, newline: str) -> str | None:
    """Render a statement (its physical lines, the first one indented) at ``indent`` with libcst,
    which indents continuation lines relative to the block and leaves string contents alone."""
    import libcst as cst

    try:
        module = cst.parse_module("if True:" + newline + newline.join(text) + newline)
    except cst.ParserSyntaxError:
        return None
    statement = cst.ensure_type(cst.ensure_type(module.body[0], cst.If).body, cst.IndentedBlock).body[0]
    if indent:
        # A throwaway ``if True:`` block at that indentation gives continuation lines the right indent.
        block = cst.IndentedBlock(body=[statement], indent=indent)
        holder = module.with_changes(body=[cst.If(test=cst.Name("True"), body=block)], header=[], footer=[])
        rendered = holder.code.split(newline, 1)[1]
    else:  # the ``with`` is at module level
        rendered = module.with_changes(body=[statement], header=[], footer=[]).code
    return rendered[: -len(newline)]


@register
class StepInAutocast(LintRule):
    code = "AMP102"
    tokens = ("autocast",)
    anchors = AUTOCAST

    _LABEL: ClassVar[dict[EventKind, str]] = {
        EventKind.SCALER_STEP: "scaler.step()",
        EventKind.OPTIMIZER_STEP: "optimizer.step()",
        EventKind.UPDATE: "scaler.update()",
    }

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        for event in facts.events(*self._LABEL):
            site = event.call
            if not site.in_autocast:
                continue
            receiver = site.receiver or ""
            label = f"{receiver}.{site.method}()" if receiver else self._LABEL[event.kind]
            yield Report(
                self.code,
                site.node,
                f"`{label}` runs {_where(site)}; the parameter update should not be autocast",
                help="Move the optimizer step and scaler update out of the `with autocast(...)` block",
                statement=site.statement,
            )


@register
class DowncastInAutocast(LintRule):
    code = "AMP103"
    tokens = ("autocast",)
    anchors = AUTOCAST

    def check(self, facts: AmpFacts) -> Iterable[Report]:
        reported: set[int] = set()
        for site in facts.calls:
            if site.method not in ("half", "bfloat16", "to", "type"):
                continue
            region = site.region
            # A region that is certainly on, or one whose own flag guards the cast. Under a
            # different flag the cast is usually the branch for a configuration that runs
            # without autocast (pure float16, say).
            if region is None or not (region.enabled is Enabled.ON or _guarded_by_own_flag(site, region)):
                continue
            dtype = downcast_dtype(site, facts)
            if dtype is None:
                continue
            if _stored(site) or _matches_a_half_model(facts, site):
                continue
            if dtype == "bfloat16" and _matches_a_bfloat16_model(facts, site):
                continue
            if id(site.statement) in reported:
                continue  # one cause, one finding: ``x.half(), y.half()`` on one line
            reported.add(id(site.statement))
            call_text = f"{site.method}()" if site.method in ("half", "bfloat16") else f"{site.method}(torch.{dtype})"
            yield Report(
                self.code,
                site.node,
                f"manual `.{call_text}` {_where(site)}: it forces {dtype} onto ops that autocast keeps in float32",
                help="Remove the cast and let autocast choose the precision per op",
                statement=site.statement,
            )


def _stored(site: CallSite) -> bool:
    """A cast whose result is stored, not computed with: ``state.exp_avg = m.to(torch.bfloat16)``,
    ``buffer[i] = x.half()``, ``p.data.copy_(q.half())`` (a value kept in a dtype of its own)."""
    statement = site.statement
    if type(statement) is ast.Assign and statement.value is site.node:
        return all(type(t) in (ast.Attribute, ast.Subscript) for t in statement.targets)
    if type(statement) is ast.Expr and type(statement.value) is ast.Call:
        call = statement.value
        return (
            type(call.func) is ast.Attribute
            and call.func.attr in ("copy_", "set_")
            and any(arg is site.node for arg in call.args)
        )
    return False


def _matches_a_half_model(facts: AmpFacts, site: CallSite) -> bool:
    """An input cast to float16 in a function that made its model float16 (``model.half()``):
    the cast matches the model's dtype (inference with a half model), it is not autocast's
    business."""
    if site.method not in ("half", "to", "type"):
        return False
    return any(
        other.method == "half"
        and not other.node.args
        and other.receiver not in (None, site.receiver)
        and other.order < site.order
        for other in site.frame.calls
        if other.region is None or other.node is not site.node
    ) and not any(e.kind in _TRAINING for e in site.frame.events)


def _matches_a_bfloat16_model(facts: AmpFacts, site: CallSite) -> bool:
    """An input cast to bfloat16 in a function that made its model bfloat16 before it
    (``from_pretrained(path, torch_dtype=torch.bfloat16)``, ``model.bfloat16()``, ``model =
    model.to(torch.bfloat16)``): the cast matches the weights' dtype, and bfloat16 has no
    overflow to fear; training included, unlike a float16 model (AMP303 is about those)."""
    for other in site.frame.calls:
        if other.order >= site.order or other.node is site.node:
            continue
        if any(
            keyword.arg == "torch_dtype" and facts.qualify(keyword.value) == "torch.bfloat16"
            for keyword in other.node.keywords
        ):
            return True
        if other.method not in ("bfloat16", "to") or (other.receiver is not None and other.receiver == site.receiver):
            continue
        statement = other.statement
        # (``Net().to(torch.bfloat16)`` has no receiver: only its assignment names the model)
        alone = (type(statement) is ast.Expr and statement.value is other.node and other.receiver is not None) or (
            type(statement) is ast.Assign and statement.value is other.node
        )
        if alone and downcast_dtype(other, facts) == "bfloat16":
            return True  # the model itself converted (not a tensor passed on)
    return False


def _guarded_by_own_flag(site: CallSite, region: Region) -> bool:
    """``with autocast(enabled=use_amp):`` ... ``if use_amp: y = y.half()``: the cast runs exactly
    when the region is on. Only the ``if`` arm counts, and only the flag spelled the same way."""
    if region.enabled is not Enabled.MAYBE or region.flag is None:
        return False
    flag = ast.dump(region.flag)
    return any(
        block.kind == "if" and type(block.node) is ast.If and ast.dump(block.node.test) == flag for block in site.path
    )
