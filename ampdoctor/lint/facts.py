"""AmpFacts: the mixed-precision semantic model of one module, built in one walk of its ``ast``.

Rules never walk the tree. They query what this module records:

* ``imports``: local names bound by imports (and simple module-level aliases), mapped to the
  dotted torch (or other library) path they stand for, so ``ac`` in
  ``from torch.cuda.amp import autocast as ac`` resolves to ``torch.cuda.amp.autocast``;
* ``calls``: every call, with its resolved qualified name (for plain functions), its receiver
  and method name (for method calls), the function frame, the loop/branch path inside that
  frame, the ``with`` items and decorators that enclose it, and its source order;
* ``regions``: autocast regions (device, dtype, enabled on/off/maybe), including context
  objects bound to a name and entered later (``ctx = torch.autocast(...)``; ``with ctx:``)
  and autocast decorators;
* ``scalers`` / ``optimizers``: receiver keys (``scaler``, ``self.scaler``) known to hold a
  GradScaler or an optimizer, by construction and by use;
* per frame (each function and the module body), the ordered training-step ``events``;
* ``flow_nodes``: per top-level function or method and for the module body, the nodes that
  bind, return, call or enter a context there, in the order of the walk (what the project
  summary's value flows start from: ``project/value_bindings.py``).

The tree is the interpreter's own (``ast``): it parses an order of magnitude faster than a
concrete syntax tree, carries positions, and needs no import of its own. Comments and
formatting live in the source text, which ``text()`` slices for messages and fixes.

Receivers are compared by their dotted spelling (``self.scaler``), which is what a reader
compares too. Anything the model cannot name precisely (subscripts, call results) is left
out, so rules stay silent rather than guess.

This module is the walk. The model's other pieces: ``vocabulary.py`` (the torch names and
dtypes), ``syntax.py`` (small ``ast`` helpers), ``model.py`` (the records), ``passes.py`` (what
runs after the walk: regions, roles, events), ``held.py`` (autocast held in names), ``control_paths.py``
and ``iteration.py`` (paths through a loop body and how two events relate on them).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Sequence

from .model import AmpFacts, Assignment, Block, CallSite, Frame, ImportRef, WithRef
from .passes import classify_events, find_scalers_and_optimizers, resolve_regions
from .syntax import children_except, dotted, is_try, qualify, qualify_spelled

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any

    # What the walk does next: visit a node, start a block (kind, owner), or run a marker.
    _Work = ast.AST | tuple[str, ast.AST] | Callable[[], object]


def _import_bindings(node: ast.Import | ast.ImportFrom) -> Iterator[tuple[ast.alias, str, str, str | None]]:
    """(alias node, local name, qualified name, from-module) for each name an import binds."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                yield alias, alias.asname, alias.name, None
            else:
                head = alias.name.split(".", 1)[0]
                yield alias, head, head, None
        return
    if node.level or not node.module:
        return
    for alias in node.names:
        if alias.name == "*":
            continue
        yield alias, alias.asname or alias.name, f"{node.module}.{alias.name}", node.module


class _FactWalk:
    """The one traversal that builds AmpFacts; context is kept on explicit stacks.

    The work list holds nodes to visit and zero-argument callables (markers) that close a
    context — leave a loop, a branch, a ``with`` body, a function — once all nodes pushed
    before them have been visited.
    """

    def __init__(self, imports: dict[str, str], import_refs: list[ImportRef]) -> None:
        self.imports = imports
        self.import_refs = import_refs
        self.frames: list[Frame] = []
        self.calls: list[CallSite] = []
        self.assignments: list[Assignment] = []
        self.references: list[tuple[ast.expr, str]] = []
        self.classes: list[tuple[ast.ClassDef, tuple[str, ...]]] = []
        self.functions: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, Frame]] = []
        self.item_assignments: list[tuple[str, ast.Assign, Frame]] = []
        self._frame_stack: list[Frame] = []
        self._path_stack: list[list[Block]] = []
        self._with_stack: list[list[WithRef]] = []
        # The innermost frame's path and ``with`` items as tuples, shared by the calls made
        # while neither changes; None once one does.
        self._shape: tuple[tuple[Block, ...], tuple[WithRef, ...]] | None = None
        self._statements: list[ast.stmt] = []
        self._class_stack: list[str] = []
        self._order = 0
        self._blocks = 0
        self._seen_imports: set[int] = {id(ref.node) for ref in import_refs}
        # What an import inside a function binds there, the latest one walked winning:
        # ``if apex: from apex.parallel import DDP`` / ``else: from torch.nn.parallel import
        # DDP`` each decide the calls of their own branch ((frame id, local name) -> qname).
        self._frame_imports: dict[tuple[int, str], str] = {}
        self._frame_import_names: set[str] = set()  # the local names those imports bind
        self._work: list[_Work] = []
        # Where the nodes of ``_FLOW_KINDS`` go as they are visited: the list of the top-level
        # function or method (or the module body) whose own code they are, a nested function's
        # body included; None in a class body, a function's decorators, defaults and annotations,
        # and a lambda's defaults, which no value flow reads.
        self.flow_nodes: dict[int, list[ast.AST]] = {}
        self._flow: list[ast.AST] | None = None
        # The markers, made once (a bound method is a new object at each lookup).
        self._leave_block = self._exit
        self._leave_statement: Callable[[], object] = self._statements.pop

    def run(self, module: ast.Module) -> None:
        self._push_frame(module, "<module>")
        self._flow = self.flow_nodes[id(module)] = []
        work = self._work
        work.extend(reversed(module.body))
        visit = self._visit
        enter = self._enter
        try:
            while work:
                item = work.pop()
                if isinstance(item, ast.AST):
                    visit(item)
                elif type(item) is tuple:  # (kind, owner): a block starts
                    enter(*item)
                else:
                    item()  # type: ignore[operator]  # (a marker: ``type(item) is tuple`` does not narrow it)
        finally:
            del self._leave_block  # a method of this walk held by it: a cycle (``AmpFacts.release``)

    # ---- scheduling ---------------------------------------------------------------------

    def _schedule(self, items: list[_Work]) -> None:
        """Visit ``items`` (nodes and markers) next, in the given order."""
        self._work.extend(reversed(items))

    def _block(self, kind: str, owner: ast.AST, body: Sequence[ast.AST]) -> list[_Work]:
        if not body:
            return []
        return [(kind, owner), *body, self._leave_block]

    def _visit(self, node: ast.AST) -> None:
        kind = type(node)
        if kind in _FLOW_KINDS and self._flow is not None:
            self._flow.append(node)
        handler = _HANDLERS.get(kind)
        if handler is not None:
            if handler(self, node):
                return
        # Names and constants record nothing here: not visiting them saves half the work.
        inner: list[Any] = children_except(node, _LEAVES)  # nodes, then a marker
        if kind in _STATEMENTS:
            self._statements.append(node)  # type: ignore[arg-type]  # (a statement: its type is in _STATEMENTS)
            inner.append(self._leave_statement)
        self._work.extend(reversed(inner))

    # ---- frames -------------------------------------------------------------------------

    def _push_frame(self, node: ast.AST, name: str) -> Frame:
        parent = self._frame_stack[-1] if self._frame_stack else None
        frame = Frame(node, name, self._class_stack[-1] if self._class_stack else None, parent)
        self.frames.append(frame)
        self._frame_stack.append(frame)
        self._path_stack.append([])
        self._with_stack.append([])
        self._shape = None
        return frame

    def _pop_frame(self) -> None:
        self._frame_stack.pop()
        self._path_stack.pop()
        self._with_stack.pop()
        self._shape = None

    def _enter(self, kind: str, node: ast.AST) -> None:
        self._blocks += 1
        self._path_stack[-1].append(Block(kind, node, self._blocks))
        self._shape = None

    def _exit(self) -> None:
        self._path_stack[-1].pop()
        self._shape = None

    # ---- handlers: return True when they scheduled the children themselves -----------------

    def _decorators(self, decorators: list[ast.expr]) -> None:
        for expr in decorators:
            if type(expr) is not ast.Attribute:  # attribute chains are recorded as they are visited
                name = qualify(expr, self.imports)
                if name is not None:
                    self.references.append((expr, name))

    def _class_def(self, node: ast.ClassDef) -> bool:
        bases = tuple(q for q in (qualify(b, self.imports) or dotted(b) for b in node.bases) if q)
        self.classes.append((node, bases))
        self._decorators(node.decorator_list)
        self._class_stack.append(node.name)
        self._statements.append(node)
        outer = self._flow
        self._flow = None

        def leave() -> None:
            self._class_stack.pop()
            self._statements.pop()
            self._flow = outer

        self._schedule([*node.decorator_list, *node.bases, *node.keywords, *node.body, leave])
        return True

    def _function_def(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        self._statements.append(node)
        self._decorators(node.decorator_list)
        outer = self._flow
        self._flow = None

        def enter_body() -> None:
            # Decorators and default values belong to the enclosing frame; the body is new.
            frame = self._push_frame(node, node.name)
            self.functions.append((node, frame))
            # A decorated function runs its body inside the decorator's region, if it is one.
            self._with_stack[-1].extend(WithRef(d, decorator=True) for d in node.decorator_list)
            self._shape = None
            # A function defined in the module body or a class of it has its own flow; a nested
            # one is part of the flow of the function around it (none inside a nested class).
            parent = frame.parent
            if parent is not None and parent.parent is None:
                self._flow = self.flow_nodes[id(node)] = []
            else:
                self._flow = outer

        def leave_body() -> None:
            self._pop_frame()
            self._flow = outer

        head: list[_Work] = [*node.decorator_list, node.args]
        if node.returns is not None:
            head.append(node.returns)
        self._schedule([*head, enter_body, *node.body, leave_body, self._leave_statement])
        return True

    def _lambda(self, node: ast.Lambda) -> bool:
        # As the generic visit, with the defaults left out of the flow and the body in it.
        outer = self._flow
        self._flow = None

        def enter_body() -> None:
            self._flow = outer

        items: list[_Work] = [node.args, enter_body]
        if type(node.body) not in _LEAVES:
            items.append(node.body)
        self._schedule(items)
        return True

    def _declaration(self, node: ast.Global | ast.Nonlocal) -> bool:
        frame = self._frame_stack[-1]
        if frame.declared is None:
            frame.declared = {}
        frame.declared.update(dict.fromkeys(node.names, type(node) is ast.Global))
        return True

    def _loop(self, node: ast.For | ast.AsyncFor | ast.While) -> bool:
        self._statements.append(node)
        head = [node.test] if isinstance(node, ast.While) else [node.target, node.iter]
        self._schedule([*head, *self._block("loop", node, node.body), *node.orelse, self._leave_statement])
        return True

    def _if(self, node: ast.If) -> bool:
        self._statements.append(node)
        self._schedule(
            [
                node.test,
                *self._block("if", node, node.body),
                *self._block("else", node, node.orelse),
                self._leave_statement,
            ]
        )
        return True

    def _try(self, node: ast.Try | ast.TryStar) -> bool:
        self._statements.append(node)
        items = [*self._block("try", node, node.body)]
        for handler in node.handlers:
            items.extend(self._block("except", handler, [*([handler.type] if handler.type else []), *handler.body]))
        items.extend(node.orelse)
        items.extend(self._block("finally", node, node.finalbody))
        self._schedule([*items, self._leave_statement])
        return True

    def _match(self, node: ast.Match) -> bool:
        self._statements.append(node)
        items: list[_Work] = [node.subject]
        for case in node.cases:
            body = [case.pattern, *([case.guard] if case.guard is not None else []), *case.body]
            items.extend(self._block("match", case, body))
        self._schedule([*items, self._leave_statement])
        return True

    def _with(self, node: ast.With | ast.AsyncWith) -> bool:
        self._statements.append(node)
        refs = [WithRef(item.context_expr) for item in node.items]

        def enter_body() -> None:
            self._with_stack[-1].extend(refs)
            self._shape = None

        def leave_body() -> None:
            del self._with_stack[-1][-len(refs) :]
            self._shape = None

        heads = [part for item in node.items for part in (item.context_expr, item.optional_vars) if part is not None]
        self._schedule([*heads, enter_body, *node.body, leave_body, self._leave_statement])
        return True

    def _import(self, node: ast.Import | ast.ImportFrom) -> bool:
        frame = self._frame_stack[-1] if self._frame_stack else None
        if frame is not None and frame.parent is not None:
            for _alias, local, qname, _module in _import_bindings(node):
                self._frame_imports[(id(frame), local)] = qname
                self._frame_import_names.add(local)
        if id(node) not in self._seen_imports:
            self._seen_imports.add(id(node))
            fallback = any(block.kind == "except" for block in self._path_stack[-1])
            for alias, local, qname, module in _import_bindings(node):
                self.imports.setdefault(local, qname)
                self.import_refs.append(ImportRef(node, alias, local, qname, module, fallback))
        return True

    def _assign(self, node: ast.Assign | ast.AnnAssign) -> bool:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self._record_assignment(target, node.value)
                if type(target) is ast.Subscript:
                    mapping = dotted(target.value)
                    if mapping is not None:
                        self.item_assignments.append((mapping, node, self._frame_stack[-1]))
        elif node.value is not None:
            self._record_assignment(node.target, node.value)
        return False

    def _record_assignment(self, target: ast.expr, value: ast.expr) -> None:
        name = dotted(target)
        if name is None:
            if (type(target) is ast.Tuple or type(target) is ast.List) and (
                type(value) is ast.Tuple or type(value) is ast.List
            ):
                for t, v in zip(target.elts, value.elts):
                    self._record_assignment(t, v)
            return
        frame = self._frame_stack[-1]
        self._order += 1
        self.assignments.append(Assignment(name, value, frame, self._order))
        # ``autocast = torch.autocast`` at module level is an alias like an import.
        if frame.parent is None and "." not in name:
            target_q = qualify(value, self.imports)
            if target_q and name not in self.imports:
                self.imports[name] = target_q

    def _frame_qualified(self, spelled: str, frame: Frame, qname: str | None) -> str | None:
        """``qname``, unless an import in the function (or one around it) binds the call's
        head name: then what the latest such import walked binds it to."""
        head, _, rest = spelled.partition(".")
        current: Frame | None = frame
        while current is not None and current.parent is not None:
            bound = self._frame_imports.get((id(current), head))
            if bound is not None:
                return f"{bound}.{rest}" if rest else bound
            current = current.parent
        return qname

    def _call(self, node: ast.Call) -> bool:
        frame = self._frame_stack[-1]
        self._order += 1
        func = node.func
        kind = type(func)
        receiver = method = spelled = None
        if type(func) is ast.Attribute:
            method = func.attr
            receiver = dotted(func.value)
            if receiver is not None:
                spelled = f"{receiver}.{method}"
        elif type(func) is ast.Name:
            spelled = func.id
        qname = qualify_spelled(spelled, self.imports) if spelled is not None else None
        if spelled is not None and self._frame_import_names and spelled.partition(".")[0] in self._frame_import_names:
            qname = self._frame_qualified(spelled, frame, qname)
        shape = self._shape
        if shape is None:
            shape = self._shape = (tuple(self._path_stack[-1]), tuple(self._with_stack[-1]))
        site = CallSite(
            node=node,
            qname=qname,
            receiver=receiver,
            method=method,
            frame=frame,
            path=shape[0],
            withs=shape[1],
            order=self._order,
            statement=self._statements[-1] if self._statements else node,
            spelled=spelled,
        )
        frame.calls.append(site)
        self.calls.append(site)
        if spelled is None:
            return False  # the callee is an expression of its own (a call's result, a subscript)
        # The callee is a chain of names: record it as ``_attribute`` would, without spelling
        # it again, and visit the arguments.
        if qname is not None and kind is ast.Attribute:
            self.references.append((func, qname))
        arguments: list[ast.AST] = [arg for arg in node.args if type(arg) not in _LEAVES]
        arguments.extend(node.keywords)
        self._work.extend(reversed(arguments))
        return True

    def _attribute(self, node: ast.Attribute) -> bool:
        name = dotted(node)
        if name is None:
            return False  # a chain over a call or a subscript: what is inside is visited
        resolved = qualify_spelled(name, self.imports)
        if resolved is not None:
            self.references.append((node, resolved))
        # A chain of names holds nothing further to record (its shorter chains share its head,
        # so none of them resolves when it does not).
        return True


_LEAVES = (ast.Name, ast.Constant)
# The nodes a function's value flow starts from (``flow_nodes``).
_FLOW_KINDS = frozenset(
    {
        ast.Assign,
        ast.AnnAssign,
        ast.AugAssign,
        ast.For,
        ast.AsyncFor,
        ast.With,
        ast.AsyncWith,
        ast.Return,
        ast.Yield,
        ast.YieldFrom,
        ast.Global,
        ast.NamedExpr,
        ast.comprehension,
        ast.Call,
    }
)
# Every statement type (the walk keeps the innermost statement around each call).
_STATEMENTS = frozenset(cls for cls in vars(ast).values() if isinstance(cls, type) and issubclass(cls, ast.stmt))
_HANDLERS: dict[type, Callable[[_FactWalk, Any], bool]] = {
    ast.ClassDef: _FactWalk._class_def,
    ast.FunctionDef: _FactWalk._function_def,
    ast.AsyncFunctionDef: _FactWalk._function_def,
    ast.For: _FactWalk._loop,
    ast.AsyncFor: _FactWalk._loop,
    ast.While: _FactWalk._loop,
    ast.If: _FactWalk._if,
    ast.Try: _FactWalk._try,
    ast.With: _FactWalk._with,
    ast.AsyncWith: _FactWalk._with,
    ast.Import: _FactWalk._import,
    ast.ImportFrom: _FactWalk._import,
    ast.Assign: _FactWalk._assign,
    ast.AnnAssign: _FactWalk._assign,
    ast.Call: _FactWalk._call,
    ast.Attribute: _FactWalk._attribute,
    ast.Lambda: _FactWalk._lambda,
    ast.Global: _FactWalk._declaration,
    ast.Nonlocal: _FactWalk._declaration,
}
if hasattr(ast, "TryStar"):
    _HANDLERS[ast.TryStar] = _FactWalk._try
if hasattr(ast, "Match"):
    _HANDLERS[ast.Match] = _FactWalk._match


def _prescan_imports(module: ast.Module) -> tuple[dict[str, str], list[ImportRef]]:
    """Module-level imports first (also inside top-level if/try), so order of use is irrelevant."""
    imports: dict[str, str] = {}
    refs: list[ImportRef] = []
    _scan_imports(module.body, False, imports, refs)
    if "torch" not in imports and any(
        type(stmt) is ast.ImportFrom and any(alias.name == "*" for alias in stmt.names) for stmt in module.body
    ):
        # ``from .nets import *`` and ``torch.save(...)`` with no import of torch: the star
        # import is what binds the name (no other module of a training project calls its
        # module ``torch``).
        imports["torch"] = "torch"
    return imports, refs


def _scan_imports(body: Sequence[ast.stmt], fallback: bool, imports: dict[str, str], refs: list[ImportRef]) -> None:
    # (Not a closure that calls itself: a reference cycle, which would hold the import records
    # until the cyclic collector runs: ``AmpFacts.release``.)
    for stmt in body:
        if type(stmt) is ast.Import or type(stmt) is ast.ImportFrom:
            for alias, local, qname, mod in _import_bindings(stmt):
                imports.setdefault(local, qname)
                refs.append(ImportRef(stmt, alias, local, qname, mod, fallback))
        elif type(stmt) is ast.If:
            _scan_imports(stmt.body, fallback, imports, refs)
            _scan_imports(stmt.orelse, fallback, imports, refs)
        elif is_try(stmt):
            _scan_imports(stmt.body, fallback, imports, refs)
            for handler in stmt.handlers:
                _scan_imports(handler.body, True, imports, refs)


def build_facts(module: ast.Module, source: str, seeds: dict[str, Any] | None = None) -> AmpFacts:
    """The module's AmpFacts; ``seeds``: what the project analysis knows of it (regions opened
    by contexts made elsewhere, calls that clip in another function: ``project/seeds.py``)."""
    imports, refs = _prescan_imports(module)
    visitor = _FactWalk(imports, refs)
    visitor.run(module)
    facts = AmpFacts(
        module=module,
        source=source,
        imports=visitor.imports,
        import_refs=visitor.import_refs,
        frames=visitor.frames,
        calls=visitor.calls,
        regions=[],
        assignments=visitor.assignments,
        references=visitor.references,
        classes=visitor.classes,
        functions=visitor.functions,
        item_assignments=visitor.item_assignments,
    )
    facts.flow_nodes = visitor.flow_nodes
    facts.seeds = seeds
    resolve_regions(facts)
    find_scalers_and_optimizers(facts)
    classify_events(facts)
    return facts
