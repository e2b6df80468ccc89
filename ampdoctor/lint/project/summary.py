"""Per-module summaries: what each function does that another module may need to know.

A summary is plain data (dicts, lists, strings, ints), so that the cache stores it as JSON and
the link step reads it without the module's tree. Positions are ``[line, column, end_line,
end_column]`` (1-based, end exclusive), as findings use them. The workers make it from the
fact model their rules used (``engine.py``); the main process only links summaries.

Per function (``"Class.method"`` for methods, ``"name"`` for module-level functions; nested
functions are left out, since nothing outside reaches them by name): the parts of
``function_parts.py`` (its parameters, and what it does with the training step), and ``uses``
and ``half_risks`` (``float16_sites.py``).

Per module:

``imports``    local name → dotted target, with ``.`` prefixes kept for relative imports (those
               made inside functions too, where the module does not bind the name)
``aliases``    module-level ``name = other.name``, bound once
``classes``    each class's bases as spelled and where it is defined
``instances``  module- and function-level ``x = SomeClass(...)`` and ``self.x = SomeClass(...)``
``calls``      the calls that may land in project code (``call_records.py``)
``regions``    the module's enabled autocast regions; ``float16_code`` whether float16 is named in
               its code (asked for by AMP209)
``scalers_built`` where a module with no autocast region of its own builds a GradScaler that is
               certainly on (AMP209 asks the modules it imports what their regions use)
``framework``  Lightning's Trainer or Fabric with a mixed precision (``float16_sites.py``)
``flows``      each function's abstract values (``values.py``), ``plain``/``scaled`` on those that
               step without a scaler or run a scaled backward
``trains``     the functions (and ``<module>``) that run a backward pass of their own
``paths``      the folders the module adds to ``sys.path``
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable

from ..model import AmpFacts, Frame
from ..rules.scaler_queries import float16_in_code, scaler_enabled
from ..syntax import dotted
from ..syntax import span as position
from ..vocabulary import EventKind
from .call_records import call_records
from .float16_sites import add_float16_parts, framework_runs
from .function_parts import function_summary, mark_steps, params_of, qualname, training_frames
from .outline import project_imports
from .values import FlowMaker, flows_by_name, module_flows

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from .forked import Ends, Forked
    from .shapes import ClassRecord, FunctionSummary, ModuleSummary, RegionRecord
    from .value_atoms import FunctionFlow

# nn.Module methods that return the module itself.
_RETURNS_MODULE = frozenset({"cuda", "to", "cpu", "train", "eval", "requires_grad_"})


def summarize(facts: AmpFacts) -> ModuleSummary:
    """The module's summary (see the module docstring)."""
    return start_summary(facts)()


# Characters from which a module's value flows and call records may be computed in a forked
# child while this process runs the rules (``start_summary``). Files of N lines of training
# functions, linted alone (median of three), the flows aside: 50,000 lines (1.85 MB) 2.76 ->
# 2.30 s; 20,000 (730 kB) 1.13 -> 0.90 s; 3,000 (110 kB) 0.21 -> 0.18 s; 1,000 (36 kB) 0.10 s
# either way, where the fork and the pages the child copies cost what the flows took. With the
# call records aside too and the flows shared from both ends (medians of five to seven,
# alternating): 50,000 lines 2.10 -> 1.95 s, 20,000 lines 0.89 -> 0.83 s, 3,000 lines 0.18 s
# either way; the kinds of ``benchmarks/scaling_bench.py`` at 1,600 copies: trainer classes
# (70,000 lines) 2.29 -> 2.25 s, buggy loops 1.41 -> 1.32 s, module-level script code 1.16 s
# either way.
FLOWS_ASIDE_FROM = 100_000


def start_summary(facts: AmpFacts, aside: bool = False) -> Callable[[], ModuleSummary]:
    """The module's summary, finished by calling what this returns. With ``aside`` (a core is
    free beside this process: it lints alone), a large module's call records and value flows are
    computed in a forked child meanwhile, while this process goes on (with the rules:
    ``engine.check_source``); this process then takes the flows the child has not reached yet,
    from the last function back, until the two meet (``forked.Ends``)."""
    named = [(name, function, frame) for function, frame in facts.functions if (name := qualname(frame)) is not None]
    flowing: list[tuple[str, ast.AST, str | None]] = [("<module>", facts.module, None)]
    flowing.extend((name, function, frame.class_name) for name, function, frame in named)
    imports = project_imports(facts.module.body)
    for ref in facts.import_refs:
        # An import inside a function (``from pkg.base import BaseTask`` to dodge a cycle) names
        # its class there as well, where the name is not bound at module level.
        imports.setdefault(ref.local, ref.qname)
    defined = frozenset(name for name, _function, _frame in named)
    shared = None
    if aside and len(facts.source) >= FLOWS_ASIDE_FROM:
        from .forked import Ends, Forked, can_fork

        if can_fork():
            makers: list[FlowMaker] = []

            def flow(index: int) -> FunctionFlow | None:
                # (what the module's functions share is made by the process that first needs
                # it, each for itself: 0.06 s on a module of 20,000 lines of statements)
                if not makers:
                    makers.append(FlowMaker(facts, flowing))
                return makers[0](index)

            def work(ends: Ends) -> tuple[bytes, list[FunctionFlow | None]]:
                import pickle

                # Pickled at once, not with the flows at the end, while this process waits.
                records = pickle.dumps(call_records(facts, imports, defined), protocol=pickle.HIGHEST_PROTOCOL)
                return records, ends.front(flow)

            ends = None
            try:
                ends = Ends(len(flowing))
                shared = (Forked(functools.partial(work, ends)), flow, ends)
            except OSError:  # no memory, process or pipe to be had (limits): made here
                if ends is not None:
                    ends.close()
    try:
        return _summarized(facts, named, flowing, imports, defined, shared)
    except BaseException:
        if shared is not None:
            shared[2].close()
            with shared[0]:  # ends the child
                pass
        raise


def _summarized(
    facts: AmpFacts,
    named: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, Frame]],
    flowing: list[tuple[str, ast.AST, str | None]],
    imports: dict[str, str],
    defined: frozenset[str],
    shared: tuple[Forked, Callable[[int], FunctionFlow | None], Ends] | None,
) -> Callable[[], ModuleSummary]:
    instances = _instances(facts)
    functions: dict[str, FunctionSummary] = {}
    frames = []
    for name, function, frame in named:
        functions[name] = function_summary(facts, function, frame)
        frames.append((name, frame))
    classes = _classes(facts)
    add_float16_parts(facts, frames, functions, imports, set(functions) | set(classes), instances)
    regions: list[RegionRecord] = [
        {"at": position(r.node), "dtype": r.effective_dtype} for r in facts.regions if r.enabled.counts_as_on
    ]
    # Asked only by AMP209 (a scaler factory for bfloat16 code, a scaler built beside no
    # autocast): tokenizing costs, so only there.
    bfloat16_only = bool(regions) and all(r["dtype"] == "bfloat16" for r in regions)
    returns_scaler = any("returns_scaler" in f for f in functions.values())
    scalers_built = [] if regions else _scalers_built(facts)
    summary: ModuleSummary = {
        "regions": regions,
        "float16_code": float16_in_code(facts) if bfloat16_only or returns_scaler or scalers_built else None,
        "scalers_built": scalers_built,
        "imports": imports,
        "aliases": _aliases(facts),
        "classes": classes,
        "instances": instances,
        "functions": functions,
        "calls": [] if shared is not None else call_records(facts, imports, defined),
        "framework": framework_runs(facts, qualname) if "precision" in facts.source else [],
        "flows": {},
        "trains": training_frames(facts),
        "paths": _search_paths(facts) if "sys.path" in facts.source else [],
    }

    def finish() -> ModuleSummary:
        if shared is None:
            flows = module_flows(facts, flowing)
        else:
            from .forked import ForkFailed

            pending, flow, ends = shared
            made = None
            try:
                with pending:  # (leaving it early ends the child)
                    back = ends.back(flow)  # the flows the child has not reached yet
                    try:
                        made = pending.result()
                    except ForkFailed:
                        pass  # (a child that could not answer: what it had to make is made here)
            finally:
                ends.close()
            if made is None:
                summary["calls"] = call_records(facts, imports, defined)
                answers = [back[index] if index in back else flow(index) for index in range(ends.count)]
            else:
                import pickle

                records, front = made
                summary["calls"] = pickle.loads(records)
                answers = ends.joined(front, back)
            flows = flows_by_name(flowing, answers)
        summary["flows"] = mark_steps(facts, flows)
        return summary

    return finish


def summarize_released(facts: AmpFacts) -> ModuleSummary:
    """``summarize``, for facts that nothing reads after it (``AmpFacts.release``)."""
    try:
        return summarize(facts)
    finally:
        facts.release()


def light_summary(module: ast.Module) -> ModuleSummary:
    """The names of a module that does nothing the cross-module rules ask about: its imports,
    aliases, classes (with their bases) and functions, so that a call or a class is followed
    through it (a package's ``__init__`` that re-exports)."""
    classes: dict[str, ClassRecord] = {}
    functions: dict[str, FunctionSummary] = {}
    aliases: dict[str, str] = {}
    for stmt in module.body:
        if isinstance(stmt, ast.ClassDef):
            classes[stmt.name] = {"at": position(stmt), "bases": _bases(stmt)}
            for item in stmt.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    params, star = params_of(item)
                    functions[f"{stmt.name}.{item.name}"] = {"at": position(item), "params": params, "star": star}
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params, star = params_of(stmt)
            functions[stmt.name] = {"at": position(stmt), "params": params, "star": star}
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            spelled = dotted(stmt.value)
            if spelled:
                aliases[stmt.targets[0].id] = spelled
    return {
        "imports": project_imports(module.body),
        "aliases": aliases,
        "classes": classes,
        "functions": functions,
        "calls": [],
        "flows": {},
        "light": True,
    }


def _bases(node: ast.ClassDef) -> list[str]:
    """A class's bases as spelled (those that are dotted names)."""
    return [spelled for spelled in (dotted(b) for b in node.bases) if spelled]


def _classes(facts: AmpFacts) -> dict[str, ClassRecord]:
    return {node.name: {"at": position(node), "bases": _bases(node)} for node, _ in facts.classes}


def _search_paths(facts: AmpFacts) -> list[str]:
    """The folders the module adds to ``sys.path``, as the linker reads them
    (``Project._search_paths``): ``+train`` for a path that ends in a literal folder name,
    ``^1`` for ``os.path.dirname(os.path.dirname(__file__))`` (the module's folder's parent)."""
    found = []
    for site in facts.calls:
        if site.qname in ("os.path.join", "posixpath.join"):
            # ``add_path(osp.join(this_dir, "..", "lib"))`` through a helper of the module's own
            parts = [a.value for a in site.node.args[1:] if type(a) is ast.Constant and type(a.value) is str]
            if parts and len(parts) == len(site.node.args) - 1:
                found.append("+" + "/".join(parts))
            continue
        if site.qname not in ("sys.path.append", "sys.path.insert"):
            continue
        arg = site.arg(0 if site.qname.endswith("append") else 1, None)
        if arg is None:
            continue
        expr = arg.value
        strings = [n.value for n in ast.walk(expr) if type(n) is ast.Constant and type(n.value) is str]
        if strings:
            found.append("+" + strings[-1])
            continue
        levels = 0
        while type(expr) is ast.Call and dotted(expr.func) in (
            "os.path.dirname",
            "os.path.abspath",
            "os.path.realpath",
        ):
            levels += dotted(expr.func) == "os.path.dirname"
            expr = expr.args[0] if expr.args else None
        if type(expr) is ast.Name and expr.id == "__file__" and levels >= 1:
            found.append(f"^{levels - 1}")
    return found


def _aliases(facts: AmpFacts) -> dict[str, str]:
    """``save = utils.save_checkpoint`` at module level, bound once."""
    found = {}
    for name, value in facts.bound_once_at_module().items():
        if "." not in name and type(value) in (ast.Name, ast.Attribute):
            spelled = dotted(value)
            if spelled:
                found[name] = spelled
    return found


def _instances(facts: AmpFacts) -> dict[str, str]:
    """``x = Name(...)`` / ``self.x = Name(...)`` with a capitalised callee (``Name(...).cuda()``
    too), bound once:
    spelling (prefixed with the frame's name for locals) → the class as spelled."""
    counts: dict[str, int] = {}
    found: dict[str, str] = {}
    for assignment in facts.assignments:
        key = _binding_key(assignment.target, assignment.frame)
        if key is None:
            continue
        counts[key] = counts.get(key, 0) + 1
        value = assignment.value
        while (  # ``Net().cuda()``, ``Net().to(device)``: an nn.Module's moves return the module
            type(value) is ast.Call
            and isinstance(value.func, ast.Attribute)
            and value.func.attr in _RETURNS_MODULE
            and type(value.func.value) is ast.Call
        ):
            value = value.func.value
        if type(value) is ast.Call:
            spelled = dotted(value.func)
            if spelled and spelled.rsplit(".", 1)[-1][:1].isupper() and not spelled.startswith("torch."):
                found[key] = spelled
    return {key: cls for key, cls in found.items() if counts[key] == 1}


def _binding_key(target: str, frame: Frame) -> str | None:
    if target.startswith("self.") and frame.class_name:
        return f"{frame.class_name}.{target}"  # an attribute of the class's instances
    if "." in target:
        return None
    name = qualname(frame)
    return None if name is None else f"{name}:{target}"


def _scalers_built(facts: AmpFacts) -> list[list[int]]:
    """Where the module builds a GradScaler that is on whatever the run's options (no
    ``enabled=``, or ``enabled=True``)."""
    if "GradScaler" not in facts.source:
        return []
    return [
        position(new.call.node)
        for new in facts.events(EventKind.SCALER_NEW)
        if scaler_enabled(new.call.node, new.call.qname or "") is True
    ]
