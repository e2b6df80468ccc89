"""AMP301 and AMP105 where the autocast is set up in another module.

A module that never mentions float16 runs under it when the project hands its code to a float16
autocast elsewhere:

* Lightning: ``Trainer(precision="16-mixed")`` (``16``, ``"16"``) with ``trainer.fit(model)``,
  where ``model`` is bound once to an object of a project class: the class's
  ``training_step``/``validation_step``/``test_step``/``predict_step`` and ``forward`` run in
  float16 autocast; ``Fabric(precision="16-mixed")`` with ``fabric.setup(model, ...)``: the
  model's ``forward``;
* a float16 autocast region (``with torch.autocast("cuda", dtype=torch.float16,
  enabled=args.fp16)``) around a call to a project function or to an object of a project class
  (``model(x)``: its ``forward``).

From there the functions it runs are followed through the calls the linker resolves
(``Project.resolve_run``: ``self.attn(x)`` where ``__init__`` binds ``self.attn =
Attention(...)``, ``self(x)``, ``self.m(...)``, project functions). A fill with a constant past
float16's range (AMP301) in a function reached that way is reported where it is written, with
the place that turns float16 on as a related location. BCE (AMP105) is banned under CUDA
autocast of either dtype, as the file's own rule has it: it is reported where the autocast is
certainly on CUDA (a region whose device is written out, ``"16-mixed"``, ``"bf16-mixed"`` with
``accelerator="gpu"``). bfloat16 for fills, a dtype or device not written as a literal, a model
whose class the project does not show (a parameter, a factory's result, a registry): silence.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator

from .link import Project, Target
from .reports import Callers, CrossReport, bfloat16_only, names_float16
from .tokens import FLOAT16_AUTOCAST

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from .shapes import CallRecord, FrameworkRun, HalfRisk, ModuleSummary, RegionRecord

# How deep the functions an autocast runs are followed, and how many at most from one entry.
_DEPTH = 6
_BUDGET = 400
# The LightningModule hooks that Lightning's precision plugin runs in autocast.
_STEPS = ("training_step", "validation_step", "test_step", "predict_step", "forward")
_EFFECT = {
    "torch.where": "selected into a float16 tensor it becomes ±inf, and a fully masked row turns into NaN",
}
_RAISES = "torch raises 'value cannot be converted to type at::Half without overflow'"


class _Entry:
    """Where float16 autocast starts running project code: the function, the place that turns
    float16 on, the call that hands the code over, and whether BCE raises there (CUDA)."""

    __slots__ = ("call", "call_note", "codes", "function", "module", "note", "where")

    def __init__(
        self,
        function: Target | None,
        module: str,
        where: tuple[list[int], str],
        call: tuple[list[int], str],
        codes: set[str],
    ) -> None:
        # None: an *open* entry, a model whose class the project does not name (a factory's, a
        # registry's, a parameter's): any module the entry's module imports may be what it runs.
        self.function = function
        self.module = module
        self.where, self.note = where
        self.call, self.call_note = call
        self.codes = codes  # what it breaks: AMP301 (float16), AMP105 (autocast on CUDA)


def float16_elsewhere(
    project: Project, targets: list[str], callers: Callers, codes: frozenset[str], lazy: Iterable[str] = ()
) -> Iterator[CrossReport]:
    """``targets``: named modules already summarized; ``lazy``: named modules whose text holds a
    risk, summarized only if an entry's walk reaches them."""
    risky = _risks(project, targets, codes)
    candidates = {module for module, _name, _risk in risky} | set(lazy)
    if not candidates:
        return
    runs = _runs(project, callers, candidates)
    if not runs:
        return
    reached_modules = {module for _entry, reached in runs for module, _name in reached}
    risky.extend(_risks(project, [module for module in lazy if module in reached_modules], codes))
    for module, name, risk in risky:
        entry = next((e for e, reached in runs if (module, name) in reached and risk["code"] in e.codes), None)
        if entry is not None:
            yield _report(module, risk, entry)


def _risks(project: Project, modules: Iterable[str], codes: frozenset[str]) -> list[tuple[str, str, HalfRisk]]:
    found = []
    for module in modules:
        summary = project.summary(module)
        for name, function in (summary or {}).get("functions", {}).items():
            for risk in function.get("half_risks", []):
                if risk["code"] in codes:
                    found.append((module, name, risk))
    return found


def _runs(project: Project, callers: Callers, risky: set[str]) -> list[tuple[_Entry, set[tuple[str, str]]]]:
    """Each place the project runs its code under float16 autocast, with the functions run
    (from the modules that can reach one of the ``risky`` modules at all)."""
    imports = import_edges(project)
    precision = set(callers.with_class("precision"))
    autocast = {root for root in callers.with_class(FLOAT16_AUTOCAST) if root not in precision}
    roots = sorted(precision | autocast)
    found = []
    memo: dict[tuple[str, str], set[tuple[str, str]]] = {}
    live: dict[str, set[str]] = {}
    for root in roots:
        for entry in _entries(project, root):
            if entry.function is None:
                found.append((entry, _opened(project, imports, root, risky, callers, live)))
                continue
            if not imports.may_reach(root, risky):
                continue
            key = (entry.function.module, entry.function.name)
            if key not in memo:
                memo[key] = _reached(project, entry.function)
            found.append((entry, memo[key]))
    return found


def _opened(
    project: Project, imports: _Imports, root: str, risky: set[str], callers: Callers, live: dict[str, set[str]]
) -> set[tuple[str, str]]:
    """What an open entry may run: the functions of the modules with a risk that the entry's
    module reaches through the project's imports (a registry or a factory imports the model's
    classes), tests left out (a training run does not run them), and so are the module-level
    functions that nothing names (a loss helper no model calls, no table holds). ``live``: the
    named functions of each module, found once per run."""
    reached: set[tuple[str, str]] = set()
    # The code that builds the model and hands it over imports the training loop too: a
    # ``DefaultTrainer`` that calls ``build_model`` and makes the ``AMPTrainer``.
    setters = [root, *(m for m in imports.importers(root) if not _is_test(m))]
    package = _package_of(root)
    for module in sorted(risky):
        if _is_test(module) or package is None or _package_of(module) != package:
            continue  # a script outside the package may train any of a library's models
        if not any(module == s or imports.may_reach(s, {module}) for s in setters):
            continue
        if module not in live:
            live[module] = _live_functions(project, callers, imports, module)
        reached.update((module, name) for name in live[module])
    return reached


def _live_functions(project: Project, callers: Callers, imports: _Imports, module: str) -> set[str]:
    """The module's methods, and its module-level functions that are named somewhere beside
    their ``def``: in a module that imports it (or its package; tests left out), or a second
    time in its own code (a call, a table, a default argument; not a string of ``__all__``).
    Where the module's text cannot be read, all of them.
    (Asking every module of the 31-repository tree for each name cost the checks 0.4 s.)"""
    functions = (project.summary(module) or {}).get("functions", {})
    live = {name for name in functions if "." in name}
    plain = [name for name in functions if "." not in name]
    if not plain:
        return live
    data = callers.text(module) if callers.text is not None else None
    counts = _code_names(data) if data is not None else None
    if counts is None:
        return live | set(plain)
    importers = [other for other in imports.importers(module) if other != module and not _is_test(other)]
    for name in plain:
        if counts[name] > 1 or any(callers.names(other, name) for other in importers):
            live.add(name)
    return live


def _code_names(data: bytes) -> collections.Counter[str] | None:
    """How often each name occurs in the module's code, attributes (``obj.name``), strings
    (``__all__ = ["name"]``) and comments left out; None where the text does not tokenize."""
    import io
    import tokenize

    counts: collections.Counter[str] = collections.Counter()
    previous = ""
    try:
        for token in tokenize.tokenize(io.BytesIO(data).readline):
            if token.type == tokenize.NAME and previous != ".":
                counts[token.string] += 1
            if token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
                previous = token.string
    except (tokenize.TokenError, SyntaxError):
        return None
    return counts


def _package_of(module: str) -> str | None:
    """The top-level package a module belongs to (``src/`` layouts looked through), or None for
    a module at the root (a script)."""
    parts = module.split("/")
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    return parts[0] if len(parts) > 1 else None


def _is_test(module: str) -> bool:
    parts = module.split("/")
    return any(part in ("test", "tests", "testing") for part in parts[:-1]) or parts[-1].startswith("test_")


def _entries(project: Project, module: str) -> Iterator[_Entry]:
    summary = project.summary(module)
    if summary is None:
        return
    for call in project.region_calls(module):
        region = call["region"]
        codes = _region_codes(region)
        if not codes:
            continue
        target = project.resolve_run(module, call.get("frame", "<module>"), call["callee"])
        dtype = f"{region['dtype']} " if region.get("dtype") else ""
        if target is not None:
            yield _Entry(
                target,
                module,
                (region["at"], f"the {dtype}autocast region it runs in"),
                (call["at"], f"`{call['callee']}(...)` runs `{target.name}` here, in autocast"),
                codes,
            )
        elif _model_call(summary, call) and _trains(summary, call.get("frame", "<module>")):
            yield _Entry(
                None,
                module,
                (region["at"], f"the {dtype}autocast region it runs in"),
                (call["at"], f"`{call['callee']}(...)` runs a model of the project here, in autocast"),
                codes,
            )
    instances = summary.get("instances", {})
    for run in summary.get("framework", []):
        spelled = instances.get(f"{run['frame']}:{run['model']}") or instances.get(f"<module>:{run['model']}")
        codes = _lightning_codes(run)
        if not codes:
            continue
        where = (run["at"], f"{run['dtype']} mixed precision is set here: `{run['api']}(precision={run['precision']})`")
        found = project.resolve_spelled(module, spelled.split(".")) if spelled is not None else None
        if found is None or found[2] != "class":
            # A model from a factory, a parameter, a registry: any LightningModule it imports.
            handed = (run["call"], f"`{run['model']}` is handed to the {run['api']} here")
            yield _Entry(None, module, where, handed, codes)
            continue
        handed = (run["call"], f"`{run['model']}`, a `{found[1]}`, is handed to the {run['api']} here")
        for hook in _STEPS if run["api"] == "Trainer" else ("forward",):
            method = project.method(found[0], found[1], hook)
            if method is None:
                continue
            function = (project.summary(method[0]) or {}).get("functions", {}).get(method[1])
            if function is not None:
                yield _Entry(Target(method[0], method[1], function, 1), module, where, handed, codes)


def bfloat16_reached(
    project: Project, callers: Callers, root: str, strict: bool = False
) -> tuple[str, list[int]] | None:
    """The first autocast region (module, position) of the modules with autocast that ``root``'s
    imports may reach, where they run some and every region of theirs that may be on uses
    bfloat16 in a module whose code names float16 nowhere (another script of the repository,
    with its own model, may train in float16); else None. ``strict``: a reached module that
    names autocast without a region of its own names float16 nowhere either (it may make a
    float16 context for ``root`` to enter)."""
    imports = import_edges(project)
    found: tuple[str, list[int]] | None = None
    for module in callers.with_class("autocast"):
        if not imports.may_reach(root, {module}):
            continue
        summary = project.summary(module)
        if summary is None:
            return None
        regions = summary.get("regions")
        if not regions:
            if strict and names_float16(callers, module):
                return None
            continue
        if not bfloat16_only(summary):
            return None
        if found is None:
            found = (module, regions[0]["at"])
    return found


def import_edges(project: Project) -> _Imports:
    """The project's import edges, read from the modules' texts once per run."""
    found = project._import_edges
    if not isinstance(found, _Imports):
        import weakref

        # Held weakly: the project holds the index, and a cycle would keep both, and every
        # summary the project decoded, until the cyclic collector runs (``gc_budget.py``).
        found = project._import_edges = _Imports(weakref.proxy(project))
    return found


class _Imports:
    """The project modules each module imports, read from its text (no summary needed), to skip
    the entries whose code cannot reach the modules with a risk: summarizing them costs."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self._edges: dict[str, set[str]] = {}
        self._packages: dict[str, list[str]] = {}
        # an import target's names → the modules whose imports hold it (all, plain ones)
        self._imported_names: tuple[dict[str, list[str]], dict[str, list[str]]] | None = None

    def may_reach(self, root: str, targets: set[str]) -> bool:
        if self.project.text is None:  # no texts to read: every root stays
            return True
        seen = {root}
        frontier = [root]
        # Each call the walk follows crosses at most one import (a re-export in ``__init__.py``
        # one more): twice the depth bounds it. Each root's walk stops at the first target it
        # meets: one walk backwards from the targets for all roots lists far more modules.
        for _hop in range(2 * _DEPTH + 1):
            if seen & targets:
                return True
            following = []
            for module in frontier:
                for imported in self._of(module):
                    if imported not in seen:
                        seen.add(imported)
                        following.append(imported)
            if not following:
                break
            frontier = following
        return bool(seen & targets)

    def relates(self, caller: str, module: str) -> bool:
        """Whether a call in ``caller`` may land in ``module``: the same module, an import of it
        (directly, or through a package ``__init__`` that imports it), or an import the other way
        (a base class's method calling, through ``self``, a subclass's override)."""
        if self.project.text is None or caller == module:
            return True
        edges = self._of(caller)
        if module in edges or caller in self._of(module):
            return True
        return any(other.endswith("__init__.py") and module in self._of(other) for other in edges)

    def importers(self, module: str) -> list[str]:
        """The project's modules that import ``module`` (its package's ``__init__`` counts as
        it), from their texts. An import lands on a module by its last name (``c`` of
        ``a/b/c.py``, ``b`` of ``a/b/__init__.py``) or, a plain ``import a.b``, on every module
        of the package it names: only the modules whose import targets hold one of those names
        have their imports resolved (the names are indexed once). Resolving every module's
        imports instead cost 0.15 s and 9 MB of the main process's peak on the 31-repository
        tree."""
        if self._imported_names is None:
            named: dict[str, list[str]] = {}
            plainly: dict[str, list[str]] = {}
            for rel in sorted(self.project.files):
                parts: set[str] = set()
                plain_parts: set[str] = set()
                for target, plain in self.project.imports(rel):
                    split = target.lstrip(".").split(".")
                    parts.update(split)
                    if plain:
                        plain_parts.update(split)
                for part in parts:
                    named.setdefault(part, []).append(rel)
                for part in plain_parts:
                    plainly.setdefault(part, []).append(rel)
            self._imported_names = (named, plainly)
        named, plainly = self._imported_names
        *folders, name = module.split("/")
        stem = name[:-3] if name != "__init__.py" else (folders[-1] if folders else "")
        candidates = set(named.get(stem, ()))
        for folder in folders:
            candidates.update(plainly.get(folder, ()))
        return sorted(rel for rel in candidates if module in self._of(rel))

    def imported_by(self, module: str) -> set[str]:
        """The project modules ``module`` imports."""
        return set(self._of(module))

    def _package(self, folder: str) -> list[str]:
        files = self._packages.get(folder)
        if files is None:
            files = self._packages[folder] = [rel for rel in self.project.files if rel.startswith(folder)]
        return files

    def _of(self, module: str) -> set[str]:
        edges = self._edges.get(module)
        if edges is None:
            edges = self._edges[module] = set()
            for target, plain in self.project.imports(module):
                found = self.project.find_module(module, target)
                if found is None:
                    continue
                edges.add(found[0])
                if plain and found[0].endswith("/__init__.py"):
                    # ``import pkg`` then ``pkg.model.Net()``: the linker may land in any module
                    # of the package.
                    edges.update(self._package(found[0][: -len("__init__.py")]))
        return edges


def _trains(summary: ModuleSummary, frame: str) -> bool:
    """Whether the function (or the module body) runs a backward pass: the autocast region around
    a model there is a training step's, not a preprocessing or evaluation pass."""
    return frame in summary.get("trains", ())


def _model_call(summary: ModuleSummary, call: CallRecord) -> bool:
    """A call of an object (``self.model(x)``, ``model(images)``, ``self.net_g(z)``): a name the
    module binds to something other than a function or a class of its own, or one of ``self``'s
    fields, called as it is, not an import's function."""
    parts = call["callee"].split(".")
    if call.get("nested_def"):
        return False  # a closure of the calling function
    if parts[0] in ("self", "cls"):
        return len(parts) == 2
    if len(parts) != 1:
        return False
    name = parts[0]
    if name in summary.get("imports", {}) or name in summary.get("functions", {}) or name in summary.get("classes", {}):
        return False
    return f"{call.get('frame', '<module>')}:{name}" not in summary.get("instances", {})


def _region_codes(region: RegionRecord) -> set[str]:
    """AMP301 needs float16; AMP105 autocast on a device other than the CPU, whatever its
    dtype (torch bans BCE under CUDA autocast in bfloat16 too, as the file's own rule says)."""
    codes = set()
    if region.get("dtype") == "float16":
        codes.add("AMP301")
    if region.get("device") not in (None, "cpu"):  # a device not written out may be the CPU
        codes.add("AMP105")
    return codes


def _lightning_codes(run: FrameworkRun) -> set[str]:
    """Lightning refuses float16 mixed precision on the CPU, so ``"16-mixed"`` autocasts on an
    accelerator; ``"bf16-mixed"`` runs on the CPU too, where BCE is allowed: only with
    ``accelerator="gpu"``/``"cuda"`` written out is it CUDA autocast. bfloat16 holds any fill."""
    accelerator = run.get("accelerator")
    if run["dtype"] == "float16":
        return {"AMP301", "AMP105"} if accelerator != "cpu" else set()
    return {"AMP105"} if accelerator in ("gpu", "cuda") else set()


def _reached(project: Project, start: Target) -> set[tuple[str, str]]:
    """The functions ``start`` runs, itself included, through the calls the linker resolves."""
    seen = {(start.module, start.name)}
    frontier = [(start.module, start.name, start.function)]
    for _depth in range(_DEPTH):
        following = []
        for module, name, function in frontier:
            for spelled in function.get("uses", []):
                target = project.resolve_run(module, name, spelled)
                if target is None or (target.module, target.name) in seen:
                    continue
                seen.add((target.module, target.name))
                following.append((target.module, target.name, target.function))
                if len(seen) >= _BUDGET:
                    return seen
        frontier = following
        if not frontier:
            break
    return seen


def _report(module: str, risk: HalfRisk, entry: _Entry) -> CrossReport:
    where = entry.module.rsplit("/", 1)[-1]
    related = [(entry.module, entry.where, entry.note), (entry.module, entry.call, entry.call_note)]
    if risk["code"] == "AMP105":
        return CrossReport(
            "AMP105",
            module,
            risk["at"],
            f"`{risk['what']}` runs under CUDA autocast set up in {where}, where it raises a RuntimeError: torch "
            "bans it under autocast because probabilities in float16 or bfloat16 lose precision near 0 and 1",
            "Drop the sigmoid and compute the loss on logits with `F.binary_cross_entropy_with_logits` / "
            "`nn.BCEWithLogitsLoss`, or call it under `torch.autocast(..., enabled=False)` with `.float()` inputs",
            related,
        )
    receiver = risk.get("receiver") or "<tensor>"
    effect = _EFFECT.get(risk["label"], _RAISES)
    return CrossReport(
        "AMP301",
        module,
        risk["at"],
        f"`{risk['text']}` passed to `{risk['label']}` does not fit in float16 (max 65504), and this code runs under "
        f"float16 autocast set up in {where}: {effect}",
        f"Use `torch.finfo({receiver}.dtype).{risk['bound']}`, which is right for every dtype",
        related,
    )
