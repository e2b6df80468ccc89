"""Linting standard input: ``ampdoctor lint -`` or ``--stdin-filename NAME`` (what editors and
formatter pipelines send). The text is checked as the file ``NAME`` would be: that name's
per-file ignores apply, and findings carry it as their path. Calls between the text's own
functions are followed (a project of one module, as ``lint_source``); the rest of the project
is not read, since the text on disk may not be what was sent.
"""

from __future__ import annotations

from pathlib import Path

STDIN_NAME = "-"


def read_stdin() -> bytes:
    import sys

    return sys.stdin.buffer.read()


def lint_text(data: bytes, display: str, settings, codes: frozenset[str], fix: bool, unsafe_fixes: bool, project: bool):
    """The ``engine.FileResult`` of linting ``data`` as the file ``display``: with ``fix``, its
    ``source`` is the fixed text (``original`` the text read, when fixes changed it)."""
    from .engine import FileResult, FixError, LintOptions, check_source, decode_source, fix_source

    result = FileResult(display)
    try:
        source = decode_source(data)
    except ValueError as exc:
        result.error = str(exc) if str(exc).startswith("cannot decode") else f"cannot decode: {exc}"
        return result
    ignored = settings.ignored_for(Path(display)) if settings.per_file_ignores and display != STDIN_NAME else ()
    options = LintOptions(codes, fix, unsafe_fixes, ignored, summaries=project and not fix)
    result.source = source
    fixing = fix
    if fix:
        try:
            new_source, fixed, findings, suppressed, parsed = fix_source(source, display, options)
        except FixError as exc:
            result.error, fixing = str(exc), False
        else:
            if new_source != source:
                result.original, result.source = source, new_source
            result.fixed = fixed
    if not fixing:
        summary: list = []
        findings, suppressed, parsed = check_source(source, display, options, summary)
        if parsed and summary:
            from .project.run import link_source

            findings = link_source(findings, summary[0], source, display, codes)
    result.findings, result.suppressed, result.parsed = findings, suppressed, parsed
    if not parsed and findings and result.error is None:
        result.error = findings[0].message
    return result
