"""Models under ``torch.compile``: observe them without changing what gets compiled.

Two things would otherwise go wrong when a traced script compiles its model:

- Dynamo runs a frame eagerly, uncompiled, while a ``TorchDispatchMode`` is active, so the op
  census would silently turn compiled code back into eager code and change its numerics. The
  session therefore stops the census the moment ``torch.compile`` (or ``Module.compile``) is
  called; the report says in one line that the census cannot see into compiled graphs.
- Dynamo inlines global module hooks into the graph it builds. ``outside_compiled`` makes a hook
  return at once while Dynamo traces, so nothing of ampdoctor ends up in a compiled graph; the
  hooks still run for the modules that execute eagerly (the compiled wrapper itself, graph
  breaks, models that are not compiled).
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, Optional

import torch

_is_compiling = torch.compiler.is_compiling

# torch warns that global module hooks also fire for the ``OptimizedModule`` wrapper; those hooks
# are ampdoctor's, not the script's, so the warning is not shown while tracing.
_GLOBAL_HOOKS_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks"


def outside_compiled(hook: Callable[..., Any]) -> Callable[..., Any]:
    """``hook``, skipped while Dynamo traces a frame (a plain function: Dynamo inlines it and
    sees only the early return, never the monitor it belongs to)."""

    def guarded(*args: Any) -> Any:
        if _is_compiling():
            return None
        return hook(*args)

    return guarded


class CompilePatch:
    """Wraps ``torch.compile`` and ``torch.nn.Module.compile`` to call ``on_compile`` first."""

    def __init__(self, on_compile: Callable[[], None]) -> None:
        self._on_compile = on_compile
        self._saved: Optional[tuple[Any, Any]] = None
        self._filter: Optional[tuple[object, ...]] = None

    def install(self) -> None:
        original_compile, original_method = torch.compile, torch.nn.Module.compile
        self._saved = (original_compile, original_method)
        notify = self._on_compile

        @functools.wraps(original_compile)
        def traced_compile(*args: Any, **kwargs: Any) -> Any:
            notify()
            return original_compile(*args, **kwargs)

        @functools.wraps(original_method)
        def traced_module_compile(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            notify()
            return original_method(module, *args, **kwargs)

        torch.compile = traced_compile
        # torch's class itself is patched while the session runs (``remove`` restores it).
        torch.nn.Module.compile = traced_module_compile  # type: ignore[method-assign, assignment]
        warnings.filterwarnings("ignore", message=_GLOBAL_HOOKS_WARNING, category=UserWarning)
        self._filter = warnings.filters[0]

    def remove(self) -> None:
        if self._saved is not None:
            torch.compile, torch.nn.Module.compile = self._saved  # type: ignore[method-assign]
            self._saved = None
        if self._filter is not None and self._filter in warnings.filters:
            warnings.filters.remove(self._filter)  # type: ignore[attr-defined]  # a list (typeshed: Sequence)
            mutated = getattr(warnings, "_filters_mutated", None)
            if mutated is not None:
                mutated()
        self._filter = None
