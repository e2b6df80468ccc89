"""Linting standard input: ``ampdoctor lint -`` or ``--stdin-filename NAME`` (what editors and
formatter pipelines send). The text is checked as an editor's unsaved text is (``unsaved.py``):
as the file ``NAME`` would be were it saved, its per-file ignores and its project analysis
included (the other modules from disk, this one from the text); ``-`` or a name that is not a
file on disk is a project of one module, as ``lint_source`` checks a text.
"""

from __future__ import annotations

from pathlib import Path

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from ..config import Settings
    from .engine import FileResult

STDIN_NAME = "-"


def read_stdin() -> bytes:
    import sys

    return sys.stdin.buffer.read()


def lint_text(
    data: bytes, display: str, settings: Settings, codes: frozenset[str], fix: bool, unsafe_fixes: bool, project: bool
) -> FileResult:
    """The ``engine.FileResult`` of linting ``data`` as the file ``display`` (as an editor's
    text is linted: ``unsaved.py``): with ``fix``, its ``source`` is the fixed text
    (``original`` the text read, when fixes changed it)."""
    from .engine import FileResult, LintOptions, decode_source, fix_source
    from .fixes import FixError
    from .unsaved import unsaved_result

    try:
        source = decode_source(data)
    except ValueError as exc:
        result = FileResult(display)
        result.error = str(exc) if str(exc).startswith("cannot decode") else f"cannot decode: {exc}"
        return result
    if fix:
        ignored = settings.ignored_for(Path(display)) if settings.per_file_ignores else ()
        try:
            new_source, fixed, findings, suppressed, parsed = fix_source(
                source, display, LintOptions(codes, fix, unsafe_fixes, ignored)
            )
        except FixError as exc:
            result = unsaved_result(source, display, settings, codes, project)
            result.error = str(exc)
            return result
        result = FileResult(display, findings, suppressed, source=new_source, parsed=parsed)
        if new_source != source:
            result.original = source
        result.fixed = fixed
        if not parsed:
            result.error = findings[0].message
        return result
    return unsaved_result(source, display, settings, codes, project)
