"""Per-module summaries: what each function does that another module may need to know.

A summary is plain data (dicts, lists, strings, ints), so that the cache stores it as JSON and
the link step reads it without the module's tree. Positions are ``[line, column, end_line,
end_column]`` (1-based, end exclusive), as findings use them.

Per function (``"Class.method"`` for methods, ``"name"`` for module-level functions; nested
functions are left out, since nothing outside reaches them by name):

``at``        where the ``def`` is
``params``    parameter names in order (``self`` included), and ``star`` when it takes ``*``/``**``
``scaler``    whether the body mentions a scaler at all (any spelling with "scaler", a GradScaler)
``saves``     each ``torch.save``: which parameter it writes unchanged (``param``), or what the
              mapping it writes holds (``state``: an optimizer's state, a scaler's, or something
              opaque such as ``**extra`` or a parameter that may carry anything), and ``local``
              when the saving function has a scaler of its own in reach (the file's own AMP211
              judges that save where it is written)
``clips``     a clip of gradients followed by ``P.step(optimizer)`` on a parameter ``P``, with no
              ``P.unscale_`` before the clip and no scaled backward in the function: the scaled
              backward must be in a caller (AMP201 across functions)
``backward``  the first backward the function runs outside any autocast region of its own
              (a scaled, plain or framework ``backward``): AMP101 when a caller runs it in autocast
``new_scaler`` a GradScaler built into a local variable and stepped in the function (AMP205)
``uses``, ``half_risks`` the calls that may land in project code, and what float16 autocast set
              up elsewhere would break (``float16_sites.py``)
``collects``  the parameter whose optimizers the function collects (``snapshots.py``); ``stub``
              an abstract body; a save's ``collect``: the collector calls its mapping holds

Per module: ``imports`` (local name → dotted target, with ``.`` prefixes kept for relative
imports), ``aliases`` (module-level ``name = other.name``), ``classes`` (bases, and the
attributes assigned instances of other classes in methods: ``self.saver = Saver(...)``),
``instances`` (module- and function-level ``x = SomeClass(...)``), and ``calls``: the calls that
may land in project code, each with what the linker and the rules need about its arguments and
its context (the scalers in reach, the autocast region around it, whether it runs in a loop);
``framework``: Lightning's Trainer or Fabric with float16 mixed precision and the models handed
to it (``float16_sites.py``); ``snapshots``: the ``torch.save`` of dataclass/NamedTuple objects;
a class's ``record`` and ``scaler_attr`` (``snapshots.py``).
"""

from __future__ import annotations

import ast
import bisect
import builtins
import re

from ..model import AmpFacts, Block, CallSite, Frame
from ..passes import is_optimizer_constructor
from ..rules.scaler_queries import float16_in_code, is_epoch_loop, saver_has_scaler, scaler_enabled
from ..syntax import Arg, call_args, dotted, iter_nodes
from ..syntax import span as position
from ..vocabulary import EventKind
from .float16_sites import add_float16_parts, framework_runs
from .mappings import AssignmentIndex, is_mapping_literal, mapping_of, state_of
from .outline import project_imports
from .snapshots import collected, collector, is_stub, record_class, scaler_attribute, snapshot_saves
from .values import module_flows

_SCALER_TEXT = re.compile(r"scaler", re.IGNORECASE)
# nn.Module methods that return the module itself.
_RETURNS_MODULE = frozenset({"cuda", "to", "cpu", "train", "eval", "requires_grad_"})
# Callees that are never project code (builtins and common containers).
_BUILTINS = frozenset(dir(builtins))


def qualname(frame: Frame) -> str | None:
    """``f``, ``Class.f`` or ``<module>``; None for a nested function."""
    if frame.parent is None:
        return "<module>"
    if frame.parent.parent is not None:
        return None
    return f"{frame.class_name}.{frame.name}" if frame.class_name else frame.name


def summarize(facts: AmpFacts) -> dict:
    """The module's summary (see the module docstring)."""
    imports = _project_imports(facts.module)
    for ref in facts.import_refs:
        # An import inside a function (``from pkg.base import BaseTask`` to dodge a cycle) names
        # its class there as well, where the name is not bound at module level.
        imports.setdefault(ref.local, ref.qname)
    instances = _instances(facts)
    functions: dict[str, dict] = {}
    index = AssignmentIndex(facts)
    frames = []
    flowing: list[tuple[str, ast.AST, str | None]] = [("<module>", facts.module, None)]
    # What each function's text is searched for, looked for in the whole module once first.
    mentions = _Mentions(facts)
    may_collect = "isinstance" in facts.source and "state_dict" in facts.source  # ``collector``'s shape
    for function, frame in facts.functions:
        name = qualname(frame)
        if name is not None:
            functions[name] = _function(facts, function, frame, index, mentions, may_collect)
            frames.append((name, frame))
            flowing.append((name, function, frame.class_name))
    classes = _classes(facts)
    add_float16_parts(facts, frames, functions, imports, set(functions) | set(classes), instances)
    regions = [{"at": position(r.node), "dtype": r.effective_dtype} for r in facts.regions if r.enabled.counts_as_on]
    # Asked only by AMP209 (a scaler factory for bfloat16 code): tokenizing costs, so only there.
    bfloat16_only = bool(regions) and all(r["dtype"] == "bfloat16" for r in regions)
    returns_scaler = any("returns_scaler" in f for f in functions.values())
    return {
        "regions": regions,
        "float16_code": float16_in_code(facts) if bfloat16_only or returns_scaler else None,
        "imports": imports,
        "aliases": _aliases(facts),
        "classes": classes,
        "instances": instances,
        "functions": functions,
        "calls": _calls(facts, imports, functions, index, mentions),
        "framework": framework_runs(facts, qualname) if "precision" in facts.source else [],
        "flows": _mark_plain_steps(facts, module_flows(facts, flowing)),
        "trains": _training_frames(facts),
        "paths": _search_paths(facts) if "sys.path" in facts.source else [],
        "snapshots": snapshot_saves(facts, index.of, lambda frame: scaler_in_reach(facts, frame, index))
        if facts.scalers
        else [],
    }


def _mark_plain_steps(facts: AmpFacts, flows: dict[str, dict]) -> dict[str, dict]:
    """``plain`` on the flows of the functions that step an optimizer themselves without a
    scaler (``loss.backward(); optimizer.step()``): what they save is that training's state;
    ``scaled`` on those that run a scaled backward."""
    for frame in facts.frames:
        if not frame.events:
            continue
        name = qualname(frame)
        if name is None or name not in flows:
            continue
        if frame.events_of(EventKind.OPTIMIZER_STEP) and not frame.events_of(EventKind.SCALER_STEP):
            flows[name]["plain"] = True
        if frame.events_of(EventKind.SCALED_BACKWARD):
            flows[name]["scaled"] = True  # its calls may run on scaled gradients (``seeds.py``)
    return flows


def _training_frames(facts: AmpFacts) -> list[str]:
    """The functions (and ``<module>``) that run a backward pass of their own."""
    kinds = (EventKind.BACKWARD, EventKind.SCALED_BACKWARD, EventKind.DELEGATED_BACKWARD)
    found = []
    for frame in facts.frames:
        name = qualname(frame)
        if name is not None and frame.events_of(*kinds):
            found.append(name)
    return found


def light_summary(module: ast.Module) -> dict:
    """The names of a module that does nothing the cross-module rules ask about: its imports,
    aliases, classes (with their bases) and functions, so that a call or a class is followed
    through it (a package's ``__init__`` that re-exports)."""
    classes: dict[str, dict] = {}
    functions: dict[str, dict] = {}
    aliases: dict[str, str] = {}
    for stmt in module.body:
        if isinstance(stmt, ast.ClassDef):
            classes[stmt.name] = {"at": position(stmt), "bases": [dotted(b) for b in stmt.bases if dotted(b)]}
            for item in stmt.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    params, star = _params(item)
                    functions[f"{stmt.name}.{item.name}"] = {"at": position(item), "params": params, "star": star}
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params, star = _params(stmt)
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


# ---------------------------------------------------------------------------------------
# Module level
# ---------------------------------------------------------------------------------------


def _project_imports(module: ast.Module) -> dict[str, str]:
    """Local name → dotted target for every import at module level (``outline.project_imports``)."""
    return project_imports(module.body)


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
    counts: dict[str, int] = {}
    found: dict[str, str] = {}
    for assignment in facts.assignments:
        if assignment.frame.parent is not None:
            continue
        counts[assignment.target] = counts.get(assignment.target, 0) + 1
        if type(assignment.value) in (ast.Name, ast.Attribute):
            spelled = dotted(assignment.value)
            if spelled:
                found[assignment.target] = spelled
    return {name: target for name, target in found.items() if counts[name] == 1 and "." not in name}


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


def _classes(facts: AmpFacts) -> dict[str, dict]:
    found = {}
    for node, _bases in facts.classes:
        info: dict = {"at": position(node), "bases": [dotted(b) for b in node.bases if dotted(b)]}
        record = record_class(facts, node)
        if record is not None:
            info["record"] = record
        owned = scaler_attribute(facts, node.name) if facts.scalers else None
        if owned is not None:
            info["scaler_attr"] = owned
        found[node.name] = info
    return found


# ---------------------------------------------------------------------------------------
# Functions
# ---------------------------------------------------------------------------------------


def _params(function: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[list[str], bool]:
    args = function.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    return names, args.vararg is not None or args.kwarg is not None


class _Mentions:
    """Where the module's text says "scaler" (in any case; ``GradScaler`` among them): found in one
    search of the module, then asked of a function's or a call's span without searching again."""

    def __init__(self, facts: AmpFacts) -> None:
        source = facts.source
        if source.isascii():  # lowering keeps every offset, and a plain search beats the case-blind regex
            lowered = source.lower()
            found = []
            at = lowered.find("scaler")
            while at >= 0:
                found.append(at)
                at = lowered.find("scaler", at + 6)
            self._scaler = found
        else:
            self._scaler = [match.start() for match in _SCALER_TEXT.finditer(source)]
        self.any_scaler = bool(self._scaler)

    def scaler_within(self, start: int, end: int) -> bool:
        """Whether "scaler" (in any case) lies wholly inside ``source[start:end]``."""
        at = bisect.bisect_left(self._scaler, start)
        return at < len(self._scaler) and self._scaler[at] + 6 <= end


def _function(
    facts: AmpFacts,
    function: ast.FunctionDef | ast.AsyncFunctionDef,
    frame: Frame,
    index: AssignmentIndex,
    mentions: _Mentions,
    may_collect: bool,
) -> dict:
    params, star = _params(function)
    # The function's text searched where it lies, not copied out (large modules have thousands).
    start, end = facts.lines.bounds(function) or (0, 0)
    summary: dict = {
        "at": position(function),
        "params": params,
        "star": star,
        "scaler": mentions.scaler_within(start, end),
    }
    saves = [_save(facts, site, frame, params, index) for site in frame.calls if site.qname == "torch.save"]
    if saves:
        summary["saves"] = saves
    clips = _clips_before_param_step(facts, frame, params)
    if clips:
        summary["clips"] = clips
    clip = _clip_for_caller(frame)
    if clip is not None:
        summary["clips_for_caller"] = clip
    unscales = _unscale_for_caller(frame, params)
    if unscales is not None:
        summary["unscales_for_caller"] = unscales
    backward = _own_backward(frame)
    if backward is not None:
        summary["backward"] = backward
    returned = _returned_scaler(facts, function, frame)
    if returned is not None:
        summary["returns_scaler"] = returned
    owner = collector(facts, function, (start, end)) if may_collect else None
    if owner is not None:
        summary["collects"] = owner
    if is_stub(function):
        summary["stub"] = True
    new_scaler = _local_scaler(facts, frame)
    if new_scaler is not None:
        summary["new_scaler"] = new_scaler
        if any(is_optimizer_constructor(site.node, facts) for site in frame.calls):
            summary["builds_optimizer"] = True
    return summary


def _save(facts: AmpFacts, site: CallSite, frame: Frame, params: list[str], index: AssignmentIndex) -> dict:
    record: dict = {"at": position(site.node)}
    arg = site.arg(0, "obj")
    if arg is None or arg.star:
        record["state"] = {"opaque": True}
        return record
    name = dotted(arg.value)
    if name in params and not _changed_in(facts, frame, name, site):
        record["param"] = params.index(name)
        return record
    mapping = mapping_of(facts, frame, arg.value, site.order, index)
    record["state"] = state_of(facts, mapping, params) if mapping is not None else {"opaque": True}
    taken = collected(facts, frame, mapping, site.order, index.of) if mapping is not None else None
    if taken is not None:
        record["collect"] = taken
    if saver_has_scaler(facts, site):
        record["local"] = True  # judged where it is written, by the file's own AMP211
    return record


def _changed_in(facts: AmpFacts, frame: Frame, name: str, before: CallSite) -> bool:
    """Whether ``name`` is rebound, has items set, or has a method called on it in the frame."""
    if any(a.frame is frame and a.target == name for a in facts.assignments):
        return True
    if any(where is frame and target == name for target, _node, where in facts.item_assignments):
        return True
    return any(site.receiver == name and site.order < before.order for site in frame.calls)


def _unscale_for_caller(frame: Frame, params: list[str]) -> list | None:
    """``[scaler parameter, optimizer parameter or None, where]`` when the function unscales the
    gradients of a scaler it is handed (``scaler.unscale_(optimizer)`` on its parameters) and
    steps nothing: the step is its caller's (a per-micro-batch helper)."""
    if frame.events_of(EventKind.SCALER_STEP, EventKind.OPTIMIZER_STEP, EventKind.UPDATE):
        return None
    for event in frame.events_of(EventKind.UNSCALE):
        if event.scaler in params:
            optimizer = params.index(event.optimizer) if event.optimizer in params else None
            return [params.index(event.scaler), optimizer, position(event.call.node)]
    return None


def _clip_for_caller(frame: Frame) -> list[int] | None:
    """Where the function clips gradients that it neither scaled nor unscaled itself (no scaled
    backward, no ``unscale_``, no scaler step in it): the state of the gradients is its
    caller's (a ``_clip_gradients`` helper, a ``ClipGradNorm`` object's ``__call__``)."""
    if frame.events_of(EventKind.SCALED_BACKWARD, EventKind.UNSCALE, EventKind.SCALER_STEP, EventKind.BACKWARD):
        return None
    for clip in frame.events_of(EventKind.CLIP):
        if not clip.norm_only:
            return position(clip.call.node)
    return None


def _clips_before_param_step(facts: AmpFacts, frame: Frame, params: list[str]) -> list[dict]:
    if frame.events_of(EventKind.SCALED_BACKWARD) or not params:
        return []
    found = []
    for clip in frame.events_of(EventKind.CLIP):
        if clip.norm_only:
            continue
        for site in frame.calls:
            if site.order <= clip.order or site.method != "step" or site.receiver not in params:
                continue
            scaler = site.receiver
            unscaled = any(
                s.receiver == scaler and s.method == "unscale_" and s.order < clip.order for s in frame.calls
            )
            if unscaled:
                continue
            optimizer = site.arg(0, "optimizer")
            found.append(
                {
                    "param": scaler,
                    "clip": position(clip.call.node),
                    "optimizer": dotted(optimizer.value) if optimizer else None,
                }
            )
            break
    return found


def _own_backward(frame: Frame) -> list[int] | None:
    kinds = (EventKind.BACKWARD, EventKind.SCALED_BACKWARD, EventKind.DELEGATED_BACKWARD)
    for event in frame.events_of(*kinds):
        if event.call.region is None:
            return position(event.call.node)
    for site in frame.calls:  # ``accelerator.backward(loss)``: a backward the model leaves out of its events
        if site.method == "backward" and site.region is None and "accelerator" in (site.receiver or "").lower():
            return position(site.node)
    return None


def _returned_scaler(facts: AmpFacts, function: ast.AST, frame: Frame) -> list[int] | None:
    """Where the GradScaler is built that the function returns (``return GradScaler(...)``, or
    a local bound to one and returned), when it is enabled whatever the arguments."""
    made = {}
    for new in frame.events_of(EventKind.SCALER_NEW):
        if scaler_enabled(new.call.node, new.call.qname or "") is not True:
            continue
        statement = new.call.statement
        if isinstance(statement, ast.Return) and statement.value is new.call.node:
            return position(new.call.node)
        if (
            isinstance(statement, ast.Assign)
            and statement.value is new.call.node
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
        ):
            made[statement.targets[0].id] = new.call.node
    if not made:
        return None
    for node in iter_nodes(function):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Name) and node.value.id in made:
            return position(made[node.value.id])
    return None


def _local_scaler(facts: AmpFacts, frame: Frame) -> dict | None:
    """A GradScaler built into a local of this function (not in a loop of its own), or into a
    ``self.`` attribute at the top of a method's body, and stepped in the function."""
    for new in frame.events_of(EventKind.SCALER_NEW):
        if new.call.loop is not None:
            continue
        statement = new.call.statement
        value = statement.value if isinstance(statement, ast.Assign) else None
        if type(value) is ast.IfExp and new.call.node in (value.body, value.orelse):
            value = new.call.node  # ``scaler = GradScaler() if amp else None``
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1 and value is new.call.node):
            continue
        target = dotted(statement.targets[0])
        if target is None or (
            type(statement.targets[0]) is not ast.Name
            and not (target.count(".") == 1 and target.startswith("self.") and not new.call.path and frame.class_name)
        ):
            continue  # ``if self.scaler is None: self.scaler = ...`` is set-up done once
        steps = [s for s in frame.calls if s.receiver == target and s.method == "step"]
        if steps:
            found = {"at": position(new.call.node), "name": target}
            if all(s.loop is None for s in steps):
                found["single_step"] = True  # one optimizer step per call, on a fresh scaler
            return found
    return None


# ---------------------------------------------------------------------------------------
# Calls that may land in project code
# ---------------------------------------------------------------------------------------


def _calls(
    facts: AmpFacts,
    imports: dict[str, str],
    functions: dict[str, dict],
    index: AssignmentIndex,
    mentions: _Mentions,
) -> list[dict]:
    """The calls a cross-module rule may ask about: those made with a scaler in reach, inside
    an autocast region, in a loop, passing a scaler, a checkpoint mapping or one of the
    function's own parameters on, or whose result a module with autocast keeps."""
    records = []
    reach_cache: dict[int, list[int] | None] = {}
    params_cache: dict[int, frozenset[str]] = {}
    epoch_cache: dict[int, bool] = {}

    def epoch_loop(block: Block) -> bool:
        known = epoch_cache.get(id(block.node))
        if known is None:
            known = epoch_cache[id(block.node)] = is_epoch_loop(facts, block.node)
        return known

    mentions_scaler = mentions.any_scaler
    for site in facts.calls:
        callee = _callee(site, imports, functions)
        if callee is None:
            continue
        frame_name = qualname(site.frame)
        if frame_name is None:
            continue
        record: dict = {"callee": callee, "frame": frame_name, "at": None}
        key = id(site.frame)
        if key not in reach_cache:
            reach_cache[key] = _reach(facts, site.frame, index) if mentions_scaler else None
        relevant = False
        if reach_cache[key] is not None:
            record["reach"] = reach_cache[key]
            relevant = True
        region = site.region
        if region is not None and region.enabled.counts_as_on:
            record["region"] = {"at": position(region.node), "dtype": region.effective_dtype, "device": region.device}
            relevant = True
        loop = site.loop
        if loop is not None:
            record["loop"] = position(loop.node)[:2]
            if epoch_loop(loop):
                record["epoch_loop"] = True
            elif any(block.is_loop and epoch_loop(block) for block in site.path):
                record["in_epoch"] = True  # a loop over batches inside the epoch loop
            relevant = True
        statement = site.statement
        if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is site.node and facts.regions:
            record["assigned"] = True
            relevant = True
        if key not in params_cache:
            params_cache[key] = _param_names(site.frame)
        arguments = call_args(site.node)
        names = [dotted(arg.value) for arg in arguments]
        if not relevant and not _passes_on(facts, site, params_cache[key], index, arguments, names):
            continue
        record["at"] = position(site.node)
        args = _arguments(facts, site, index, arguments, names)
        if args:
            record["args"] = args
        if any(a.star for a in arguments):
            record["star"] = True
        if any(name in facts.scalers for name in names) or mentions.scaler_within(
            *(facts.lines.bounds(site.node) or (0, 0))
        ):
            record["scaler"] = True
        records.append(record)
    return records


def _passes_on(
    facts: AmpFacts,
    site: CallSite,
    params: frozenset[str],
    index: AssignmentIndex,
    arguments: list[Arg],
    names: list[str | None],
) -> bool:
    """Whether the call passes a scaler, one of the function's own parameters or a checkpoint
    mapping on (what ``_arguments`` would record), tested without building the records.
    ``arguments``: the call's ``call_args``; ``names``: the ``dotted`` spelling of each."""
    for arg, name in zip(arguments, names):
        if arg.star:
            continue
        value = arg.value
        if is_mapping_literal(value):
            return True
        if name is None:
            continue
        if name in facts.scalers or name in params:
            return True
        if index.may_name_mapping(site.frame, name) and mapping_of(facts, site.frame, value, site.order, index):
            return True
    return False


def _param_names(frame: Frame) -> frozenset[str]:
    node = frame.node
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return frozenset()
    return frozenset(_params(node)[0])


def _reach(facts: AmpFacts, frame: Frame, index: AssignmentIndex) -> list[int] | None:
    # A frame that saves its scaler's state some other way is not judged.
    if any(s.method == "state_dict" and _SCALER_TEXT.search(s.receiver or "") for s in frame.calls):
        return None
    return scaler_in_reach(facts, frame, index)


def _callee(site: CallSite, imports: dict[str, str], functions: dict[str, dict]) -> str | None:
    """The callee as spelled, when it may be project code: a name of this module or an import
    that is not torch's, ``self.m``/``cls.m``, or a method of a local object."""
    if site.qname is not None and (site.qname == "torch" or site.qname.startswith("torch.")):
        return None
    spelled = site.spelled
    if spelled is None:
        return None
    head = spelled.split(".", 1)[0]
    if head in _BUILTINS and head not in imports and head not in functions:
        return None
    target = imports.get(head)
    if target is not None and (target == "torch" or target.startswith(("torch.", "numpy", "math", "os", "sys"))):
        return None
    return spelled


def _arguments(
    facts: AmpFacts, site: CallSite, index: AssignmentIndex, arguments: list[Arg], names: list[str | None]
) -> list[dict]:
    """Per argument (``arguments``, the call's ``call_args``, spelled ``names``): its position or
    keyword, its spelling, whether it is a known scaler, and what a checkpoint mapping passed
    there holds; ``state`` (for the scalers it passes) tells whether a scaled backward came
    before the call with no ``unscale_`` since."""
    out = []
    position_index = 0
    for arg, name in zip(arguments, names):
        if arg.star:
            continue
        item: dict = {"kw": arg.keyword} if arg.keyword else {"pos": position_index}
        if not arg.keyword:
            position_index += 1
        if name:
            item["name"] = name
            if name in facts.scalers:
                item["is_scaler"] = True
                item["state"] = _scaler_state(site, name)
        value = arg.value
        if is_mapping_literal(value) or (name and index.may_name_mapping(site.frame, name)):
            mapping = mapping_of(facts, site.frame, value, site.order, index)
            if mapping is not None:
                item["map"] = state_of(facts, mapping)
        out.append(item)
    return [item for item in out if len(item) > 1]


def _scaler_state(site: CallSite, scaler: str) -> dict:
    """``scaled``: the scaler's last backward before the call in this frame has not been
    unscaled since; ``unscaled``: it has; ``none``: no scaled backward before the call."""
    frame = site.frame
    backwards = [e for e in frame.events_of(EventKind.SCALED_BACKWARD) if e.scaler == scaler and e.order < site.order]
    if not backwards:
        return {"kind": "none"}
    last = backwards[-1]
    unscaled = any(e.scaler == scaler and last.order < e.order < site.order for e in frame.events_of(EventKind.UNSCALE))
    return {"kind": "unscaled" if unscaled else "scaled", "backward": position(last.call.node)}


def scaler_in_reach(facts: AmpFacts, frame: Frame, index: AssignmentIndex) -> list[int] | None:
    """Where the scaler that ``frame`` trains with is made, when it has one: a module-level
    scaler, one the frame itself uses (or receives as a parameter), or a ``self.`` scaler of
    its class. None otherwise."""
    if index.module_scaler is not None:
        return position(index.module_scaler)
    spelled = {site.receiver for site in frame.calls} | {e.scaler for e in frame.events}
    for name in sorted(n for n in spelled if n in facts.scalers):
        made = index.scalers_made.get(name)
        if made is not None:
            return position(made.value)
        use = next((s for s in frame.calls if s.receiver == name), None)
        if use is not None:
            return position(use.node)
    if isinstance(frame.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for arg in (*frame.node.args.posonlyargs, *frame.node.args.args, *frame.node.args.kwonlyargs):
            if arg.arg in facts.scalers:
                return position(arg)  # handed in by the caller, which made it
    if frame.class_name is not None:
        for name, made in index.scalers_made.items():
            if name.startswith("self.") and made.frame.class_name == frame.class_name:
                return position(made.value)
    return None
