"""The apex → torch.amp migration: a libcst codemod behind AMP402's fix.

libcst keeps the concrete syntax (comments, blank lines, quoting), so everything the migration
does not touch stays as the author wrote it. Imported only when the fix is applied.

What it rewrites (plan.py has already decided that the module can be migrated, and which
statements compute each loss):

* ``m, o = amp.initialize(m, o, opt_level="O1", loss_scale=...)`` → ``scaler =
  torch.amp.GradScaler("cuda", ...)`` (names rebound only when the targets differ);
* the loss-computing statements → ``with torch.autocast("cuda", dtype=torch.float16):``;
* ``with amp.scale_loss(loss, o) as s: s.backward()`` → ``scaler.scale(loss).backward()``;
* ``o.step()`` → ``scaler.step(o)``, and one ``scaler.update()`` after the last step of the
  iteration;
* ``clip_grad_norm_(amp.master_params(o), n)`` → ``scaler.unscale_(o)`` and the clip of the
  model's parameters; ``amp.state_dict()`` / ``amp.load_state_dict(x)`` → the scaler's;
* ``apex.parallel.DistributedDataParallel`` / ``convert_syncbn_model`` → torch's;
* the apex imports that are no longer used go; ``import torch`` is added when missing
  (imports.py).
"""

from __future__ import annotations

import re
import textwrap

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from .imports import (
    ApexNames,
    code_of,
    dotted_name,
    is_main_guard,
    is_pass,
    parse_line,
    spelling_of,
    tidy_imports,
)
from .plan import DDP_DROPPABLE, MigrationPlan, opt_level_note

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Sequence

    # What a block's body holds (libcst's BaseStatement declares no leading_lines).
    Statement = cst.SimpleStatementLine | cst.BaseCompoundStatement

_CLIPS = ("clip_grad_norm_", "clip_grad_value_")
_GROUP_ROOTS = (cst.For, cst.While, cst.FunctionDef)
# Growth never happens within this many steps: what a static apex loss scale meant.
_NEVER = "2**31 - 1"


def migrate(source: str, plan: MigrationPlan) -> str | None:
    """The migrated module text, or None when the migration does not apply or changes nothing."""
    if plan.blocker is not None:
        return None
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    names = ApexNames(module)
    if not names.locals:
        return None
    migration = _Migration(wrapper, names, plan)
    migrated = wrapper.module.visit(migration)
    migrated = tidy_imports(migrated, names)
    code = migrated.code
    return None if code == source else code


# ---------------------------------------------------------------------------------------
# What the module holds
# ---------------------------------------------------------------------------------------


def _call_of(node: cst.CSTNode) -> cst.Call | None:
    if isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1:
        small = node.body[0]
        value = getattr(small, "value", None)
        if isinstance(value, cst.Call):
            return value
    return None


def _items(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(expr, (cst.List, cst.Tuple)):
        return [element.value for element in expr.elements]
    return [expr]


class _Initialize:
    """One ``amp.initialize`` statement and what it says."""

    def __init__(self, statement: cst.SimpleStatementLine, call: cst.Call) -> None:
        self.statement = statement
        self.call = call
        positional = [a for a in call.args if a.keyword is None]
        self.keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        self.models = positional[0].value if positional else self.keywords.get("models")
        self.optimizers = positional[1].value if len(positional) > 1 else self.keywords.get("optimizers")
        small = statement.body[0]
        self.targets = small.targets[0].target if isinstance(small, cst.Assign) and len(small.targets) == 1 else None
        self.condition: cst.If | None = None  # ``if flag:`` around the call alone: the scaler's switch

    def target_items(self) -> tuple[list[str], list[str]]:
        """(model spellings, optimizer spellings), the arguments' and the targets'."""
        models = [code_of(m) for m in _items(self.models)] if self.models is not None else []
        optimizers = [code_of(o) for o in _items(self.optimizers)] if self.optimizers is not None else []
        if self.targets is not None:
            parts = _items(self.targets)
            if self.optimizers is not None and len(parts) == 2:
                models += [code_of(m) for m in _items(parts[0])]
                optimizers += [code_of(o) for o in _items(parts[1])]
            elif self.optimizers is None:
                models += [code_of(m) for m in parts]
        return models, optimizers


def _clipped_optimizer(node: cst.Call, names: ApexNames) -> str | None:
    """``o`` of ``clip_grad_norm_(amp.master_params(o), ...)`` (or ``clip_grad_value_``)."""
    dotted = dotted_name(node.func) or ""
    if dotted.rsplit(".", 1)[-1] not in _CLIPS or not node.args:
        return None
    first = node.args[0].value
    if isinstance(first, cst.Call) and names.qualify(first.func) == "apex.amp.master_params" and first.args:
        return code_of(first.args[0].value)
    return None


class _Migration(cst.CSTTransformer):
    def __init__(self, wrapper: MetadataWrapper, names: ApexNames, plan: MigrationPlan) -> None:
        super().__init__()
        self.names = names
        self.plan = plan
        self.positions = wrapper.resolve(PositionProvider)
        # Parents are recorded by the survey's own walk: libcst's provider would walk once more.
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self.before: dict[int, list[Statement]] = {}
        self.after: dict[int, list[Statement]] = {}
        self.dropped: set[int] = set()
        self.plain_backwards: dict[str, cst.SimpleStatementLine] = {}  # ``loss.backward()`` → its scaled form
        self.unscales: set[int] = set()  # the ``scaler.unscale_(opt)`` lines the migration added
        self.clips: dict[int, list[str]] = {}  # statement → optimizers of its ``clip(amp.master_params(o))``
        self.spelled: set[str] = set()  # every identifier, attributes' included: taken names
        self._survey(wrapper.module)

    # -- survey: before anything changes ---------------------------------------------------

    def _survey(self, module: cst.Module) -> None:
        initializes: list[_Initialize] = []
        statements: list[cst.SimpleStatementLine] = []
        names = self.names
        parents, clips, spelled = self.parents, self.clips, self.spelled
        stack: list[cst.CSTNode] = []
        current: list[cst.SimpleStatementLine] = []

        class Survey(cst.CSTVisitor):
            def on_visit(self, node: cst.CSTNode) -> bool:
                if stack:
                    parents[node] = stack[-1]
                stack.append(node)
                return super().on_visit(node)

            def on_leave(self, node: cst.CSTNode) -> None:
                stack.pop()
                super().on_leave(node)

            def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
                current[:] = [node]
                statements.append(node)
                call = _call_of(node)
                if call is not None and names.qualify(call.func) == "apex.amp.initialize":
                    initializes.append(_Initialize(node, call))

            def visit_Call(self, node: cst.Call) -> None:
                optimizer = _clipped_optimizer(node, names)
                if optimizer is not None and current:
                    clips.setdefault(id(current[0]), []).append(optimizer)

            def visit_Name(self, node: cst.Name) -> None:
                spelled.add(node.value)

        module.visit(Survey())
        self.initializes = initializes
        for init in initializes:
            block = self.parents.get(init.statement)
            guard = self.parents.get(block) if block is not None else None
            if isinstance(guard, cst.If) and guard.body is block and guard.orelse is None and not is_main_guard(guard):
                init.condition = guard
        models, optimizers = [], []
        for init in initializes:
            found_models, found_optimizers = init.target_items()
            models += found_models
            optimizers += found_optimizers
        self.models = list(dict.fromkeys(models))
        self.optimizers = list(dict.fromkeys(optimizers))
        self.single_pair = len(initializes) == 1 and self._single(initializes[0])
        self.scaler = self._scaler_name(module, initializes)
        # ``amp.initialize(..., enabled=flag)`` switched both halves: autocast follows the scaler.
        switched = any("enabled" in init.keywords or init.condition is not None for init in initializes)
        self.switches: set[str] = set()
        for init in initializes:
            if "enabled" in init.keywords:
                self.switches.add(code_of(init.keywords["enabled"]))
            elif init.condition is not None:
                self.switches.add(code_of(init.condition.test))
        self.enabled = f"{self.scaler}.is_enabled()" if switched else None
        self._plan_updates(statements)

    @staticmethod
    def _single(init: _Initialize) -> bool:
        return (
            init.models is not None
            and not isinstance(init.models, (cst.List, cst.Tuple))
            and init.optimizers is not None
            and not isinstance(init.optimizers, (cst.List, cst.Tuple))
        )

    def _scaler_name(self, module: cst.Module, initializes: list[_Initialize]) -> str:
        if self.plan.method:
            return "self.scaler"  # amp.initialize in a method: every user is a method of its class
        return "scaler" if "scaler" not in self.spelled else "grad_scaler"

    def _plan_updates(self, statements: list[cst.SimpleStatementLine]) -> None:
        """One ``scaler.update()`` per loop body (or function), after the last statement that
        holds an optimizer step of that body."""
        groups: dict[int, list[list[tuple[int, int, cst.CSTNode]]]] = {}
        for statement in statements:
            if self._stepped(statement) is None:
                continue
            chain, root = self._chain(statement)
            groups.setdefault(id(root), []).append(chain)
        for chains in groups.values():
            depth = 0  # the deepest block that holds every step of the group
            while (
                all(len(c) > depth + 1 for c in chains)
                and len({c[depth][:2] for c in chains}) == 1
                and len({c[depth + 1][0] for c in chains}) == 1
            ):
                depth += 1
            last = max(chains, key=lambda c: c[depth][1])[depth][2]
            self.after.setdefault(id(last), []).append(parse_line(f"{self.scaler}.update()"))

    def _chain(self, statement: cst.CSTNode) -> tuple[list[tuple[int, int, cst.CSTNode]], cst.CSTNode]:
        """[(block id, index, statement)] from the group's root block down to ``statement``."""
        chain = []
        node = statement
        while True:
            block = self.parents.get(node)
            if isinstance(block, (cst.IndentedBlock, cst.Module)):
                index = next(i for i, s in enumerate(block.body) if s is node)
                chain.append((id(block), index, node))
                if isinstance(block, cst.Module):
                    return list(reversed(chain)), block
                owner = self.parents.get(block)
                if isinstance(owner, _GROUP_ROOTS) and owner.body is block:
                    return list(reversed(chain)), block
            if block is None:
                return list(reversed(chain)), node
            node = block

    def _stepped(self, statement: cst.CSTNode) -> cst.BaseExpression | None:
        """The optimizer of an ``optimizer.step()`` statement, for an optimizer amp initialized."""
        call = _call_of(statement)
        if call is None or call.args or not isinstance(call.func, cst.Attribute) or call.func.attr.value != "step":
            return None
        receiver = call.func.value
        base = receiver.value if isinstance(receiver, cst.Subscript) else receiver
        if code_of(receiver) in self.optimizers or code_of(base) in self.optimizers:
            return receiver
        return None

    # -- rewriting --------------------------------------------------------------------------

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel:
        if any(original is init.statement for init in self.initializes):
            init = next(i for i in self.initializes if i.statement is original)
            return self._replace_initialize(init, updated)
        optimizer = self._stepped(original)
        if optimizer is not None:
            call = cst.parse_expression(f"{self.scaler}.step({code_of(optimizer)})")
            return updated.with_changes(body=[cst.Expr(call)])
        for optimizer in self.clips.get(id(original), ()):  # type: ignore[assignment]  # (a spelling)
            unscale = parse_line(f"{self.scaler}.unscale_({optimizer})")
            self.unscales.add(id(unscale))
            self.before.setdefault(id(original), []).append(unscale)
        return updated

    def _replace_initialize(self, init: _Initialize, updated: cst.SimpleStatementLine) -> Statement:
        lines: list[Statement] = []
        if init.targets is not None:
            given = [a for a in (init.models, init.optimizers) if a is not None]
            values = ", ".join(code_of(a) for a in given)
            if spelling_of(init.targets) != re.sub(r"[\s()\[\]]", "", values):
                lines.append(parse_line(f"{code_of(init.targets)} = {values}"))
        if init.optimizers is not None:
            comments, arguments = self._scaler_arguments(init)
            scaler = parse_line(f"{self.scaler} = torch.amp.GradScaler({', '.join(arguments)})")
            scaler = scaler.with_changes(leading_lines=[line for c in comments for line in _comments(c)])
            if init.condition is not None:  # created either way, before the ``if``: the flag switches it
                self.before.setdefault(id(init.condition), []).append(scaler)
            else:
                lines.append(scaler)
        if not lines:
            self.dropped.add(id(init.statement))
            return updated
        first = lines[0]
        lines[0] = first.with_changes(leading_lines=[*updated.leading_lines, *first.leading_lines])
        # The comment at the end of the apex line stays with the line that replaces it.
        lines[-1] = lines[-1].with_changes(trailing_whitespace=updated.trailing_whitespace)
        self.after.setdefault(id(init.statement), []).extend(lines[1:])
        return lines[0]

    def _scaler_arguments(self, init: _Initialize) -> tuple[list[str], list[str]]:
        keywords = init.keywords
        arguments, comments = ['"cuda"'], []
        level = keywords.get("opt_level")
        if level is not None and not isinstance(level, cst.SimpleString):
            comments.append(f"TODO(ampdoctor): {opt_level_note(code_of(level))}")
        if isinstance(level, cst.SimpleString) and level.evaluated_value == "O2":
            comments.append(
                "apex O2 cast the model to float16 and kept float32 master weights; with torch.amp the "
                "model stays in float32 (its weights are the master weights) and autocast runs the "
                "forward in float16"
            )
        scale = keywords.get("loss_scale")
        if isinstance(scale, (cst.Integer, cst.Float)):
            arguments += [f"init_scale={code_of(scale)}", f"growth_interval={_NEVER}"]
            comments.append(
                f"a static loss scale: the scale starts at {code_of(scale)} and never grows (unlike apex, "
                "a step whose gradients overflow is skipped and the scale backs off)"
            )
        elif scale is not None and not (isinstance(scale, cst.SimpleString) and scale.evaluated_value == "dynamic"):
            comments.append(
                f"TODO(ampdoctor): loss_scale={code_of(scale)} was not migrated: pass init_scale= (and a "
                "large growth_interval=) for a static scale"
            )
        if "enabled" in keywords:
            arguments.append(f"enabled={code_of(keywords['enabled'])}")
        elif init.condition is not None:
            arguments.append(f"enabled={code_of(init.condition.test)}")
        dropped = [
            k
            for k in keywords
            if k
            in ("min_loss_scale", "max_loss_scale", "cast_model_outputs", "patch_torch_functions", "cast_model_type")
        ]
        if dropped:
            comments.append(f"apex's {', '.join(dropped)} has no torch.amp equivalent and was dropped")
        return comments, arguments

    def leave_With(
        self, original: cst.With, updated: cst.With
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel:
        if len(original.items) != 1:
            return updated
        call = original.items[0].item
        if not (isinstance(call, cst.Call) and self.names.qualify(call.func) == "apex.amp.scale_loss" and call.args):
            return updated
        loss = code_of(call.args[0].value)
        scaled = f"{self.scaler}.scale({loss})"
        target = original.items[0].asname
        name = target.name.value if target is not None and isinstance(target.name, cst.Name) else None
        body = list(updated.body.body)
        backward = _call_of(body[0]) if len(body) == 1 and isinstance(body[0], cst.SimpleStatementLine) else None
        if isinstance(updated.body, cst.SimpleStatementSuite) and len(body) == 1:
            value = getattr(body[0], "value", None)
            backward = value if isinstance(value, cst.Call) else None
            body = [cst.SimpleStatementLine(body=[body[0]])]  # type: ignore[list-item]  # (a small statement)
        if (
            backward is not None
            and isinstance(backward.func, cst.Attribute)
            and backward.func.attr.value == "backward"
            and isinstance(backward.func.value, cst.Name)
            and backward.func.value.value == name
        ):
            args = ", ".join(code_of(a) for a in backward.args)
            replacement = parse_line(f"{scaled}.backward({args})")
            self.plain_backwards[f"{loss}.backward({args})"] = replacement
        else:
            # The body does more than a backward: keep it, with the scaled loss bound to its name.
            replacement = parse_line(f"{name or '_'} = {scaled}")
            self.after.setdefault(id(original), []).extend(body)  # type: ignore[arg-type]  # libcst re-indents them
        header = updated.body.header if isinstance(updated.body, cst.IndentedBlock) else replacement.trailing_whitespace
        return replacement.with_changes(leading_lines=updated.leading_lines, trailing_whitespace=header)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if isinstance(original.func, cst.Name) and original.func.value in self.plan.threads:
            tight = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))
            argument = cst.Arg(keyword=cst.Name(self.scaler), value=cst.Name(self.scaler), equal=tight)
            return updated.with_changes(args=[*updated.args, argument])
        qualified = self.names.qualify(original.func)
        if qualified is None:
            return updated
        if qualified == "apex.amp.state_dict":
            return updated.with_changes(func=cst.parse_expression(f"{self.scaler}.state_dict"))
        if qualified == "apex.amp.load_state_dict":
            return updated.with_changes(func=cst.parse_expression(f"{self.scaler}.load_state_dict"))
        if qualified == "apex.amp.master_params" and updated.args:
            return cst.parse_expression(self._parameters(code_of(updated.args[0].value)))
        if qualified == "apex.parallel.convert_syncbn_model":
            return updated.with_changes(func=cst.parse_expression("torch.nn.SyncBatchNorm.convert_sync_batchnorm"))
        if qualified == "apex.parallel.DistributedDataParallel":
            args = [a for a in updated.args if a.keyword is None or a.keyword.value not in DDP_DROPPABLE]
            if args:
                args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            func = updated.func
            if isinstance(func, cst.Attribute):
                func = cst.parse_expression("torch.nn.parallel.DistributedDataParallel")
            return updated.with_changes(func=func, args=args)
        return updated

    def _parameters(self, optimizer: str) -> str:
        if self.single_pair and len(self.models) >= 1:
            return f"{self.models[0]}.parameters()"
        return f'[p for group in {optimizer}.param_groups for p in group["params"]]'

    def leave_If(
        self, original: cst.If, updated: cst.If
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel:
        if any(init.condition is original for init in self.initializes):
            if all(is_pass(s) for s in updated.body.body):
                self.dropped.add(id(original))  # ``if flag:`` held only amp.initialize
            return updated
        if code_of(original.test) not in self.switches or not isinstance(updated.orelse, cst.Else):
            return updated
        return self._collapsed(original, updated) or updated

    def _collapsed(self, original: cst.If, updated: cst.If) -> Statement | None:
        """``if flag: <scaled> else: <plain>`` where ``flag`` switches the scaler: a disabled scaler
        scales by 1 and its unscale_ does nothing, so the scaled arm alone does both."""
        orelse = updated.orelse
        if not isinstance(orelse, cst.Else):
            return None  # leave_If calls this only with an else arm
        arm, other = _lines(updated.body), _lines(orelse.body)
        if arm is None or other is None:
            return None  # ``if flag: stmt`` on one line: its statements are not lines to move
        scaled = self.plain_backwards.get(code_of(other[0]).strip()) if len(other) == 1 else None
        if len(arm) == 1 and scaled is not None and code_of(arm[0].with_changes(leading_lines=[])) == code_of(scaled):
            return arm[0].with_changes(leading_lines=[*updated.leading_lines, *arm[0].leading_lines])
        bare = [s for s in arm if id(s) not in self.unscales]
        if len(bare) < len(arm) and [code_of(s) for s in bare] == [code_of(s) for s in other]:
            self.after.setdefault(id(original), []).extend(arm[1:])
            return arm[0].with_changes(leading_lines=updated.leading_lines)
        return None

    def leave_FunctionDef(
        self, original: cst.FunctionDef, updated: cst.FunctionDef
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel:
        """A function the scaler is handed to (reach.py) takes it as a keyword-only parameter."""
        if original.name.value not in self.plan.threads:
            return updated
        params = updated.params
        star = params.star_arg
        if not isinstance(star, (cst.Param, cst.ParamStar)):
            star = cst.ParamStar()
        kwonly = [*params.kwonly_params, cst.Param(name=cst.Name(self.scaler))]
        return updated.with_changes(params=params.with_changes(star_arg=star, kwonly_params=kwonly))

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.BaseSuite:
        body = self._block(original.body, updated.body)  # type: ignore[arg-type]  # (each a Statement)
        return updated.with_changes(body=body or [parse_line("pass")])

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        return updated.with_changes(body=self._block(original.body, updated.body))

    def _block(self, originals: Sequence[Statement], updateds: Sequence[Statement]) -> list[Statement]:
        groups = []
        for original, updated in zip(originals, updateds):
            line = self.positions[original].start.line
            extra = [*self.before.get(id(original), []), *self.after.get(id(original), [])]
            if id(original) in self.dropped:
                if extra:  # what replaces the statement takes its leading comments
                    extra[0] = extra[0].with_changes(leading_lines=[*updated.leading_lines, *extra[0].leading_lines])
                    groups.append((line, extra))
                continue
            updated = self._with_todos(updated, line)
            statements = [*self.before.get(id(original), []), updated, *self.after.get(id(original), [])]
            groups.append((line, statements))
        result: list[Statement] = []
        index = 0
        while index < len(groups):
            line, statements = groups[index]
            end = self._wrap_end(line)
            if end is None:
                result.extend(statements)
                index += 1
                continue
            run = []
            while index < len(groups) and groups[index][0] <= end:
                run.extend(groups[index][1])
                index += 1
            result.append(_autocast(run, self.enabled))
        return result

    def _wrap_end(self, line: int) -> int | None:
        return next((last for first, last in self.plan.wraps if first == line), None)

    def _with_todos(self, statement: Statement, line: int) -> Statement:
        todos = [text for at, text, _reported in self.plan.todos if at == line]
        if not todos:
            return statement
        comments = [line for text in todos for line in _comments(f"TODO(ampdoctor): {text}")]
        return statement.with_changes(leading_lines=[*statement.leading_lines, *comments])


# ---------------------------------------------------------------------------------------
# Building nodes
# ---------------------------------------------------------------------------------------


def _comments(text: str) -> list[cst.EmptyLine]:
    """A comment of several lines (continuation lines indented), each at most ~90 characters."""
    lines = textwrap.wrap(text, 88, subsequent_indent="  ", break_on_hyphens=False, break_long_words=False)
    return [cst.EmptyLine(comment=cst.Comment(f"# {line}")) for line in lines]


def _autocast(run: list[Statement], enabled: str | None) -> cst.With:
    first = run[0]
    leading = list(first.leading_lines)
    run = [first.with_changes(leading_lines=[]), *run[1:]]
    switch = f", enabled={enabled}" if enabled else ""
    template = cst.ensure_type(
        cst.parse_statement(f'with torch.autocast("cuda", dtype=torch.float16{switch}):\n    pass\n'), cst.With
    )
    return template.with_changes(body=cst.IndentedBlock(body=run), leading_lines=leading)


def _lines(block: cst.BaseSuite) -> list[cst.SimpleStatementLine | cst.BaseCompoundStatement] | None:
    """The statements of an indented block, each a line of its own; None for a suite on the
    line of its header (``if flag: stmt``), whose statements are parts of one line."""
    if not isinstance(block, cst.IndentedBlock):
        return None
    return [s for s in block.body if isinstance(s, (cst.SimpleStatementLine, cst.BaseCompoundStatement))]
