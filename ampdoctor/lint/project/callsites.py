"""Finding the calls that land on a function: the modules whose text may call it (``Callers``),
narrowed by the import edges, then each call record resolved by the linker."""

from __future__ import annotations

from collections.abc import Iterator

from .float16_reach import import_edges
from .flow import Values
from .link import Project, Target
from .reports import Callers

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from .shapes import CallRecord


# The ``kind`` that looks for the callers among the module itself and the modules that import
# it, whatever tokens they hold (a loop handed the scaler names no GradScaler). On the
# 31-repository tree AMP208's helpers asked this way take 0.08 s (most of it the import index);
# searching every module's text for their names took 0.28 s, the GradScaler modules alone 0.01 s.
IMPORTERS = "importers"


def callers_of(
    project: Project, callers: Callers, kind: str, module: str, name: str
) -> Iterator[tuple[str, CallRecord, Target]]:
    """The calls anywhere in the project that land on ``name`` in ``module`` (or on the
    method it overrides, called as ``self.name(...)`` in a base class), as (caller module,
    call record, target), from the modules whose text holds the token class ``kind`` (or, for
    ``IMPORTERS``, from the module and those that import it)."""
    for caller, call, target in calls_of(project, callers, kind, module, name):
        if target is not None:
            yield caller, call, target


def calls_of(
    project: Project, callers: Callers, kind: str, module: str, name: str
) -> Iterator[tuple[str, CallRecord, Target | None]]:
    """``callers_of``, and also the calls spelled with the function's name that resolve nowhere
    (target None): a check that must see every call goes silent on those."""
    short = name.rsplit(".", 1)[-1]
    overridden = None  # the classes whose method of that name ``name`` overrides
    imports = import_edges(project)
    if kind == IMPORTERS:
        # (and the modules it imports: a base class's loop calling ``self.helper(...)``)
        modules = sorted({module, *imports.importers(module), *imports.imported_by(module)})
        candidates = [rel for rel in modules if callers.names(rel, short)]
    else:
        candidates = callers.of(kind, name)
    for caller in candidates:
        if not imports.relates(caller, module):
            continue  # no import leads from one to the other: no call can land (not summarized)
        for call in project.calls_naming(caller, short):  # the spelling must name the function
            target = project.resolve_call(caller, call)
            if target is None:
                if call["callee"].rsplit(".", 1)[-1] == short:
                    yield caller, call, None
                continue
            if target.module == module and target.name == name:
                yield caller, call, target
            elif "." in name and target.name.rsplit(".", 1)[-1] == short and call["callee"].startswith("self."):
                # ``self.training_step(...)`` in a base class runs the subclass's override.
                if overridden is None:
                    overridden = set(Values(project).hierarchy(module, name.split(".", 1)[0])[1:])
                if (target.module, target.name.split(".", 1)[0]) in overridden:
                    yield caller, call, target
