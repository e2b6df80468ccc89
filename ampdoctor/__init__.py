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

from collections.abc import Iterable

from ._version import __version__
from .findings import Applicability, Edit, Finding, Fix, Location, Severity

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from pathlib import Path

    from .lint import LintRun

__all__ = [
    "__version__",
    "Applicability",
    "Edit",
    "Finding",
    "Fix",
    "Location",
    "Severity",
    "lint_source",
    "lint_paths",
    "trace_session",
]


def lint_source(source: str, path: str = "<string>", *, select: Iterable[str] = ("AMP",),
                ignore: Iterable[str] = ()) -> list[Finding]:
    """Lint one Python source text; returns its findings, ``# noqa`` comments honoured."""
    from .lint import lint_source as _lint_source

    return _lint_source(source, path, select=tuple(select), ignore=tuple(ignore))


def lint_paths(paths: Iterable[str | Path], *, select: Iterable[str] | None = None,
               ignore: Iterable[str] = (), config: str | Path | None = None) -> LintRun:
    """Lint files and folders like ``ampdoctor lint`` (pyproject.toml config is discovered)."""
    from pathlib import Path

    from .config import find_config, load_settings, Settings, validate_codes
    from .lint import LintRequest, known_codes
    from .lint import lint_paths as _lint_paths

    targets = [Path(p) for p in paths]
    known = known_codes()
    found = Path(config) if config else find_config(targets[0] if targets else Path.cwd())
    settings = load_settings(found, known) if found else Settings(root=Path.cwd())
    if select is not None:
        settings.select = validate_codes(select, known, "select")
    settings.ignore += validate_codes(ignore, known, "ignore")
    return _lint_paths(targets, LintRequest(settings=settings, codes=settings.enabled_codes(known)))


def __getattr__(name: str) -> object:
    if name == "trace_session":
        from .trace.session import trace_session

        return trace_session
    raise AttributeError(f"module 'ampdoctor' has no attribute {name!r}")
