"""What a module's bytes must hold to take part in the project pass: tested before any parse,
and importable without the fact model. The lint pass, which has every file's bytes in hand,
asks ``token_classes`` of each one, so that the project pass reads none of them again for that
(and ``wanted_without_rules`` of the files no rule of their own needs to parse)."""

from __future__ import annotations

import re

from ...records import Record

# What float16 autocast set up elsewhere asks about: a module's fills and BCE (and, below, the
# ``forward`` through which a model reaches them).
_FLOAT16_RISK_TOKENS = (b"binary_cross_entropy", b"BCELoss")
_FILL_TOKENS = (b"masked_fill", b"fill_", b"new_full", b"full_like", b"torch.where", b".where(")
# What a module's bytes must hold to take part in a cross-module rule, by role: it makes or uses
# a GradScaler ("scaler": its calls may carry one, or write a checkpoint beside one), runs
# autocast, loops over epochs, or clips gradients (an update helper).
TOKEN_CLASSES = {
    "scaler": (b"GradScaler", b".scale("),
    "autocast": (b"autocast",),
    "epoch": (b"epoch",),
    "clip": (b"clip_grad",),
    # An optimizer built over a model's parameters (a caller that may train what a helper returns).
    "parameters": (b".parameters(",),
    # Lightning's float16 mixed precision as a literal: ``precision="16-mixed"``, ``precision=16``
    # (in a ``Trainer`` or ``Fabric`` call: ``_CLASS_NEEDS``).
    "precision": (b"16-mixed", b"precision=16", b'precision="16', b"precision='16", b"precision=precision"),
    # What float16 autocast set up elsewhere breaks: a BCE, a fill (``float16_risk`` is exact).
    "half_risk": (*_FLOAT16_RISK_TOKENS, *_FILL_TOKENS),
}
# Without a match, a function runs no backward (``loss.backward()``, ``torch.autograd.backward``
# however imported, ``accelerator.backward(loss)``, Lightning's ``self.manual_backward(loss)``).
BACKWARD_TEXT = re.compile(rb"\bbackward\b|manual_backward")
# Without a match, a function writes no checkpoint itself: ``torch.save`` however it is spelled
# or imported (the module's own code is searched too: ``from torch import save as persist``).
SAVE_TEXT = re.compile(rb"save")
# Without a match, no function of a module clips gradients or unscales them (``clips_for_caller``,
# ``unscales_for_caller`` in ``function_parts.py``): a clip is a call of ``vocabulary.CLIP_NAMES``
# (each holds ``clip_grad``) or of a function named as ``passes._CLIPPER_NAME`` says, an
# unscale a scaler's ``unscale_``. Case aside, a superset of both (``tests/test_project_seeds.py``).
CLIP_OR_UNSCALE_WORDS = re.compile(rb"(?i)clip_?grad|grad_?clip|unscale_")
# Bytes without which a module's functions do nothing the cross-module rules ask about.
HELPER_TOKENS = (
    b"save",
    # What a value may come from: an optimizer or a scaler a factory builds, a state it returns,
    # the folders a module adds to ``sys.path``.
    b"optim",
    b"scaler",
    b"Scaler",
    b"state_dict",
    b"sys.path",
    b"clip_grad",
    b"backward",
    b"step",
    b"forward",
    *_FLOAT16_RISK_TOKENS,
    *_FILL_TOKENS,
    *(t for ts in TOKEN_CLASSES.values() for t in ts),
)


# ``P.step(optimizer)``: a step with an argument, as a GradScaler's is (``optimizer.step()`` has
# none, ``optimizer.step(closure)`` and ``.step(**kwargs)`` do not hand over an optimizer).
_STEP_WITH_ARGUMENT = re.compile(rb"\.step\(\s*(?!closure\b|lambda\b|\*)[^)\s]")


# ``engine.optimizer_step(loss, ...)``: a method named like a step, given arguments.
_ENGINE_STEP = re.compile(rb"\.\w+_step\(\s*[^)\s]")


# ``with self.backend.autocast:``, ``with self.engine.autocast():``: a context another module makes.
_HELD_WITH = re.compile(rb"with\s+[\w.]+\.\w*autocast\w*\b")

# The words of a checkpoint's writing (``checkpoints.CHECKPOINT_TEXT``), and a call whose last
# name holds one (``torch.save(``, ``save_checkpoint(``, ``self._dump(``; a ``def`` of one too):
# the calls AMP211's judge follows out of a function that does not train with a scaler itself.
CHECKPOINT_WORDS = rb"save|ckpt|checkpoint|snapshot|persist|dump"
_CHECKPOINT_CALL = re.compile(rb"(?:" + CHECKPOINT_WORDS + rb")\w*[ \t]*\(")


def wanted_without_rules(data: bytes, seen: dict[bytes, bool] | None = None) -> bool:
    """Whether a module that no rule of its own needs to parse is still worth a summary in the
    lint pass, since the project pass judges it:

    * it clips gradients and steps something with an argument (an update helper:
      ``scaler.step(optimizer)`` on a scaler it receives; ``summary._clips_before_param_step``),
      judged from its callers;
    * it clips gradients and calls a step method of some object with arguments
      (``runner.engine.optimizer_step(loss, model, optimizer)``): an engine's scaler calls may
      surround the clip (``engine_calls.py``);
    * it enters an autocast context an object holds (``with self.backend.autocast:``): the
      calls inside may run a backward or a step (``region_calls.py``);
    * it makes a model float16 and returns something: a caller may train what it returns
      (``half_returned.py``);
    * it saves something and names a scaler or an optimizer's state (a checkpoint written by a
      method of a class whose base or subclass holds the scaler, a callback handed the trainer,
      a script that calls its save helper): AMP211 on abstract values (``checkpoints.py``).
      It must call (or define) something whose name speaks of a checkpoint: the words alone,
      in comments, made the lint pass summarize torch's 1.3 MB test helpers, which doubled the
      peak memory of a run on the torch package.

    A module that only holds what float16 autocast breaks (``float16_risk``) is summarized
    later, and only when an autocast set up elsewhere reaches it. ``seen``: as for
    ``token_classes`` (the prefilter has searched for most of these tokens already: on the
    31-repository tree, five searches of each file's text fewer)."""
    holds = _Search(data, seen)
    clip = holds(b"clip_grad")
    if clip and _STEP_WITH_ARGUMENT.search(data) is not None:
        return True
    if (clip or holds(b"grad_clip")) and _ENGINE_STEP.search(data) is not None:
        return True
    if holds(b"autocast") and _HELD_WITH.search(data) is not None:
        return True
    if (holds(b".half()") or holds(b"convert_to_fp16()")) and holds(b"return "):
        return True
    # (Narrowed to modules that also say ``optim``, the lint pass summarized 53 fewer modules of
    # the 31-repository tree, but the checks reached them all the same and summarized them one by
    # one in the main process: the project checks took 1.2 s longer.)
    return (
        holds(b"save")
        and (holds(b"state_dict") or holds(b"GradScaler") or holds(b"scaler"))
        and _CHECKPOINT_CALL.search(data) is not None
    )


def float16_risk(data: bytes, seen: dict[bytes, bool] | None = None) -> bool:
    """Whether the module holds what float16 autocast set up in another module breaks: a BCE,
    or a fill with a constant past float16's range. ``seen``: as for ``token_classes``."""
    holds = _Search(data, seen)
    if any(holds(token) for token in _FLOAT16_RISK_TOKENS):
        return True
    if not any(holds(token) for token in _FILL_TOKENS):
        return False
    from ..textscan.literals import literal_flags

    return "big-fill" in literal_flags(data, ("big-fill",))


# A shorter word that each of these tokens holds: one search for it passes most modules over
# (each search of a token costs about 20 ms over the 46 MB of the torch tree).
_WITHIN = {
    b".half()": b".half",
    b"convert_to_fp16()": b"convert_to_fp16",
    b"masked_fill": b"fill",
    b"fill_": b"fill",
    b"new_full": b"full",
    b"full_like": b"full",
    b"torch.where": b"where",
    b".where(": b"where",
    b"precision=16": b"precision",
    b"precision=precision": b"precision",
    b'precision="16': b"precision",
    b"precision='16": b"precision",
}
# What a region needs to run code in float16 (or on an accelerator), in the text of the autocast
# call itself (``model.autocast_region`` reads only the call's arguments): a float16 dtype, or a
# device written out that is not the CPU (CUDA's default dtype is float16); ``bfloat16`` is not
# float16.
# ``torch.cuda.amp.autocast()`` (or the name imported from there, or imported under another name)
# names no device: such a module is kept as it is.
_AUTOCAST_CALL = re.compile(rb"autocast[ \t]*\(((?:[^()]|\([^()]*\))*)\)")
_FLOAT16_OR_DEVICE = re.compile(rb"(?<![bB])float16|half|fp16|[\"'](?!cpu[\"'])[a-z]+(?::\d+)?[\"']")
# A class of its own, tested on the text: the module may hold a float16 or non-CPU autocast region.
FLOAT16_AUTOCAST = "float16_autocast"
# Another: the module's text matches ``CLIP_OR_UNSCALE_WORDS`` (it may clip gradients or unscale
# them). Found on the lowered bytes, where the expression needs no case folding: over the 42 MB
# of the 31-repository tree, 0.09 s against 0.6 s for the case-folding search.
CLIP_OR_UNSCALE = "clip_or_unscale"
_LOWERED_CLIP_OR_UNSCALE = re.compile(CLIP_OR_UNSCALE_WORDS.pattern.removeprefix(b"(?i)"))
CLASSES = (*TOKEN_CLASSES, FLOAT16_AUTOCAST, CLIP_OR_UNSCALE)


class _Search:
    """``token in data``, each token searched for once: ``seen`` holds the answers so far (the
    prefilter's among them) and is filled in."""

    __slots__ = ("data", "seen")

    def __init__(self, data: bytes, seen: dict[bytes, bool] | None) -> None:
        self.data = data
        self.seen = {} if seen is None else seen

    def __call__(self, token: bytes) -> bool:
        found = self.seen.get(token)
        if found is None:
            within = _WITHIN.get(token)
            found = self.seen[token] = (within is None or self(within)) and token in self.data
        return found


# A class that counts only beside one of these: Lightning's precision is read from the arguments
# of a ``Trainer(...)`` or ``Fabric(...)`` call (``float16_sites.framework_runs``).
_CLASS_NEEDS = {"precision": (b"Trainer", b"Fabric")}


def has_class(data: bytes, kind: str) -> bool:
    """Whether ``data`` holds a token of class ``kind`` (one of ``CLASSES``)."""
    if kind == FLOAT16_AUTOCAST:  # an autocast region, in float16 or on an accelerator
        return has_class(data, "autocast") and _float16_autocast(data)
    if kind == CLIP_OR_UNSCALE:
        return CLIP_OR_UNSCALE_WORDS.search(data) is not None
    return _holds_class(_Search(data, None), kind)


def _holds_class(holds: _Search, kind: str) -> bool:
    if not any(holds(token) for token in TOKEN_CLASSES[kind]):
        return False
    needs = _CLASS_NEEDS.get(kind)
    return needs is None or any(holds(token) for token in needs)


def token_classes(data: bytes, seen: dict[bytes, bool] | None = None) -> frozenset[str]:
    """The ``CLASSES`` that ``data`` holds. ``seen``: tokens already searched for (found or not),
    the prefilter's among them: taken from there rather than searched again, and filled in.
    Asked of every file of a tree, so written as plain loops (``has_class`` is the reference)."""
    known = {} if seen is None else seen
    found = []
    for kind, needs, tokens in _PLAN:
        # Its own tokens first: rarer than what they need beside them (``precision`` is in a
        # tenth of torch's modules, ``Fabric`` in none: searching for it would be a whole scan).
        for group in (tokens, needs) if needs else (tokens,):
            for token in group:
                held = known.get(token)
                if held is None:
                    within = _WITHIN.get(token)
                    if within is not None:
                        inside = known.get(within)
                        if inside is None:
                            inside = known[within] = within in data
                        held = inside and token in data
                    else:
                        held = token in data
                    known[token] = held
                if held:
                    break
            else:
                break  # no token of this group: not this class
        else:
            found.append(kind)
    if "autocast" in found and _float16_autocast(data):
        found.append(FLOAT16_AUTOCAST)
    lowered = data.lower()  # ASCII only, as the expression's case folding on bytes
    if (b"clip" in lowered or b"unscale_" in lowered) and _LOWERED_CLIP_OR_UNSCALE.search(lowered) is not None:
        found.append(CLIP_OR_UNSCALE)
    return frozenset(found)


# Per class: the tokens one of which it needs beside its own (``_CLASS_NEEDS``), and its own.
_PLAN = tuple((kind, _CLASS_NEEDS.get(kind, ()), tokens) for kind, tokens in TOKEN_CLASSES.items())


def _float16_autocast(data: bytes) -> bool:
    if b"cuda.amp" in data or b"autocast as " in data:
        return True
    return any(_FLOAT16_OR_DEVICE.search(call.group(1)) for call in _AUTOCAST_CALL.finditer(data))


# Import statements anywhere in a module's text: ``from X import a, b`` (also parenthesized) and
# ``import X.Y as Z, W``, each at the start of a line. A superset of what the linker follows:
# every call it resolves into another module goes through an import of the calling module (or of
# a class's module, for a base class), so a module whose imports cannot lead to a module cannot
# run its code.
# ``class Name(Base, pkg.Other[T], metaclass=M):`` at the start of a line (indented or not), its
# bases on one or more lines; matched where a search for ``class`` lands at a line's start.
_CLASS_STATEMENT = re.compile(rb"[ \t]*class[ \t]+(\w+)[ \t]*\(([^)]*)\)")


def class_statements(data: bytes) -> list[tuple[str, tuple[str, ...]]]:
    """Each ``class`` statement of the text with parenthesized bases, in order: the class's name
    and the last part of each base's spelling (``pkg.Base[T]``: ``Base``; keywords left out).
    What the project's subclass index is made of (``flow.Values.subclasses``). A search for the
    word, then a match at the start of its line: a line-anchored expression tried at every line
    took four times as long (0.34 s against 0.08 s over the 6,861 files of the 31-repository and
    torch trees, with the same statements found)."""
    found: list[tuple[str, tuple[str, ...]]] = []
    find = data.find
    start = find(b"class")
    while start != -1:
        line = data.rfind(b"\n", 0, start) + 1
        match = _CLASS_STATEMENT.match(data, line) if not data[line:start].strip(b" \t") else None
        if match is None:
            start = find(b"class", start + 5)
            continue
        shorts = []
        for base in match.group(2).split(b","):
            short = base.strip().rsplit(b".", 1)[-1].split(b"[", 1)[0]
            if short and b"=" not in base:
                shorts.append(short.decode(errors="replace"))
        found.append((match.group(1).decode(), tuple(shorts)))
        start = find(b"class", match.end())
    return found


class FileTokens(Record):
    """What the lint pass reads of a file's bytes for the project pass while it has them in hand
    (the project pass then reads the file for none of it): the token classes they hold
    (``token_classes``), their class statements (``class_statements``) and their imports
    (``import_targets``, as one string: ``packed_imports``)."""

    __slots__ = ("classes", "class_statements", "imports")

    def __init__(
        self, classes: frozenset[str], class_statements: list[tuple[str, tuple[str, ...]]], imports: str
    ) -> None:
        self.classes = classes
        self.class_statements = class_statements
        self.imports = imports


def file_tokens(data: bytes, seen: dict[bytes, bool] | None = None) -> FileTokens:
    return FileTokens(token_classes(data, seen), class_statements(data), packed_imports(import_targets(data)))


# The imports of every file of a tree travel from the lint pass to the project pass, where the
# import index reads them all. As lists of (target, plain) pairs they held 11 MB of the main
# process's memory on the 31-repository tree until the pairs were shared; as one string per file,
# a line per import (``+`` a plain ``import``, ``-`` a ``from`` import), 1.5 MB.
def packed_imports(pairs: list[tuple[str, bool]]) -> str:
    return "\n".join(f"{'+' if plain else '-'}{target}" for target, plain in pairs)


def unpacked_imports(packed: str) -> list[tuple[str, bool]]:
    return [(line[1:], line[0] == "+") for line in packed.split("\n")] if packed else []


_FROM_IMPORT = re.compile(rb"[ \t]*from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]*(\([^)]*\)|[^\n#;]*)")
_IMPORT = re.compile(rb"[ \t]*import[ \t]+([^\n#;]+)")
_NAME = re.compile(rb"[A-Za-z_]\w*")


def import_targets(data: bytes) -> list[tuple[str, bool]]:
    """The dotted targets of the imports in ``data``, each with whether it is a plain ``import``.

    Only the lines holding the word ``import`` are tried (a line-anchored regex over the whole
    text cost 0.74 s on the 46 MB of the torch tree; this, 0.1 s)."""
    found: list[tuple[str, bool]] = []
    from_end = 0
    last_line = -1
    at = data.find(b"import")
    while at >= 0:
        line = data.rfind(b"\n", 0, at) + 1
        if line != last_line:
            last_line = line
            if line >= from_end:
                match = _FROM_IMPORT.match(data, line)
                if match is not None:
                    from_end = match.end()
                    base = match.group(1).decode("ascii", "replace")
                    found.append((base, False))
                    for name in _NAME.findall(match.group(2)):
                        if name != b"as":
                            spelled = name.decode("ascii", "replace")
                            found.append(((f"{base}{spelled}" if base.endswith(".") else f"{base}.{spelled}"), False))
            match = _IMPORT.match(data, line)
            if match is not None:
                for part in match.group(1).split(b","):
                    words = part.split()
                    if words:
                        found.append((words[0].decode("ascii", "replace"), True))
        at = data.find(b"import", at + 6)
    return found
