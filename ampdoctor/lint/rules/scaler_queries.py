"""Small queries over AmpFacts that the GradScaler protocol rules (AMP203–AMP213) share: a frame's
events of one kind, frameworks that own the loss scaling, how a GradScaler is constructed."""

from __future__ import annotations

import ast
import re

from ..model import AmpFacts, CallSite, Event, Frame
from ..syntax import call_args, dotted, get_arg, iter_nodes, string_value
from ..vocabulary import GRAD_SCALER_NAMES, EventKind

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from ..syntax import Arg


def scaler_events(frame: Frame, kind: EventKind, scaler: str | None = None) -> list[Event]:
    events = frame.events_of(kind)
    return events if scaler is None else [e for e in events if e.scaler == scaler]


def framework_backward(site: CallSite) -> bool:
    """``engine.backward(loss)`` of DeepSpeed, Lightning strategies and the like scale by themselves."""
    receiver = (site.receiver or "").lower()
    return bool(site.node.args or site.node.keywords) and any(
        word in receiver for word in ("engine", "deepspeed", "strategy", "trainer", "booster", "accelerator", "fabric")
    )


def uses_framework(facts: AmpFacts) -> bool:
    """Modules built on a framework that owns the loss scaling (accelerate, Lightning, DeepSpeed, apex)."""
    roots = {q.split(".", 1)[0] for q in facts.imports.values()}
    return bool(
        roots & {"accelerate", "lightning", "pytorch_lightning", "lightning_fabric", "deepspeed", "apex", "colossalai"}
    )


def never_trains(facts: AmpFacts) -> bool:
    """Whether the module shows no training at all: no optimizer or scaler step, no optimizer
    built, no ``step`` of anything handed an argument. A gradient-equality unit test or a
    kernel timing script runs a backward without ever updating a parameter."""
    from ..passes import is_optimizer_constructor
    from ..vocabulary import EventKind

    if next(facts.events(EventKind.OPTIMIZER_STEP, EventKind.SCALER_STEP, EventKind.DELEGATED_BACKWARD), None):
        return False
    for site in facts.calls:
        if site.method == "step" and not _AVERAGER.search((site.receiver or "").rsplit(".", 1)[-1]):
            return False
        if site.spelled is not None and is_optimizer_constructor(site.node, facts):
            return False
    return True


# ``ema_model.step(model.parameters())``: a weight average follows the parameters, it trains nothing.
_AVERAGER = re.compile(r"(^|_)(ema|swa)(_|$)", re.IGNORECASE)


def scaler_enabled_arg(call: ast.Call, qname: str) -> Arg | None:
    """The ``enabled`` argument of a GradScaler construction (an ``Arg``), or None."""
    arg = get_arg(call, None, "enabled")
    if arg is None:
        # torch.cuda.amp.GradScaler(init_scale, growth_factor, backoff_factor, growth_interval, enabled)
        fixed = GRAD_SCALER_NAMES.get(qname) is not None
        arg = get_arg(call, 4 if fixed else 5, None)
    return arg


def scaler_enabled(call: ast.Call, qname: str) -> bool | None:
    """True/False for a literal ``enabled=``, None when it depends on run-time values."""
    arg = scaler_enabled_arg(call, qname)
    if arg is None:
        return True
    value = arg.value
    if isinstance(value, ast.Constant) and isinstance(value.value, bool):
        return value.value
    return None


def scaler_device(call: ast.Call, qname: str) -> str | None:
    fixed = GRAD_SCALER_NAMES.get(qname)
    if fixed is not None:
        return fixed
    arg = get_arg(call, 0, "device")
    if arg is None:
        return "cuda"
    return string_value(arg.value)


def target_of(facts: AmpFacts, call: ast.Call) -> str | None:
    assignment = facts.assignment_of(call)
    return assignment.target if assignment is not None else None


def mentions(facts: AmpFacts, class_name: str) -> bool:
    """Whether an import or a resolved name of the module ends in ``class_name`` (``ShardedGradScaler``
    ends in ``GradScaler``)."""
    names = [ref.qname for ref in facts.import_refs] + [name for _, name in facts.references]
    return any(name.rsplit(".", 1)[-1].endswith(class_name) for name in names)


def hands(site: CallSite, name: str | None) -> bool:
    """Whether the call passes ``name`` itself as an argument and is not one of ``name``'s own
    methods: a helper handed the scaler (``finish_step(optimizer, scaler)``), which may step,
    unscale or update it."""
    return site.receiver != name and any(dotted(arg.value) == name for arg in call_args(site.node))


def event_text(facts: AmpFacts, event: Event) -> str:
    return facts.text(event.call.node)


_FLOAT16_TEXT = re.compile(r"\bfloat16|\bfp16|\bhalf\b|HalfTensor", re.I)


def float16_in_code(facts: AmpFacts) -> bool:
    """Whether the module's code (not its comments or docstrings) speaks of float16: a dtype, a
    ``--fp16`` option, ``.half()``. Tokenized only when the text mentions it at all."""
    if not _FLOAT16_TEXT.search(facts.source):
        return False
    import io
    import tokenize

    docstrings = set()
    for node in iter_nodes(facts.module):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docstrings.add((first.value.lineno, first.value.col_offset))
    try:
        previous = ""
        for token in tokenize.generate_tokens(io.StringIO(facts.source).readline):
            if token.type == tokenize.COMMENT:
                continue
            if token.type == tokenize.STRING and token.start in docstrings:
                continue
            if _FLOAT16_TEXT.search(token.string) and not (
                # a variable named ``half`` (``half = dim // 2``) is no float16; ``.half()`` and
                # ``torch.half`` are
                token.type == tokenize.NAME and token.string.lower() == "half" and previous != "."
            ):
                return True
            if token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
                previous = token.string
    except (tokenize.TokenError, SyntaxError):
        return True  # in doubt: as if it did
    return False


class SaverScalers:
    """Whether the function that ``torch.save``s trains with a scaler it could save, for each save
    of one module (``has_scaler``): what does not depend on the save is found once (asked per
    save, a module of many checkpoint methods took time quadratic in its size)."""

    def __init__(self, facts: AmpFacts) -> None:
        self.facts = facts
        self._module_built: bool | None = None
        self._classes: set[str] | None = None
        self._spelled: dict[int, set[str | None]] = {}

    def has_scaler(self, save: CallSite) -> bool:
        """A module-level scaler (a script), a scaler used in the saving function itself, or a
        ``self.`` scaler of the saving method's class. A large module with one AMP test and an
        unrelated checkpoint elsewhere is not a resume bug."""
        facts = self.facts
        if self._module_built is None:
            self._module_built = any(
                a.target in facts.scalers and a.frame.parent is None for a in facts.assignments
            )  # constructed in the module body
        if self._module_built:
            return True
        frame = save.frame
        spelled = self._spelled.get(id(frame))
        if spelled is None:
            spelled = self._spelled[id(frame)] = {site.receiver for site in frame.calls} | {
                e.scaler for e in frame.events
            }
        if spelled & facts.scalers:
            return True
        if frame.class_name is None:
            return False
        if self._classes is None:
            self._classes = {
                f.class_name
                for f in facts.frames
                if f.class_name is not None
                and any(
                    (site.receiver or "") in facts.scalers and (site.receiver or "").startswith("self.")
                    for site in f.calls
                )
            }
        return frame.class_name in self._classes


def is_epoch_loop(facts: AmpFacts, node: ast.AST) -> bool:
    """A loop whose target or iterable (or ``while`` test) speaks of epochs."""
    if isinstance(node, (ast.For, ast.AsyncFor)):
        text = f"{facts.text(node.target)} {facts.text(node.iter)}"
    elif isinstance(node, ast.While):
        text = facts.text(node.test)
    else:
        return False
    return "epoch" in text.lower()
