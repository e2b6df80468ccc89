"""The linting half of the Python API (``ampdoctor.lint_source``, ``ampdoctor.lint_paths``), kept
out of the package's ``__init__`` so that ampdoctor's own modules (the tracer lints the files a
traced script imported) can call it without importing the package root."""

from __future__ import annotations

from collections.abc import Iterable

from .findings import Finding

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from pathlib import Path

    from .lint import LintRun


def lint_source(
    source: str, path: str = "<string>", *, select: Iterable[str] = ("AMP",), ignore: Iterable[str] = ()
) -> list[Finding]:
    """Lint one Python source text; returns its findings, ``# noqa`` comments honoured."""
    from .lint import lint_source as _lint_source

    return _lint_source(source, path, select=tuple(select), ignore=tuple(ignore))


def lint_paths(
    paths: Iterable[str | Path],
    *,
    select: Iterable[str] | None = None,
    ignore: Iterable[str] = (),
    config: str | Path | None = None,
) -> LintRun:
    """Lint files and folders like ``ampdoctor lint`` (pyproject.toml config is discovered)."""
    from pathlib import Path

    from .config import Settings, find_config, load_settings, validate_codes
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
