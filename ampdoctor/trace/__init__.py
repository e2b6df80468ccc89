"""The runtime half of ampdoctor: trace real mixed-precision training steps.

``ampdoctor.trace.trace_cli`` holds the ``ampdoctor trace`` command; ``ampdoctor.trace.session`` the
``TraceSession`` both the command and the Python API use (see its docstring). Importing this
package does not import torch: the names below load the session on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TraceSession", "trace_session"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import session

        return getattr(session, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
