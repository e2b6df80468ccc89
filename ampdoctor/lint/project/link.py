"""The link step: from a call in one module to the function of the project it lands in.

Resolution follows only what the project itself shows, to a bounded depth:

* a function of the same module, or a name imported from a module of the project (absolute
  imports are looked up beside the importing file, above the importer's own top-level package
  when the import names it, at the project root and under ``src/``, as running a script or an
  installed package would find them; relative imports from the importer's package:
  ``module_paths.py``), through re-exports (``from .io import save_checkpoint`` in a package's
  ``__init__``) and module-level aliases (``save = utils.save_checkpoint``);
* ``module.f(...)`` for an imported module of the project;
* ``self.m(...)`` and ``cls.m(...)`` in a method: the class's own method or one of its bases'
  (bases defined or imported in the project);
* ``x.m(...)`` where ``x = SomeClass(...)`` is bound once in the same function or at module
  level, and ``self.x.m(...)`` where a method of the class binds ``self.x = SomeClass(...)``;
* for what a call runs (``resolve_run``), also such an object called as a function
  (``model(x)``, ``self.attn(x)``, ``self(x)``): its class's ``forward``.

Anything else (a parameter's method, a dynamic attribute, a name bound twice, a class from a
library) resolves to nothing, and the cross-module rules stay silent about it.

A call is first resolved on the outlines of the modules not yet summarized (``outline.py``: what
their text says for certain). Most calls land nowhere in the project (a method of a library base
class, reached through a project class in a module of thousands of lines); that walk proves it
without parsing those modules. Wherever the text is not certain, or the call lands in a project
function, the call is resolved again on summaries.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from ...records import Record
from .module_paths import ModulePaths
from .outline import Outline, Uncertain
from .packed_calls import calls as calls_of
from .packed_calls import region_calls as region_calls_of
from .tokens import class_statements, import_targets

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from .shapes import ArgumentRecord, CallLike, CallRecord, FunctionSummary, ModuleSummary

MAX_DEPTH = 4

SummaryLoader = Callable[[str], "ModuleSummary | None"]
# A module's outline (its text), or None where its summary is at hand or the text cannot be read.
OutlineLoader = Callable[[str], "Outline | None"]
TextLoader = Callable[[str], "bytes | None"]
ImportsLoader = Callable[[str], "list[tuple[str, bool]]"]
ClassesLoader = Callable[[str], "list[tuple[str, tuple[str, ...]]]"]
# (module, name, pattern) -> whether the module certainly defines the function ``name`` (``f``
# or ``Class.method``) with no match of ``pattern`` in its text (``store.defines_without``).
TextTest = Callable[[str, str, "re.Pattern[bytes]"], bool]
# module -> whether a walk may land in its functions (``resolve_call``'s ``gate``).
ModuleGate = Callable[[str], bool]


class Target(Record):
    """A resolved call: the module (project-relative POSIX path), the function's qualified name
    in it, its summary, and how many leading parameters the call does not pass (``self``)."""

    __slots__ = ("function", "module", "name", "skip")

    def __init__(self, module: str, name: str, function: FunctionSummary, skip: int) -> None:
        self.module = module
        self.name = name
        self.function = function
        self.skip = skip

    def arg_for(self, call: CallRecord, param_index: int) -> ArgumentRecord | None:
        """The argument record of ``call`` bound to the parameter at ``param_index``."""
        params = self.function.get("params", [])
        if param_index >= len(params):
            return None
        name = params[param_index]
        for arg in call.get("args", []):
            if arg.get("kw") == name or ("pos" in arg and arg["pos"] + self.skip == param_index):
                return arg
        return None


def _frame_of(call: Mapping[str, object]) -> str:
    """The function a call record is made in (a flow's records have none: ``<module>``)."""
    frame = call.get("frame")
    return frame if isinstance(frame, str) else "<module>"


class _Summarized:
    """A summary, asked the questions an ``Outline`` answers."""

    __slots__ = ("summary",)

    def __init__(self, summary: ModuleSummary) -> None:
        self.summary = summary

    def has_function(self, qualname: str) -> bool:
        return qualname in self.summary.get("functions", {})

    def class_bases(self, name: str) -> list[str] | None:
        info = self.summary.get("classes", {}).get(name)
        return None if info is None else info.get("bases", [])

    def alias(self, name: str) -> str | None:
        return self.summary.get("aliases", {}).get(name)

    def import_of(self, name: str) -> str | None:
        return self.summary.get("imports", {}).get(name)


class _Gated:
    """A module's outline, asked for its names only: no function of it is one a call lands in."""

    __slots__ = ("outline",)

    def __init__(self, outline: Outline) -> None:
        self.outline = outline

    def has_function(self, qualname: str) -> bool:
        return False

    def class_bases(self, name: str) -> list[str] | None:
        try:
            return self.outline.class_bases(name)
        except Uncertain:
            return None

    def alias(self, name: str) -> str | None:
        try:
            return self.outline.alias(name)
        except Uncertain:
            return None

    def import_of(self, name: str) -> str | None:
        try:
            return self.outline.import_of(name)
        except Uncertain:
            return None


class Project(Record):
    """The files of one project and a way to read their summaries.

    ``files``: project-relative POSIX paths of every Python module; ``load(rel)``: the summary of
    one of them (read from the cache or made on demand), None when it cannot be read or parsed;
    ``text_test``: a look at a module's text that spares summarizing it (see ``resolve_call``);
    ``outline``: a module's outline, to resolve a call before summarizing the modules it passes;
    ``text``: a module's bytes, None when it cannot be read; ``import_list``: a module's
    imports as ``tokens.import_targets`` reads them (from its text when not given);
    ``class_list``: its class statements as ``tokens.class_statements`` reads them (likewise).
    """

    __slots__ = (
        "_callees",
        "_gate",
        "_outlines",
        "_import_edges",
        "_maybe_function",
        "_paths",
        "_summaries",
        "_text_first",
        "_without",
        "__weakref__",  # the import index holds it weakly (``float16_reach.import_edges``)
        "class_list",
        "files",
        "import_list",
        "load",
        "modules",
        "outline",
        "text",
        "text_test",
    )

    def __init__(
        self,
        files: set[str],
        load: SummaryLoader,
        text_test: TextTest | None = None,
        outline: OutlineLoader | None = None,
        text: TextLoader | None = None,
        import_list: ImportsLoader | None = None,
        class_list: ClassesLoader | None = None,
    ) -> None:
        self.files = files
        self.load = load
        self.text_test = text_test
        self.outline = outline
        self.text = text
        self.import_list = import_list
        self.class_list = class_list
        self._summaries: dict[str, ModuleSummary | None] = {}
        # module → its calls, their callees' spellings joined, and each spelling's positions
        self._callees: dict[str, tuple[list[CallRecord], str, dict[str, list[int]]]] = {}
        self.modules = ModulePaths(files)  # which module an import names (``module_paths.py``)
        self._outlines: dict[str, Outline | None] = {}
        self._paths: dict[str, tuple[str, ...]] = {}
        self._import_edges: object = None  # the checks' import index (``float16_reach.import_edges``)
        self._without: re.Pattern[bytes] | None = None
        self._gate: ModuleGate | None = None
        self._text_first = False
        # While a walk on outlines asks only whether a spelling names a class: whether a
        # function the outlines could not rule out was passed over (None: not asked).
        self._maybe_function: bool | None = None

    def class_statements(self, rel: str) -> list[tuple[str, tuple[str, ...]]]:
        """The module's class statements: each class's name and its bases' last names."""
        if self.class_list is not None:
            return self.class_list(rel)
        data = self.text(rel) if self.text is not None else None
        return class_statements(data) if data else []

    def imports(self, rel: str) -> list[tuple[str, bool]]:
        """The dotted targets of the module's imports, each with whether it is a plain ``import``."""
        if self.import_list is not None:
            return self.import_list(rel)
        data = self.text(rel) if self.text is not None else None
        return import_targets(data) if data else []

    def summary(self, rel: str) -> ModuleSummary | None:
        if rel not in self._summaries:
            self._summaries[rel] = self.load(rel) if rel in self.files else None
        return self._summaries[rel]

    def _view(self, rel: str) -> Outline | _Summarized | _Gated | None:
        """What the walk reads of a module: its outline while resolving on text (for a module
        not summarized yet), else its summary; a module not summarized yet that the caller's
        gate turns away is read for its names only (no function of it is landed in)."""
        gate = self._gate
        if gate is not None and rel not in self._summaries and rel in self.files and self.outline is not None:
            if not gate(rel):
                if rel not in self._outlines:
                    self._outlines[rel] = self.outline(rel)
                outline = self._outlines[rel]
                return _Gated(outline) if outline is not None else None
        if self._text_first and self.outline is not None and rel not in self._summaries and rel in self.files:
            if rel not in self._outlines:
                self._outlines[rel] = self.outline(rel)
            found = self._outlines[rel]
            if found is not None:
                return found
        summary = self.summary(rel)
        return None if summary is None else _Summarized(summary)

    # ---- modules ----------------------------------------------------------------------------

    def find_module(self, importer: str, target: str) -> tuple[str, list[str]] | None:
        """The module file ``target`` (a dotted import target) names, seen from ``importer``,
        and the attribute parts left after it: ``("pkg/utils.py", ["save_checkpoint"])``."""
        modules = self.modules
        if not target.startswith(".") and not modules.may_hold(target):
            return None  # ``torch``, ``numpy``: no file or folder of the project has the name
        return modules.find(importer, target, self._search_paths(importer))

    def _search_paths(self, importer: str) -> tuple[str, ...]:
        """Folders the importer adds to ``sys.path`` (``sys.path.append(os.path.join(here,
        "train"))``), project-relative: its summary's ``paths``, ``+name`` beside the importer
        or at the root, ``^n`` the folder ``n`` levels above the importer's."""
        known = self._paths.get(importer)
        if known is not None:
            return known
        self._paths[importer] = ()
        summary = self._summaries.get(importer) if importer in self._summaries else None
        paths = [(importer, p) for p in (summary.get("paths") or [])] if summary else []
        # ``import _init_paths``: a module of the project imported for what it adds to the path.
        for target, plain in self.imports(importer) if summary else ():
            if not plain:
                continue
            found = self.find_module(importer, target)
            if found is None or found[1]:
                continue
            data = self.text(found[0]) if self.text is not None else None
            if data and b"sys.path" in data:
                other = self.summary(found[0])
                paths.extend((found[0], p) for p in (other or {}).get("paths") or [])
        out: list[str] = []
        for where, path in paths:
            folders = where.split("/")[:-1]
            if path.startswith("^"):
                up = int(path[1:])
                if up <= len(folders):
                    out.append("/".join(folders[: len(folders) - up]))
            else:
                parts = [p for p in path[1:].split("/") if p and p != "."]
                up = 0
                while parts and parts[0] == "..":
                    parts.pop(0)
                    up += 1
                if ".." in parts or up > len(folders):
                    continue
                out.append("/".join([*folders[: len(folders) - up], *parts]))
                if not up:
                    out.append("/".join(parts))
        result = tuple(dict.fromkeys(out))
        self._paths[importer] = result
        return result

    # ---- names --------------------------------------------------------------------------------

    def resolve_name(self, module: str, parts: list[str], depth: int = 0) -> tuple[str, str, str] | None:
        """What ``parts`` (an attribute path) names in ``module``: ``(module, qualname, kind)``
        with kind ``"function"`` or ``"class"``."""
        if (
            self._without is not None
            and 0 < len(parts) <= 2
            and module not in self._summaries
            and self.text_test is not None
            and self.text_test(module, ".".join(parts), self._without)
        ):
            return None  # the function it names does nothing the caller asks about: not summarized
        view = self._view(module)
        if view is None or not parts or depth > MAX_DEPTH:
            return None
        head = parts[0]
        if len(parts) == 1 and self._has_function(view, head):
            return module, head, "function"
        bases = view.class_bases(head)
        if bases is not None:
            if len(parts) == 1:
                return module, head, "class"
            if len(parts) == 2 and self._has_function(view, f"{head}.{parts[1]}"):
                return module, f"{head}.{parts[1]}", "function"
            return None
        alias = view.alias(head)
        if alias is not None:
            return self.resolve_spelled(module, alias.split(".") + parts[1:], depth + 1)
        target = view.import_of(head)
        if target is not None:
            found = self.find_module(module, target)
            if found is None:
                return None
            other, rest = found
            return self.resolve_name(other, rest + parts[1:], depth + 1) if rest + parts[1:] else None
        return None

    def resolve_spelled(self, module: str, parts: list[str], depth: int = 0) -> tuple[str, str, str] | None:
        """Like ``resolve_name``, for a spelling that may start with an imported module
        (``utils.save_checkpoint``) or with a submodule of one (``pkg.utils.f``)."""
        if depth > MAX_DEPTH:
            return None
        found = self.resolve_name(module, parts, depth)
        if found is not None:
            return found
        view = self._view(module)
        if view is None:
            return None
        target = view.import_of(parts[0])
        if target is None:
            return None
        located = self.find_module(module, ".".join([target, *parts[1:-1]]) if len(parts) > 1 else target)
        if located is None:
            return None
        other, rest = located
        return self.resolve_name(other, rest + parts[-1:], depth + 1) if len(parts) > 1 else None

    def resolve_class_on_text_first(self, module: str, parts: list[str]) -> tuple[str, str] | None:
        """The project class the spelling names (module, qualified name), or None: found on
        outlines first, so that where the modules' texts say for certain what the spelling names
        (or that it names nothing) none of them is summarized for it. A function the outlines
        cannot rule out (a ``def`` of the name, which may be nested) leaves the answer certain
        unless the walk ends at a class: either way the spelling names no class. (On the
        31-repository tree 15 of the constructions the checks followed fell back on the
        summaries for such a function, and summarized 12 modules.)"""
        if self.outline is not None and not self._text_first:
            self._text_first = True
            self._maybe_function = False
            try:
                found = self.resolve_spelled(module, parts)
                if found is None or found[2] != "class":
                    return None
                if not self._maybe_function:
                    return found[0], found[1]
            except Uncertain:
                pass
            finally:
                self._text_first = False
                self._maybe_function = None
        found = self.resolve_spelled(module, parts)
        return (found[0], found[1]) if found is not None and found[2] == "class" else None

    def class_bases_on_text_first(self, module: str, name: str) -> list[str] | None:
        """The bases of the module's class ``name`` as spelled, None where it has no class of
        that name: from the module's outline while it is not summarized, where its text says
        for certain (the subclass index's candidates are read so: on the 31-repository tree the
        checks summarized 37 modules only to read a class's bases)."""
        if self.outline is not None and module not in self._summaries and module in self.files:
            if module not in self._outlines:
                self._outlines[module] = self.outline(module)
            outline = self._outlines[module]
            if outline is not None:
                try:
                    return outline.class_bases(name)
                except Uncertain:
                    pass
        info = (self.summary(module) or {}).get("classes", {}).get(name)
        return None if info is None else info.get("bases", [])

    def _has_function(self, view: Outline | _Summarized | _Gated, qualname: str) -> bool:
        """``view.has_function``; while a walk asks only for a class, a function the outline
        cannot rule out is passed over and noted (``resolve_class_on_text_first``)."""
        try:
            return view.has_function(qualname)
        except Uncertain:
            if self._maybe_function is None:
                raise
            self._maybe_function = True
            return False

    def method(self, module: str, class_name: str, name: str, depth: int = 0) -> tuple[str, str] | None:
        """``Class.name`` in the class or, in order, its bases (project classes only)."""
        view = self._view(module)
        if view is None or depth > MAX_DEPTH:
            return None
        if view.has_function(f"{class_name}.{name}"):
            return module, f"{class_name}.{name}"
        bases = view.class_bases(class_name)
        if bases is None:
            return None
        for base in bases:
            found = self.resolve_spelled(module, base.split("."), depth + 1)
            if found is not None and found[2] == "class":
                result = self.method(found[0], found[1], name, depth + 1)
                if result is not None:
                    return result
        return None

    # ---- calls ----------------------------------------------------------------------------------

    def resolve_call(
        self, module: str, call: CallLike, without: re.Pattern[bytes] | None = None, gate: ModuleGate | None = None
    ) -> Target | None:
        """The project function a call record of ``module`` lands in, or None.

        ``without``: the caller asks only whether the function's text matches this pattern (a
        backward it runs itself); a call that certainly lands in a module-level function whose
        module has no match around it resolves to None without that module being summarized.
        ``gate``: the caller asks only about modules the gate lets through (their text names what
        it looks for); a module not summarized yet that it turns away is landed in by no call.
        """
        self._without = without
        self._gate = gate
        try:
            if self.outline is not None:
                # On outlines first: where that proves the call lands nowhere, or where it lands
                # (in a module already summarized: an outline never says for certain that a
                # function is there), the modules it passes through are not parsed.
                self._text_first = True
                try:
                    found = self._landing(module, call)
                    return None if found is None else self._target(found)
                except Uncertain:
                    pass
                finally:
                    self._text_first = False
            return self._resolve_call(module, call)
        finally:
            self._without = None
            self._gate = None

    def _resolve_call(self, module: str, call: CallLike) -> Target | None:
        found = self._landing(module, call)
        return None if found is None else self._target(found)

    def _target(self, found: tuple[str, str, int]) -> Target | None:
        """The function of a landing (module, qualified name, parameters not passed)."""
        other, name, skip = found
        target_summary = self.summary(other)
        function = target_summary.get("functions", {}).get(name) if target_summary else None
        if function is None:
            return None
        if skip and not function.get("params"):
            return None  # a static method: arguments do not shift
        return Target(other, name, function, skip)

    def _landing(self, module: str, call: CallLike) -> tuple[str, str, int] | None:
        """The module and qualified name of the project function a call lands in, and how many
        leading parameters it does not pass."""
        summary = self.summary(module)
        if summary is None:
            return None
        parts = call["callee"].split(".")
        frame = _frame_of(call)
        own_class = frame.split(".", 1)[0] if "." in frame else None
        found: tuple[str, str] | None = None
        skip = 0
        if parts[0] in ("self", "cls") and own_class is not None:
            if len(parts) == 2:
                found, skip = self.method(module, own_class, parts[1]), 1
            elif len(parts) == 3:
                spelled = summary.get("instances", {}).get(f"{own_class}.self.{parts[1]}")
                found, skip = self._instance_method(module, spelled, parts[2]), 1
        elif len(parts) == 2 and (
            f"{frame}:{parts[0]}" in summary.get("instances", {})
            or f"<module>:{parts[0]}" in summary.get("instances", {})
        ):
            instances = summary["instances"]
            spelled = instances.get(f"{frame}:{parts[0]}") or instances.get(f"<module>:{parts[0]}")
            found, skip = self._instance_method(module, spelled, parts[1]), 1
        else:
            named = self.resolve_spelled(module, parts)
            if named is not None and named[2] == "function":
                found = named[0], named[1]
                # ``Class.method(obj, ...)`` passes self explicitly; a plain function has none.
        if found is None:
            return None
        return found[0], found[1], skip

    def resolve_run(self, module: str, frame: str, spelled: str) -> Target | None:
        """What a call spelled ``spelled`` in ``frame`` runs: the project function it lands in
        (``resolve_call``) or, for an object of a project class called as a function (an
        ``nn.Module``: ``model(x)``, ``self.attn(x)``, ``self(x)``), its class's ``forward``."""
        found = self.resolve_call(module, {"callee": spelled, "frame": frame})
        if found is not None:
            return found
        summary = self.summary(module)
        if summary is None:
            return None
        parts = spelled.split(".")
        own_class = frame.split(".", 1)[0] if "." in frame else None
        instances = summary.get("instances", {})
        method = None
        if parts[0] == "self" and own_class is not None and len(parts) <= 2:
            if len(parts) == 1:
                method = self.method(module, own_class, "forward")
            else:
                method = self._instance_method(module, instances.get(f"{own_class}.self.{parts[1]}"), "forward")
        elif len(parts) == 1:
            spelled_class = instances.get(f"{frame}:{parts[0]}") or instances.get(f"<module>:{parts[0]}")
            method = self._instance_method(module, spelled_class, "forward")
        if method is None:
            return None
        target_summary = self.summary(method[0])
        function = target_summary.get("functions", {}).get(method[1]) if target_summary else None
        return None if function is None else Target(method[0], method[1], function, 1)

    def _instance_method(self, module: str, spelled: str | None, name: str) -> tuple[str, str] | None:
        if spelled is None:
            return None
        found = self.resolve_spelled(module, spelled.split("."))
        if found is None or found[2] != "class":
            return None
        return self.method(found[0], found[1], name)

    def calls(self, module: str) -> list[CallRecord]:
        summary = self.summary(module)
        return calls_of(summary) if summary else []

    def region_calls(self, module: str) -> list[CallRecord]:
        """The module's calls made inside an autocast region."""
        summary = self.summary(module)
        return region_calls_of(summary) if summary else []

    def calls_naming(self, module: str, part: str) -> list[CallRecord]:
        """The module's calls whose callee's spelling contains ``part``, in source order: a
        look-up in an index of the module's distinct spellings, made once (a scan of every call
        for every function asked about was quadratic in the size of a module that defines many
        and calls them)."""
        index = self._callees.get(module)
        if index is None:
            calls = self.calls(module)
            positions: dict[str, list[int]] = {}
            for position, call in enumerate(calls):
                positions.setdefault(call["callee"], []).append(position)
            index = self._callees[module] = (calls, "\n".join(positions), positions)
        calls, joined, positions = index
        if part not in joined:
            return []
        found = sorted(p for callee, at in positions.items() if part in callee for p in at)
        return [calls[p] for p in found]
