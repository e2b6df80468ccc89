"""AMP1xx: what runs inside autocast regions."""

from __future__ import annotations

from typing import Iterable, Optional

import libcst as cst

from ...findings import Applicability
from ..facts import AmpFacts, CallSite, Enabled, EventKind, downcast_dtype
from . import AUTOCAST, FixPlan, LintRule, NodeEdit, Report, register


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
        for event in facts.events(EventKind.BACKWARD, EventKind.SCALED_BACKWARD):
            site = event.call
            if not site.in_autocast:
                continue
            what = "torch.autograd.backward()" if site.qname else "backward()"
            yield Report(
                self.code,
                site.node,
                f"`{what}` runs {_where(site)}; backward ops would reuse the forward's autocast dtypes",
                help="Close the `with autocast(...)` block after the loss is computed and call backward outside it",
                fix=self._fix(site, facts),
                statement=site.statement,
            )

    def _fix(self, site: CallSite, facts: AmpFacts) -> Optional[FixPlan]:
        """Dedent the backward out of its ``with`` block when it is the block's last statement."""
        statement = site.statement
        if not (
            isinstance(statement, cst.SimpleStatementLine)
            and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr)
            and statement.body[0].value is site.node
        ):
            return None
        ref = next((r for r in reversed(site.withs) if r.region is not None), None)
        if ref is None or ref.decorator:
            return None
        found = _find_with(facts.module, statement)
        if found is None:
            return None
        with_node, indent = found
        body = with_node.body
        if (
            with_node.asynchronous is not None
            or len(with_node.items) != 1
            or with_node.items[0].item is not ref.expr
            or not isinstance(body, cst.IndentedBlock)
            or len(body.body) < 2
            or body.body[-1] is not statement
        ):
            return None
        module = facts.module
        if statement.leading_lines:
            start: cst.CSTNode = statement.leading_lines[0]
            prefix = ""
        else:
            previous = body.body[-2]
            if not isinstance(previous, cst.SimpleStatementLine):
                return None
            start = previous.trailing_whitespace
            prefix = module.code_for_node(previous.trailing_whitespace)
        # Render the statement (and its comments) at the ``with``'s indentation: a throwaway
        # ``if True:`` block at that indentation gives continuation lines the right indent too.
        moved = statement.with_changes(trailing_whitespace=cst.TrailingWhitespace())
        if indent:
            holder = module.with_changes(
                body=[cst.If(test=cst.Name("True"), body=cst.IndentedBlock(body=[moved], indent=indent))],
                header=[],
                footer=[],
            )
            rendered = holder.code.split(module.default_newline, 1)[1]
        else:  # the ``with`` is at module level
            rendered = module.with_changes(body=[moved], header=[], footer=[]).code
        rendered = rendered[: -len(module.default_newline)]
        return FixPlan(
            "Move the backward call out of the autocast block",
            (NodeEdit("replace_span", start, prefix + rendered, end_node=statement.body[-1]),),
            Applicability.UNSAFE,
        )


class _WithFinder(cst.CSTVisitor):
    """The ``with`` statement whose body holds ``target``, and the absolute indentation of that ``with``."""

    def __init__(self, module: cst.Module, target: cst.CSTNode) -> None:
        super().__init__()
        self.module = module
        self.target = target
        self.indents: list[str] = []
        self.found: Optional[tuple[cst.With, str]] = None

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> Optional[bool]:
        if self.found is not None:
            return False
        self.indents.append(node.indent if node.indent is not None else self.module.default_indent)
        return True

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock) -> None:
        if self.indents:
            self.indents.pop()

    def visit_With(self, node: cst.With) -> Optional[bool]:
        if self.found is not None:
            return False
        if isinstance(node.body, cst.IndentedBlock) and any(s is self.target for s in node.body.body):
            self.found = (node, "".join(self.indents))
            return False
        return True


def _find_with(module: cst.Module, statement: cst.CSTNode) -> Optional[tuple[cst.With, str]]:
    finder = _WithFinder(module, statement)
    module.visit(finder)
    return finder.found


@register
class StepInAutocast(LintRule):
    code = "AMP102"
    tokens = ("autocast",)
    anchors = AUTOCAST

    _LABEL = {
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
        for site in facts.calls:
            if site.method not in ("half", "bfloat16", "to", "type"):
                continue
            region = site.region
            # Only a region that is certainly on: with ``enabled=flag`` a cast is usually the
            # branch for the configuration that runs without autocast (pure float16, say).
            if region is None or region.enabled is not Enabled.ON:
                continue
            dtype = downcast_dtype(site, facts)
            if dtype is None:
                continue
            call_text = f"{site.method}()" if site.method in ("half", "bfloat16") else f"{site.method}(torch.{dtype})"
            yield Report(
                self.code,
                site.node,
                f"manual `.{call_text}` {_where(site)}: it forces {dtype} onto ops that autocast keeps in float32",
                help="Remove the cast and let autocast choose the precision per op",
                statement=site.statement,
            )

