"""What the project analysis tells a module's own rules, and the findings that follow.

The file-local rules see a module as it is written. Some of what they ask about is made in
another function or module: the autocast context a ``with`` opens (``with self.amp_cm:``,
``with self.engine.autocast():``, a context a factory or a base class in another module made)
and the gradient clip that a called helper runs (``self._clip_gradients(...)``, a
``ClipGradNorm`` object called as a function). The abstract values (``flow.py``) find both;
here they become *seeds* for the module's fact model (``build_facts(..., seeds)``): a region
for each such ``with`` item, a clip event for each such call. The module's rules then run again
on the seeded model, and what they find beyond the file-local run is a cross-module finding
(AMP101 for a backward run inside an autocast made elsewhere, AMP201 for a helper that clips
gradients still multiplied by the loss scale ...).

Seeds are positions, ``(line, column)`` as the summary spans have them, so that they survive
the trip from the summary to a parse of the module's text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from .engine_calls import protocol_seeds
from .flow import Values, flatten
from .packed_calls import calls_where
from .reports import CrossReport, withdrawn
from .tokens import CLIP_OR_UNSCALE_WORDS

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    import ast
    from typing import Any

    from ..model import AmpFacts
    from .engine_calls import Method, Seeded
    from .flow import Value
    from .link import Project, Target
    from .value_atoms import CallFlow


def module_seeds(
    values: Values,
    module: str,
    defining: Callable[[str], list[str]] | None = None,
    clipping: Callable[[], list[str]] | None = None,
) -> dict[str, Any] | None:
    """The seeds of one module (None when the project tells it nothing new); ``defining``: the
    modules whose text may define a function of a name (for engine calls, ``engine_calls.py``);
    ``clipping``: the modules whose text may clip gradients or unscale them."""
    regions: dict[tuple[int, int], tuple[str | None, str, str | None]] = {}
    clips: dict[tuple[int, int], tuple[str, list[int]]] = {}
    unscales: dict[tuple[int, int], tuple[str, str | None, str, list[int]]] = {}
    protocol: dict[tuple[int, int], list[Seeded]] = {}
    methods: dict[tuple[int, int], Method] = {}
    helpers = _helpers(values, clipping) if clipping is not None and values.scans else None
    for function, flow in values.flows(module).items():
        for at, atoms, *_last in flow.get("withs", []):
            region = region_of(flatten(values.resolve(module, function, atoms)))
            if region is not None:
                regions[(at[0], at[1])] = region
        for at, (events, method) in protocol_seeds(values, module, function, flow, defining).items():
            protocol[at] = events
            methods[at] = method
        if not flow.get("scaled") and not flow.get("scalers"):
            continue  # a helper's clip or unscale_ matters only where the caller trains with a scaler
        # (read once here: the training functions' calls are most of those read whole)
        for call in calls_where(flow, lambda callee, _received, _line: bool(callee), keep=False):
            # (a module whose text cannot clip or unscale is not summarized to find that out,
            # nor an object's value worked out for a method of a name no helper has)
            target = values.target(module, function, call, words=CLIP_OR_UNSCALE_WORDS, defined=helpers)
            if target is None:
                continue
            clip = target.function.get("clips_for_caller")
            if clip is not None and flow.get("scaled"):
                clips[(call["at"][0], call["at"][1])] = (target.module, clip)
            unscale = target.function.get("unscales_for_caller")
            if unscale is not None:
                own = _own_object(values, module, function, call, target) if "." in function else None
                scaler = _handed(call, target, unscale[0], own)
                optimizer = _handed(call, target, unscale[1], own)
                if scaler is not None:
                    unscales[(call["at"][0], call["at"][1])] = (scaler, optimizer, target.module, unscale[2])
    if not regions and not clips and not unscales and not protocol:
        return None
    return {"regions": regions, "clips": clips, "unscales": unscales, "protocol": protocol, "methods": methods}


class _Helpers:
    """Whether a function or method of a name clips or unscales for its caller. Every such
    function lies in a module ``clipping`` gives (``tokens.CLIP_OR_UNSCALE``); of those, only
    the modules whose text defines a function of the name asked about are summarized to find
    out. A call's object of unseen class has its value worked out (a walk that summarizes the
    modules its construction runs through) only for a method of such a name: on the
    31-repository tree the seeds looked for 2,466 methods that way, 0.44 s of the checks, and one
    of the 716 functions they found clipped."""

    def __init__(self, project: Project, clipping: Callable[[], list[str]]) -> None:
        self.project = project  # (not the Values that keeps this: no cycle for the collector)
        self.clipping = clipping
        self._defining: dict[str, list[str]] | None = None
        self._answers: dict[str, bool] = {}

    def __call__(self, name: str) -> bool:
        known = self._answers.get(name)
        if known is None:
            known = self._answers[name] = self._helps(name)
        return known

    def _helps(self, name: str) -> bool:
        project = self.project
        if self._defining is None:
            self._defining = {}
            for rel in self.clipping():
                data = project.text(rel) if project.text is not None else None
                for defined in set(_DEFINED.findall(data or b"")):
                    self._defining.setdefault(defined.decode("utf-8", "replace"), []).append(rel)
        for rel in self._defining.get(name, ()):
            for qualified, function in (project.summary(rel) or {}).get("functions", {}).items():
                if qualified.rpartition(".")[2] == name and (
                    "clips_for_caller" in function or "unscales_for_caller" in function
                ):
                    return True
        return False


# The name a ``def`` statement gives, however spaced (a name that is not ASCII, whole; type
# parameters, ``def f[T](x)``, left out).
_DEFINED = re.compile(rb"\bdef\s+([^\s(\[]+)")


def _helpers(values: Values, clipping: Callable[[], list[str]]) -> _Helpers:
    """The run's ``_Helpers``."""
    key = ("clip_helpers",)
    known = values.asked.get(key)
    if not isinstance(known, _Helpers):
        known = values.asked[key] = _Helpers(values.project, clipping)
    return known


def _own_object(values: Values, module: str, function: str, call: CallFlow, target: Target) -> str | None:
    """The name of the calling method's own object (``self``) where the call runs a method on it
    (``self.clip_gradients()``): the helper's fields are then the caller's."""
    params = (values.project.summary(module) or {}).get("functions", {}).get(function, {}).get("params", [])
    if not params or target.skip != 1:
        return None
    own: str = params[0]
    receiver, _dot, _name = call["callee"].rpartition(".")
    return own if receiver == own else None


def _handed(call: CallFlow, target: Target, held: int | str | None, own: str | None) -> str | None:
    """How the caller spells what the helper unscales: the argument passed for a parameter (an
    index), or the caller's own field for one of the helper's (``".scaler"``, see
    ``function_parts._unscale_for_caller``)."""
    if held is None:
        return None
    if isinstance(held, str):
        return own + held if own is not None else None
    return _spelled_argument(call, held - target.skip)


def _spelled_argument(call: CallFlow, index: int) -> str | None:
    """The name a call passes at a position (from the ``spelled`` its summary keeps)."""
    for key, _atoms, *rest in call.get("args", []):
        if key == index and rest:
            spelled: str | None = rest[0]
            return spelled
    return None


def region_of(value: Value) -> tuple[str | None, str, str | None] | None:
    """(dtype, enabled, device) of the autocast contexts a ``with`` item may be (``A@`` atoms):
    on only where every choice is an enabled autocast; off-only choices open nothing."""
    held = [atom.split("@")[1:] for atom in value if type(atom) is str and atom.startswith("A@")]
    if not held:
        return None
    states = {state for _dtype, state, _device in held}
    if states == {"off"}:
        return None
    others = any(type(atom) is not str or not atom.startswith("A@") for atom in value)
    enabled = "on" if states == {"on"} and not others else "maybe"
    dtypes = {dtype for dtype, state, _device in held if state != "off"}
    devices = {device for _dtype, state, device in held if state != "off"}
    dtype = next(iter(dtypes)) if len(dtypes) == 1 else None
    device = next(iter(devices)) if len(devices) == 1 else None
    return (None if dtype == "-" else dtype), enabled, (None if device == "-" else device)


def seeded_reports(
    values: Values,
    targets: list[str],
    codes: frozenset[str],
    defining: Callable[[str], list[str]] | None = None,
    clipping: Callable[[], list[str]] | None = None,
) -> Iterator[CrossReport]:
    """The findings of each target module's rules on its seeded fact model (the file-local ones
    among them are dropped when the reports are attached: same code, same line)."""
    for module in targets:
        seeds = module_seeds(values, module, defining, clipping)
        if seeds is None:
            continue
        yield from _relint(values, module, seeds, codes)


def _relint(values: Values, module: str, seeds: dict[str, Any], codes: frozenset[str]) -> Iterator[CrossReport]:
    from ..engine import decode_source, parse_source
    from ..facts import build_facts

    data = values.project.text(module) if values.project.text is not None else None
    if not data:
        return
    try:
        source = decode_source(data)
        facts = build_facts(parse_source(source), source, seeds)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return
    try:
        yield from _seeded_reports(facts, module, seeds, codes)
    finally:
        facts.release()


def _seeded_reports(
    facts: AmpFacts, module: str, seeds: dict[str, Any], codes: frozenset[str]
) -> Iterator[CrossReport]:
    from ..rules import lint_rules

    rules = lint_rules()
    lines = facts.lines
    clips = seeds["clips"]
    clipped_lines: set[int] = set()
    for code in sorted(codes):
        rule = rules.get(code)
        if rule is None:
            continue
        for report in rule.check(facts):
            at = lines.span(report.node)
            if at is None:
                continue
            if report.code == "AMP201":
                clipped_lines.add(at[0])
            related = []
            clip = clips.get((at[0], at[1]))
            if clip is not None:
                related.append((clip[0], clip[1], "the clip that the call runs"))
            unscale = seeds["unscales"].get((at[0], at[1]))
            if unscale is not None:
                related.append((unscale[2], unscale[3], "the `unscale_` that the call runs"))
            related.extend(_engine_methods(facts, report.node, seeds["methods"]))
            yield CrossReport(report.code, module, list(at), report.message, report.help or "", related)
    if "AMP201" in codes:
        # The module's own rules take a call of a clipper they cannot see for a clip
        # (``passes._unseen_clipper``: ``self.clip_gradients()`` of a base class in another
        # module); where the project shows that it unscales first, their AMP201 is withdrawn.
        for line, column in sorted(seeds["unscales"]):
            if line not in clipped_lines:
                yield CrossReport(withdrawn("AMP201"), module, [line, column, line, column], "", "", [])


def _engine_methods(
    facts: AmpFacts, node: ast.AST, methods: dict[tuple[int, int], Method]
) -> list[tuple[str, list[int], str]]:
    """The engine methods whose scaler calls the finding's function was seeded with (calls in
    the same function as the finding's node)."""
    if not methods:
        return []
    line = getattr(node, "lineno", 0)
    # (a frame with a parent is a function's, whose node has a position: ``Frame.node`` says ``AST``)
    frames: list[ast.FunctionDef | ast.AsyncFunctionDef] = [
        f.node  # type: ignore[misc]
        for f in facts.frames
        if f.parent is not None and f.node.lineno <= line <= (f.node.end_lineno or line)  # type: ignore[attr-defined]
    ]
    if not frames:
        return []
    inner = max(frames, key=lambda n: n.lineno)
    return [
        (where, at, f"the scaler calls behind `{name.rsplit('.', 1)[-1]}(...)` (with a `{name.split('.', 1)[0]}`)")
        for (call_line, _column), (where, at, name) in sorted(methods.items())
        if inner.lineno <= call_line <= (inner.end_lineno or call_line)
    ]
