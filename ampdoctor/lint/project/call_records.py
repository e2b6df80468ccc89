"""The module's calls that may land in project code, with what the cross-module checks ask
about each (``summary.py``'s ``calls``): the callee as spelled and the frame it is made in, the
autocast region around it, the loop it runs in (an epoch loop, a loop inside one) and the branch
arms between the two, whether its result is kept, and its arguments (position or keyword,
spelling, and for a scaler whether a scaled backward came before the call with no ``unscale_``
since).

A call is kept when a check may ask about it: made in an autocast region or a loop, kept in a
module with autocast, or handing a scaler (or something spelled or passed as one), one of the
function's own parameters or a ``*``/``**`` spread on.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable

from ..model import AmpFacts, Block, CallSite, Frame
from ..rules.scaler_queries import is_epoch_loop
from ..syntax import Arg, call_args, dotted
from ..syntax import span as position
from ..vocabulary import EventKind
from .function_parts import params_of, qualname

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from .shapes import ArgumentRecord, CallRecord, RegionRecord, ScalerState

# Callees that are never project code (builtins and common containers).
_BUILTINS = frozenset(dir(builtins))


def call_records(facts: AmpFacts, imports: dict[str, str], functions: frozenset[str]) -> list[CallRecord]:
    """The calls a cross-module rule may ask about (see the module docstring); ``functions``: the
    qualified names of the module's functions and methods."""
    records = []
    params_cache: dict[int, frozenset[str]] = {}
    epoch_cache: dict[int, bool] = {}

    def epoch_loop(block: Block) -> bool:
        known = epoch_cache.get(id(block.node))
        if known is None:
            known = epoch_cache[id(block.node)] = is_epoch_loop(facts, block.node)
        return known

    # What a call's loop and autocast region put in its record, made once per path of blocks
    # (the calls of one block share theirs) and per region, and shared by the records (one list
    # or dict for all, in memory and in what is pickled): on a file of 4,200 training functions
    # (46,200 calls) the records took 0.21 s, 0.19 s now.
    loops: dict[int, tuple[list[int], bool, bool, list[list[int | str]]] | None] = {}
    regions: dict[int, RegionRecord] = {}
    # The functions defined inside each function, by the frame they are defined in: a call of
    # one (``_compute_pred_loss()``) runs that closure, not an object.
    nested = {(id(frame.parent), frame.name) for frame in facts.frames if frame.parent is not None}
    # Each frame's name made once: one string for all its calls' records (a method's is built).
    frame_names: dict[int, str | None] = {}
    # The first ``X.unscale_(...)`` of each frame and receiver (its order), found in one pass.
    unscaled: dict[tuple[int, str], int] = {}
    for site in facts.calls:
        if site.method == "unscale_" and site.receiver is not None:
            unscaled.setdefault((id(site.frame), site.receiver), site.order)
    for site in facts.calls:
        callee = _callee(site, imports, functions)
        if callee is None:
            continue
        key = id(site.frame)
        frame_name = frame_names[key] if key in frame_names else frame_names.setdefault(key, qualname(site.frame))
        if frame_name is None:
            continue
        record: CallRecord = {"callee": callee, "frame": frame_name}
        if (id(site.frame), callee) in nested:
            record["nested_def"] = True
        relevant = False
        region = site.region
        if region is not None and region.enabled.counts_as_on:
            made = regions.get(id(region))
            if made is None:
                made = regions[id(region)] = {
                    "at": position(region.node),
                    "dtype": region.effective_dtype,
                    "device": region.device,
                }
            record["region"] = made
            relevant = True
        path = site.path
        if id(path) in loops:
            looped = loops[id(path)]
        else:
            looped = loops[id(path)] = _loop_of(path, epoch_loop)
        if looped is not None:
            at, epoch, in_epoch, arms = looped
            record["loop"] = at
            if epoch:
                record["epoch_loop"] = True
            elif in_epoch:
                record["in_epoch"] = True  # a loop over batches inside the epoch loop
            if arms:
                record["arms"] = arms
            relevant = True
        statement = site.statement
        if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is site.node and facts.regions:
            record["assigned"] = True
            relevant = True
        if key not in params_cache:
            params_cache[key] = _param_names(site.frame)
        arguments = call_args(site.node)
        names = [dotted(arg.value) for arg in arguments]
        if not relevant and not _passes_on(facts, params_cache[key], arguments, names):
            continue
        record["at"] = position(site.node)
        args = _arguments(facts, site, arguments, names, unscaled)
        if args:
            record["args"] = args
        if any(a.star for a in arguments):
            record["star"] = True
        records.append(record)
    return records


def _loop_of(
    path: tuple[Block, ...], epoch_loop: Callable[[Block], bool]
) -> tuple[list[int], bool, bool, list[list[int | str]]] | None:
    """For the calls made on ``path``: where their innermost loop is, whether it is an epoch
    loop, else whether it is inside one, and the branches between it and the calls (``_arms``);
    None outside a loop."""
    loop = next((block for block in reversed(path) if block.is_loop), None)
    if loop is None:
        return None
    epoch = epoch_loop(loop)
    in_epoch = not epoch and any(block.is_loop and epoch_loop(block) for block in path)
    return position(loop.node)[:2], epoch, in_epoch, _arms(path)


def _arms(path: tuple[Block, ...]) -> list[list[int | str]]:
    """The branches between the call and its innermost loop, ``[line, column, kind]`` each: two
    calls under one ``if`` in different arms never run in the same iteration."""
    inner = max((index for index, block in enumerate(path) if block.is_loop), default=-1)
    return [[*position(block.node)[:2], block.kind] for block in path[inner + 1 :] if not block.is_loop]


def _passes_on(facts: AmpFacts, params: frozenset[str], arguments: list[Arg], names: list[str | None]) -> bool:
    """Whether the call hands a scaler or one of the function's own parameters on (what
    ``_arguments`` would record), tested without building the records."""
    for arg, name in zip(arguments, names):
        if arg.star:
            return True  # what it spreads may hold a scaler (``unscaled_float16.py`` must see it)
        if name is not None and (name in facts.scalers or name in params or "scaler" in name.lower()):
            return True
        if arg.keyword is not None and "scaler" in arg.keyword.lower():
            return True  # ``scaler=make_scaler()``: the callee is handed one
        if type(arg.value) is ast.Call and "scaler" in (dotted(arg.value.func) or "").lower():
            return True  # ``train(model, GradScaler())``
    return False


def _param_names(frame: Frame) -> frozenset[str]:
    node = frame.node
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return frozenset()
    return frozenset(params_of(node)[0])


def _callee(site: CallSite, imports: dict[str, str], functions: frozenset[str]) -> str | None:
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
    facts: AmpFacts,
    site: CallSite,
    arguments: list[Arg],
    names: list[str | None],
    unscaled: dict[tuple[int, str], int],
) -> list[ArgumentRecord]:
    """Per argument (``arguments``, the call's ``call_args``, spelled ``names``): its position or
    keyword, its spelling, and whether it is a known scaler; ``state`` (for the scalers it
    passes) tells whether a scaled backward came before the call with no ``unscale_`` since;
    ``unscaled_before``, whether ``name.unscale_(...)`` runs before it in its frame (``unscaled``:
    the first such call of each frame and name)."""
    out = []
    position_index = 0
    for arg, name in zip(arguments, names):
        if arg.star:
            continue
        item: ArgumentRecord = {"kw": arg.keyword} if arg.keyword else {"pos": position_index}
        if not arg.keyword:
            position_index += 1
        if type(arg.value) is ast.Constant and arg.value.value is None:
            item["none"] = True  # ``train_step(model, optimizer, None, batch)``: no scaler at all
        if name:
            item["name"] = name
            if name in facts.scalers:
                item["is_scaler"] = True
                item["state"] = _scaler_state(site, name)
            first = unscaled.get((id(site.frame), name))
            if first is not None and first < site.order:
                item["unscaled_before"] = True
        out.append(item)
    return out


def _scaler_state(site: CallSite, scaler: str) -> ScalerState:
    """``scaled``: the scaler's last backward before the call in this frame has not been
    unscaled since; ``unscaled``: it has; ``none``: no scaled backward before the call."""
    frame = site.frame
    backwards = [e for e in frame.events_of(EventKind.SCALED_BACKWARD) if e.scaler == scaler and e.order < site.order]
    if not backwards:
        return {"kind": "none"}
    last = backwards[-1]
    unscaled = any(e.scaler == scaler and last.order < e.order < site.order for e in frame.events_of(EventKind.UNSCALE))
    return {"kind": "unscaled" if unscaled else "scaled", "backward": position(last.call.node)}
