"""Linting the text an editor holds for a file: as ``ampdoctor lint FILE`` would lint the file if
the text were saved, the project analysis included.

The text's own rules run on the text; the project analysis reads every other module of the
file's project from disk (through the summary cache ``ampdoctor lint`` keeps, so a project it
has linted before costs little) and this module from the text. The caches never keep what was
made from the text: it is not what the file holds.
"""

from __future__ import annotations

import os
from pathlib import Path

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from ..config import Settings
    from ..findings import Finding
    from .engine import FileResult
    from .project.shapes import ModuleSummary


def lint_unsaved(source: str, path: str, settings: Settings, codes: frozenset[str]) -> list[Finding]:
    """The findings of ``source`` as the text of the file ``path`` (``unsaved_result``)."""
    return unsaved_result(source, path, settings, codes).findings


def unsaved_result(
    source: str, path: str, settings: Settings, codes: frozenset[str], project: bool = True
) -> FileResult:
    """The ``engine.FileResult`` of ``source`` as the text of the file ``path`` (suppressions
    honoured), under ``settings`` with ``codes`` enabled. Where the file is not on disk (a new
    buffer, standard input), calls are followed between the text's own functions only; with the
    project analysis off (``project`` or the settings' ``project = false``), not at all."""
    from .engine import FileResult, LintOptions, check_source

    ignored = settings.ignored_for(Path(path)) if settings.per_file_ignores else ()
    options = LintOptions(codes, per_file_ignored=ignored, summaries=project and settings.project)
    summary: list[ModuleSummary] = []
    findings, suppressed, parsed = check_source(source, path, options, summary)
    result = FileResult(path, findings, suppressed, source=source, parsed=parsed, file_path=os.path.abspath(path))
    if not parsed:
        result.error = findings[0].message
        return result
    if not summary:
        return result
    if not (path.endswith(".py") and os.path.isfile(path)):
        from .project.run import link_source

        result.findings = link_source(findings, summary[0], source, path, codes)
        return result
    from .project.run import link_results

    result.summary = summary[0]
    try:
        # One process: an editor's server lints in a thread, where forking workers is unsafe.
        link_results([result], settings, codes, True, Path.cwd(), jobs=1, unsaved=True)
    except Exception:
        if os.environ.get("AMPDOCTOR_DEBUG"):
            raise
        result.findings, result.summary = findings, None  # the file's own findings stand
    return result
