"""Names and imports for the apex migration (libcst): which local names are apex's, and the
import statements once the calls are gone (unused apex imports removed, with an
``except ImportError`` around them; ``apex.parallel``'s DistributedDataParallel from torch;
``import torch`` added when missing). Imported only when the fix is applied."""

from __future__ import annotations

import re

import libcst as cst

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Sequence

    # What a block's body holds (libcst's BaseStatement declares no leading_lines).
    Statement = cst.SimpleStatementLine | cst.BaseCompoundStatement


def dotted_name(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted_name(node.value)
        return None if base is None else f"{base}.{node.attr.value}"
    return None


def import_path(node: cst.BaseExpression) -> str:
    return dotted_name(node) or ""


class ApexNames:
    """Local names bound to apex by the module's imports → what they are (``apex.amp``, ...)."""

    def __init__(self, module: cst.Module) -> None:
        self.locals: dict[str, str] = {}
        for node in walk_imports(module):
            if isinstance(node, cst.Import):
                for alias in node.names:
                    path = import_path(alias.name)
                    if path == "apex" or path.startswith("apex."):
                        if alias.asname is not None:
                            self.locals[bound_name(alias.asname)] = path
                        else:
                            self.locals["apex"] = "apex"
            elif isinstance(node, cst.ImportFrom) and node.module is not None and not node.relative:
                path = import_path(node.module)
                if (path == "apex" or path.startswith("apex.")) and not isinstance(node.names, cst.ImportStar):
                    for alias in node.names:
                        local = (
                            bound_name(alias.asname) if alias.asname else cst.ensure_type(alias.name, cst.Name).value
                        )
                        self.locals[local] = f"{path}.{import_path(alias.name)}"

    def qualify(self, node: cst.BaseExpression) -> str | None:
        dotted = dotted_name(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head not in self.locals:
            return None
        return f"{self.locals[head]}.{rest}" if rest else self.locals[head]


def bound_name(asname: cst.AsName) -> str:
    """The name an import's ``as`` binds (in an import, always a plain name)."""
    return cst.ensure_type(asname.name, cst.Name).value


def walk_imports(module: cst.Module) -> list[cst.Import | cst.ImportFrom]:
    found: list[cst.Import | cst.ImportFrom] = []

    class Collect(cst.CSTVisitor):
        def visit_Import(self, node: cst.Import) -> None:
            found.append(node)

        def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
            found.append(node)

    module.visit(Collect())
    return found


def code_of(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def spelling_of(node: cst.CSTNode) -> str:
    """Code without brackets and whitespace, to compare ``(a, b)`` with ``[a, b]``."""
    return re.sub(r"[\s()\[\]]", "", code_of(node))


def parse_line(code: str) -> cst.SimpleStatementLine:
    return cst.ensure_type(cst.parse_statement(code + "\n"), cst.SimpleStatementLine)


def is_docstring(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, cst.SimpleString)
    )


def tidy_imports(module: cst.Module, names: ApexNames) -> cst.Module:
    used = used_names(module, names)
    tidy = _TidyImports(names, used)
    module = module.visit(tidy)
    if "torch" not in _bound_names(module):
        module = _add_import_torch(module)
    return module


def used_names(module: cst.Module, names: ApexNames | None = None) -> set[str]:
    """Names the module reads (imports aside; with ``names``, a ``try`` that only imports apex
    and its ``except ImportError`` fallback aside too)."""
    used: set[str] = set()

    class Uses(cst.CSTVisitor):
        def visit_Try(self, node: cst.Try) -> bool:
            return names is None or not _guards_apex_import(node, names)

        def visit_Import(self, node: cst.Import) -> bool:
            return False

        def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
            return False

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            node.value.visit(self)  # ``torch.amp``: ``amp`` here is an attribute, not a name
            return False

        def visit_Name(self, node: cst.Name) -> None:
            used.add(node.value)

    module.visit(Uses())
    return used


def _guards_apex_import(node: cst.Try, names: ApexNames) -> bool:
    """``try: from apex import amp`` with nothing else in the ``try`` body."""
    imports = [small for s in node.body.body if isinstance(s, cst.SimpleStatementLine) for small in s.body]
    if not imports or len(imports) != len(node.body.body):
        return False
    for small in imports:
        if isinstance(small, cst.ImportFrom) and small.module is not None:
            if not import_path(small.module).startswith("apex"):
                return False
        elif isinstance(small, cst.Import):
            if not all(import_path(a.name).split(".")[0] == "apex" for a in small.names):
                return False
        else:
            return False
    return True


def _bound_names(module: cst.Module) -> set[str]:
    bound = set()
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        bound.add(bound_name(alias.asname) if alias.asname else import_path(alias.name).split(".")[0])
    return bound


class _TidyImports(cst.CSTTransformer):
    def __init__(self, names: ApexNames, used: set[str]) -> None:
        super().__init__()
        self.names = names
        self.used = used
        # id → node: holding the nodes keeps their ids from being reused by later nodes.
        self.emptied: dict[int, cst.CSTNode] = {}

    def _keep(self, local: str) -> bool:
        return local not in self.names.locals or local in self.used

    def leave_Import(
        self, original: cst.Import, updated: cst.Import
    ) -> cst.BaseSmallStatement | cst.FlattenSentinel[cst.BaseSmallStatement] | cst.RemovalSentinel:
        kept = [
            a
            for a in updated.names
            if self._keep(a.asname.name.value if a.asname else import_path(a.name).split(".")[0])  # type: ignore[union-attr]
        ]
        return self._result(updated, kept)

    def leave_ImportFrom(
        self, original: cst.ImportFrom, updated: cst.ImportFrom
    ) -> cst.BaseSmallStatement | cst.FlattenSentinel[cst.BaseSmallStatement] | cst.RemovalSentinel:
        if isinstance(updated.names, cst.ImportStar):
            return updated
        # (In ``from m import a as b``, ``a`` and ``b`` are names.)
        kept = [a for a in updated.names if self._keep(a.asname.name.value if a.asname else a.name.value)]  # type: ignore[union-attr, arg-type]
        module = import_path(updated.module) if updated.module is not None else ""
        if module == "apex.parallel" and kept and all(import_path(a.name) == "DistributedDataParallel" for a in kept):
            updated = updated.with_changes(module=cst.parse_expression("torch.nn.parallel"))
        return self._result(updated, kept)

    @staticmethod
    def _result(
        updated: cst.Import | cst.ImportFrom, kept: list[cst.ImportAlias]
    ) -> cst.Import | cst.ImportFrom | cst.RemovalSentinel:
        if not kept:
            return cst.RemoveFromParent()
        # (``updated.names``: a list, never ``*``: ``leave_ImportFrom`` returned that import as it was.)
        if len(kept) == len(updated.names):  # type: ignore[arg-type]
            return updated  # nothing of apex here: the import stays as written, trailing comma too
        if kept[-1] is not updated.names[-1]:  # type: ignore[index]
            # the last name went: the new last one ends as it did (a trailing comma and its
            # line break in a parenthesised list, or nothing)
            kept[-1] = kept[-1].with_changes(comma=updated.names[-1].comma)  # type: ignore[index]
        return updated.with_changes(names=kept)

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel:
        if not updated.body:  # every import of the line went: the block drops the line
            emptied = updated.with_changes(body=[cst.Pass()])
            self.emptied[id(emptied)] = emptied
            return emptied
        return updated

    def leave_Try(
        self, original: cst.Try, updated: cst.Try
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel:
        # ``try: from apex import amp`` / ``except ImportError: ...``: nothing left to guard.
        if all(is_pass(s) for s in updated.body.body):
            emptied = parse_line("pass").with_changes(leading_lines=updated.leading_lines)
            self.emptied[id(emptied)] = emptied
            return emptied
        return updated

    def leave_If(
        self, original: cst.If, updated: cst.If
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel:
        # ``if fp16: try: from apex import amp ...``: the ``if`` guarded only what went.
        emptied = all(is_pass(s) for s in updated.body.body) and not all(is_pass(s) for s in original.body.body)
        if emptied and updated.orelse is None:
            replacement = parse_line("pass").with_changes(leading_lines=updated.leading_lines)
            self.emptied[id(replacement)] = replacement
            return replacement
        return updated

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.BaseSuite:
        return updated.with_changes(body=self._without_emptied(updated.body) or [parse_line("pass")])  # type: ignore[arg-type]

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        return updated.with_changes(body=self._without_emptied(updated.body))

    def _without_emptied(self, body: Sequence[Statement]) -> list[Statement]:
        """The statements but the emptied ones; their leading blank lines and comments stay."""
        kept: list[Statement]
        carried: list[cst.EmptyLine]
        kept, carried = [], []
        for statement in body:
            if id(statement) in self.emptied:
                carried.extend(statement.leading_lines)
                continue
            if carried:
                if any(line.comment is None for line in statement.leading_lines):
                    carried = [line for line in carried if line.comment is not None]  # no double gaps
                statement = statement.with_changes(leading_lines=[*carried, *statement.leading_lines])
                carried = []
            kept.append(statement)
        return kept


def is_main_guard(node: cst.If) -> bool:
    test = node.test
    return (
        isinstance(test, cst.Comparison)
        and isinstance(test.left, cst.Name)
        and test.left.value == "__name__"
        and len(test.comparisons) == 1
        and isinstance(test.comparisons[0].comparator, cst.SimpleString)
        and test.comparisons[0].comparator.evaluated_value == "__main__"
    )


def is_pass(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(isinstance(s, cst.Pass) for s in statement.body)


def _add_import_torch(module: cst.Module) -> cst.Module:
    body = list(module.body)
    at = 0
    for index, statement in enumerate(body):
        if is_docstring(statement) and index == 0:
            at = 1
        elif isinstance(statement, cst.SimpleStatementLine) and isinstance(
            statement.body[0], (cst.Import, cst.ImportFrom)
        ):
            if (
                isinstance(statement.body[0], cst.ImportFrom)
                and import_path(statement.body[0].module or cst.Name("x")) == "__future__"
            ):
                at = index + 1
                continue
            at = index
            break
    body.insert(at, parse_line("import torch"))
    return module.with_changes(body=body)
