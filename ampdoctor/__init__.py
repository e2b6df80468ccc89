"""ampdoctor: find mixed-precision (torch.amp) bugs in PyTorch training code.

The Python API::

    import ampdoctor

    findings = ampdoctor.lint_source(code)                 # one source text
    run = ampdoctor.lint_paths(["train.py", "src/"])       # files and folders
    for finding in run.findings: print(finding.code, finding.message)

    with ampdoctor.trace_session(steps=None) as session:   # needs torch (the [trace] extra)
        train()
    session.report().print()

Importing ampdoctor imports neither torch nor libcst; they load when first used.
"""

from __future__ import annotations

from ._version import __version__
from .api import lint_paths, lint_source
from .findings import Applicability, Edit, Finding, Fix, Location, Severity

__all__ = [
    "Applicability",
    "Edit",
    "Finding",
    "Fix",
    "Location",
    "Severity",
    "__version__",
    "lint_paths",
    "lint_source",
    "trace_session",
]


def __getattr__(name: str) -> object:
    if name == "trace_session":
        from .trace.session import trace_session

        return trace_session
    raise AttributeError(f"module 'ampdoctor' has no attribute {name!r}")
