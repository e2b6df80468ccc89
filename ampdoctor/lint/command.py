"""The work of ``ampdoctor lint``, without the option parser.

``cli.py`` parses options with click and calls ``run_lint``; the console entry point calls it
directly for the common invocation with file names only (what a pre-commit hook runs), so that
linting one file does not pay for importing click. Both paths share everything below.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class UsageError(Exception):
    """A one-line error for the user; exit code 2."""


def use_color(stream) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return hasattr(stream, "isatty") and stream.isatty()


def _settings(paths: Sequence[Path], config_file: Path | None, isolated: bool, known: list[str]):
    from ..config import ConfigError, Settings, find_config, load_settings

    try:
        if isolated:
            return Settings(root=Path.cwd())
        if config_file is not None:
            if not config_file.is_file():
                raise UsageError(f"config file not found: {config_file}")
            return load_settings(config_file, known)
        found = find_config(paths[0] if paths else Path.cwd())
        return load_settings(found, known) if found else Settings(root=Path.cwd())
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def run_lint(
    *,
    paths,
    output_format="text",
    output_file=None,
    select=(),
    extend_select=(),
    ignore=(),
    fail_on=None,
    fix=False,
    unsafe_fixes=False,
    diff=False,
    show_suppressed=False,
    exclude=(),
    config_file=None,
    isolated=False,
    use_cache=True,
    jobs=None,
    project=True,
) -> int:
    """``ampdoctor lint`` with its options; the defaults are the command line's."""
    from ..config import ConfigError, validate_codes
    from ..findings import Severity
    from . import LintRequest, known_codes, lint_paths

    # A path that does not exist (a typo, a dangling link) is one line; the others are checked.
    missing = [p for p in paths if not p.exists()]
    paths = [p for p in paths if p.exists()]
    if missing and not paths:
        raise UsageError(f"no such file or folder: {missing[0]}")
    for path in missing:
        print(f"ampdoctor: error: no such file or folder: {path}", file=sys.stderr)
    known = known_codes()
    settings = _settings(paths, config_file, isolated, known)
    try:
        if select:
            settings.select = validate_codes(select, known, "--select")
        settings.extend_select += validate_codes(extend_select, known, "--extend-select")
        settings.ignore += validate_codes(ignore, known, "--ignore")
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    if fail_on:
        settings.fail_on = Severity.parse(fail_on)
    request = LintRequest(
        settings=settings,
        codes=settings.enabled_codes(known),
        fix=fix or diff,
        unsafe_fixes=unsafe_fixes,
        jobs=jobs,
        extra_exclude=tuple(exclude),
        use_cache=use_cache,
        project=project,
    )
    run = lint_paths(paths, request)
    if fix and not diff:
        _write_fixes(run)
    _print_errors(run)
    if diff:
        code = _print_diff(run)
        return EXIT_ERROR if missing else code
    _report(run, output_format, output_file, show_suppressed, fix_mode=fix)
    if missing or any(r.error for r in run.results):
        return EXIT_ERROR
    failing = [f for f in run.findings if f.severity >= settings.fail_on]
    return EXIT_FINDINGS if failing else EXIT_OK


def _write_fixes(run) -> None:
    """Write every changed file; one that cannot be written is reported and the rest still are."""
    from .writing import WriteError, write_result

    for result in run.results:
        if result.changed:
            try:
                write_result(Path(result.file_path), result)
            except (OSError, WriteError) as exc:
                reason = exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc)
                result.error = f"not fixed: {reason}"
                result.fixed = 0
                _as_read(result)


def _as_read(result) -> None:
    """The file was not written: its report is that of the text as it was read, the findings
    the fixes would have removed included."""
    if result.unfixed is None:
        return
    findings, suppressed, cells = result.unfixed
    result.findings, result.suppressed = findings, suppressed
    if cells:
        result.cells = cells
    result.source, result.original, result.notebook = result.original, None, None


def _print_errors(run) -> None:
    """One line per file whose error no AMP000 finding shows (exit code 2 follows)."""
    for result in run.results:
        error = result.unreported_error
        if error is not None:
            print(f"ampdoctor: error: {result.path}: {error}", file=sys.stderr)


def _print_diff(run) -> int:
    from .writing import unified_diff

    changed = 0
    for result in run.results:
        text = unified_diff(result)
        if text:
            sys.stdout.write(text)
            changed += result.fixed
    sys.stdout.flush()
    if changed:
        print(f"Would fix {changed} problem{'s' if changed != 1 else ''}.", file=sys.stderr)
    else:
        print("No fixes available.", file=sys.stderr)
    if any(r.error for r in run.results):
        return EXIT_ERROR
    return EXIT_FINDINGS if changed else EXIT_OK


def _report(run, output_format: str, output_file: Path | None, show_suppressed: bool, fix_mode: bool) -> None:
    from ..findings import Finding
    from .report import ReportContext, render, source_key

    findings = sorted(run.findings, key=Finding.sort_key)
    sources: dict[str, str] = {}
    for result in run.results:
        if result.cells:
            for cell, text in result.cells.items():
                sources[source_key(result.path, cell)] = text
        elif result.source is not None and result.findings:
            sources[result.path] = result.source
    unsafe = sum(1 for f in findings if f.fix is not None and not f.fix.is_safe)
    context = ReportContext(
        findings=findings,
        sources=sources,
        files_checked=run.files_checked,
        suppressed=run.suppressed if show_suppressed else None,
        fixed=run.fixed,
        unsafe_fixes_available=unsafe,
        fix_mode=fix_mode,
    )
    if output_file is not None:
        try:
            with open(output_file, "w", encoding="utf-8") as stream:
                render(output_format, context, stream, color=False)
        except OSError as exc:
            raise UsageError(f"cannot write {output_file}: {exc.strerror or exc}") from None
        return
    stream = sys.stdout
    render(output_format, context, stream, color=use_color(stream))
