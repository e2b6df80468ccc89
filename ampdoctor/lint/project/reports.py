"""What the cross-module checks share: the finding before it has a display path, and the
lazy search for the modules that may call a function or set something up."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Iterator

from ...records import Record
from .tokens import CLIP_OR_UNSCALE

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from .link import Project
    from .shapes import FunctionSummary, ModuleSummary

# What AMP211 costs, said the same way by every check that reports it.
RESUME = (
    "on resume the loss scale restarts at its initial value (65536) and the first steps are skipped while it backs off"
)


# The related location of a report reached through a call that is the place a file-local rule
# may already report (AMP211's ``torch.save``): the file's own finding there stands for it.
WRITTEN_HERE = "the checkpoint is written here, without the scaler's state"


def said_by_the_file(report: CrossReport, rel: str, taken: set[tuple[str, int]]) -> bool:
    """Whether ``report`` is said already, by the module's own findings or by a report attached
    to it before (``taken``): the same code at its line, or, for a report made at a call, at the
    place in the same module that the call reaches."""
    if (report.code, report.at[0]) in taken:
        return True
    return any(
        module == rel and message == WRITTEN_HERE and (report.code, at[0]) in taken
        for module, at, message in report.related
    )


class CrossReport(Record):
    """A finding before it has a display path: module (project-relative), position, message,
    help, and related locations as (module, position, message)."""

    __slots__ = ("at", "code", "help", "message", "module", "related")

    def __init__(
        self, code: str, module: str, at: list[int], message: str, help: str, related: list[tuple[str, list[int], str]]
    ) -> None:
        self.code = code
        self.module = module
        self.at = at
        self.message = message
        self.help = help
        self.related = related


def target_functions(project: Project, targets: list[str]) -> Iterator[tuple[str, str, FunctionSummary]]:
    """Each function of the checked modules that have a summary: (module, name, its summary)."""
    for module in targets:
        summary = project.summary(module)
        if summary is not None:
            for name, function in summary.get("functions", {}).items():
                yield module, name, function


def bfloat16_only(summary: ModuleSummary) -> bool:
    """Whether the module runs autocast, every region of it that may be on uses bfloat16, and its
    code names float16 nowhere (``summary.py`` tells that last part only of such modules)."""
    regions = summary.get("regions") or []
    return bool(regions) and all(r.get("dtype") == "bfloat16" for r in regions) and summary.get("float16_code") is False


# float16 named in a module's text: a dtype, an option, a cast, Lightning's precision.
_FLOAT16_TEXT = re.compile(rb"(?i)float16|fp16|\.half\(|16-mixed|HalfTensor")


def names_float16(callers: Callers, module: str) -> bool:
    """Whether the module's text names float16 anywhere (or cannot be read)."""
    data = callers.text(module) if callers.text is not None else None
    return data is None or _FLOAT16_TEXT.search(data) is not None


def withdrawn(code: str) -> str:
    """The code of a report that withdraws the module's own finding of ``code`` on its line:
    what the project shows contradicts what the file alone suggested (``run._withdraw``)."""
    return f"-{code}"


# What may follow ``def `` in a function's name: a word's bytes (those of a name spelled in other
# scripts too, which UTF-8 writes with bytes from 0x80 on).
_NAME_BYTES = rb"[A-Za-z0-9_\x80-\xff]"
_DEF_WORD = re.compile(rb"def (" + _NAME_BYTES + rb"*)")
_NAME = re.compile(_NAME_BYTES + rb"+")


class Callers:
    """The modules that may call a function, found lazily: those whose text holds the token
    class a rule needs (``store.TOKEN_CLASSES``) and the function's name as a word. ``mentions``
    tests a module's text for a string, ``names`` for a whole word; ``text``, where given, reads
    a module's bytes (``defining`` then indexes them once)."""

    def __init__(
        self,
        files: Iterable[str],
        has_class: Callable[[str, str], bool],
        mentions: Callable[[str, str], bool],
        names: Callable[[str, str], bool],
        text: Callable[[str], bytes | None] | None = None,
    ) -> None:
        self.files = sorted(files)
        self.has_class = has_class
        self.mentions = mentions
        self.names = names
        self.text = text
        self._by_class: dict[str, list[str]] = {}
        self._defined: dict[str, tuple[list[bytes], list[int]]] = {}

    def with_class(self, kind: str) -> list[str]:
        if kind not in self._by_class:
            # ``any``: every module (the name alone narrows them down, and the imports after it)
            self._by_class[kind] = (
                list(self.files) if kind == "any" else [r for r in self.files if self.has_class(r, kind)]
            )
        return self._by_class[kind]

    def of(self, kind: str, name: str) -> list[str]:
        self.with_class(kind)
        short = name.rsplit(".", 1)[-1]
        return [rel for rel in self._by_class[kind] if self.names(rel, short)]

    def defining(self, name: str, kind: str = "any") -> list[str]:
        """The modules whose text may define a function or method called ``name`` (among those
        that hold the token class ``kind``): those where ``def {name}`` occurs."""
        modules = self.with_class(kind)
        spelled = name.encode()
        if self.text is None or _NAME.fullmatch(spelled) is None:
            return [rel for rel in modules if self.mentions(rel, f"def {name}")]
        # The words after each ``def `` of those modules, sorted once: ``def {name}`` occurs where
        # one of them starts with the name. (On the 31-repository tree the checks asked 111
        # times, each of about 80 modules: 0.07 s of searching their texts one name at a time.)
        if kind not in self._defined:
            pairs = sorted(
                (word, index) for index, rel in enumerate(modules) for word in _DEF_WORD.findall(self.text(rel) or b"")
            )
            self._defined[kind] = ([word for word, _ in pairs], [index for _, index in pairs])
        words, where = self._defined[kind]
        found = set()
        at = bisect.bisect_left(words, spelled)
        while at < len(words) and words[at].startswith(spelled):
            found.add(where[at])
            at += 1
        return [modules[index] for index in sorted(found)]

    def defining_with_scaler(self, name: str) -> list[str]:
        """``defining`` among the modules that make or use a GradScaler."""
        return self.defining(name, "scaler")

    def clipping(self) -> list[str]:
        """The modules whose text may clip gradients or unscale them (``tokens.CLIP_OR_UNSCALE``)."""
        return self.with_class(CLIP_OR_UNSCALE)

    def handling(self, name: str) -> list[str]:
        """``defining`` among the modules whose text runs a backward or a step (the handlers of
        an event dispatched by name that may train: ``OptimizerCallback.on_batch_end``)."""
        return [rel for rel in self.defining(name) if self.mentions(rel, "backward") or self.mentions(rel, "step(")]
