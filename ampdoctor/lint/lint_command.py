"""The work of ``ampdoctor lint``, without the option parser.

``cli.py`` parses options with click and calls ``run_lint``; the console entry point calls it
directly for the common invocation with file names only (what a pre-commit hook runs), so that
linting one file does not pay for importing click. Both paths share everything below.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Sequence
from pathlib import Path

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TextIO

    from ..config import Settings
    from ..config_tree import Resolver
    from . import LintRequest, LintRun
    from .engine import FileResult

    # ``--config``: none, one, or each occurrence of the option.
    _ConfigOption = str | Path | Sequence[str | Path] | None

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class UsageError(Exception):
    """A one-line error for the user; exit code 2."""


def use_color(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return hasattr(stream, "isatty") and stream.isatty()


def _first(resolver: Resolver, paths: Sequence[Path]) -> Settings:
    from ..config import ConfigError

    try:
        return resolver.for_path(paths[0] if paths else Path.cwd())
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def _resolver(
    paths: Sequence[Path],
    config_file: _ConfigOption,
    isolated: bool,
    known: list[str],
    adjust: Callable[[Settings], None] | None = None,
) -> Resolver:
    """Each file's settings (``config_tree.py``). ``config_file``: ``--config``, once or repeated:
    at most one configuration file, and inline ``KEY = VALUE`` overrides; ``--isolated`` and a
    file named there give every file the same settings."""
    from ..config import ConfigError, Settings, load_settings, parse_override
    from ..config_tree import Resolver

    values = [] if config_file is None else [config_file] if isinstance(config_file, (str, Path)) else list(config_file)
    try:
        files, overrides = [], {}
        for value in values:
            text = str(value)
            if "=" not in text or Path(text).is_file():
                files.append(Path(text))
            else:
                overrides.update(parse_override(text, known))
        if len(files) > 1:
            raise UsageError(f"--config names one configuration file, not {len(files)}: {', '.join(map(str, files))}")
        if isolated:
            from ..config import settings_from_table

            fixed = settings_from_table(overrides, known, root=Path.cwd(), label="--config ") if overrides else None
            return Resolver(known, fixed=fixed or Settings(root=Path.cwd()), adjust=adjust)
        if files:
            if not files[0].is_file():
                raise UsageError(f"config file not found: {files[0]}")
            return Resolver(known, fixed=load_settings(files[0], known, overrides), adjust=adjust)
        return Resolver(known, overrides=overrides, adjust=adjust)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def run_lint(
    *,
    paths: Sequence[Path],
    output_format: str = "text",
    output_file: Path | None = None,
    select: Sequence[str] = (),
    extend_select: Sequence[str] = (),
    ignore: Sequence[str] = (),
    fail_on: str | None = None,
    fix: bool = False,
    unsafe_fixes: bool = False,
    diff: bool = False,
    show_suppressed: bool = False,
    exclude: Sequence[str] = (),
    config_file: _ConfigOption = None,
    isolated: bool = False,
    use_cache: bool = True,
    jobs: int | None = None,
    project: bool = True,
    exit_zero: bool = False,
    exit_non_zero_on_fix: bool = False,
    statistics: bool = False,
    show_fixes: bool = False,
    quiet: int = 0,
    show_files: bool = False,
    show_settings: bool = False,
    stdin_filename: str | None = None,
    add_noqa: bool = False,
    watch: bool = False,
    verbose: bool = False,
) -> int:
    """``ampdoctor lint`` with its options; the defaults are the command line's. ``quiet``: 1
    prints the findings only (``--quiet``), 2 nothing but errors (``--silent``)."""
    from ..config import ConfigError, validate_codes
    from ..findings import Severity
    from . import LintRequest, known_codes, lint_paths
    from .stdin import STDIN_NAME

    if verbose:
        from . import verbose as notes

        notes.enable()
    if watch:
        return _watch(locals())
    from_stdin = stdin_filename is not None or any(str(p) == STDIN_NAME for p in paths)
    if from_stdin:
        others = [p for p in paths if str(p) != STDIN_NAME]
        if (others and others != [Path(".")]) or add_noqa or show_files:
            raise UsageError("standard input is linted on its own: no other path, --add-noqa or --show-files")
        paths = [Path(stdin_filename or STDIN_NAME)]
    if add_noqa and (fix or diff):
        raise UsageError("--add-noqa cannot be combined with --fix or --diff")
    # A path that does not exist (a typo, a dangling link) is one line; the others are checked.
    missing = [] if from_stdin else [p for p in paths if not p.exists()]
    paths = paths if from_stdin else [p for p in paths if p.exists()]
    if missing and not paths:
        raise UsageError(f"no such file or folder: {missing[0]}")
    for path in missing:
        print(f"ampdoctor: error: no such file or folder: {path}", file=sys.stderr)
    known = known_codes()
    try:
        chosen = validate_codes(select, known, "--select") if select else None
        added = validate_codes(extend_select, known, "--extend-select")
        dropped = validate_codes(ignore, known, "--ignore")
    except ConfigError as exc:
        raise UsageError(str(exc)) from None

    def adjust(own: Settings) -> None:  # the command line's options, over each file's configuration
        if chosen is not None:
            own.select = chosen
        own.extend_select += added
        own.ignore += dropped
        if fail_on:
            own.fail_on = Severity.parse(fail_on)

    resolver = _resolver(paths, config_file, isolated, known, adjust)
    settings = _first(resolver, paths)
    if show_settings:
        _print_settings(settings, known, paths)
        return EXIT_OK
    request = LintRequest(
        settings=settings,
        codes=resolver.codes(settings),
        fix=fix or diff,
        unsafe_fixes=unsafe_fixes,
        jobs=jobs,
        extra_exclude=tuple(exclude),
        use_cache=use_cache,
        project=project,
    )
    if show_files:
        _print_files(paths, request, resolver)
        return EXIT_ERROR if missing else EXIT_OK
    stream = sys.stdout
    if from_stdin:
        from . import LintRun
        from .stdin import lint_text, read_stdin

        result = lint_text(read_stdin(), str(paths[0]), settings, request.codes, request.fix, unsafe_fixes, project)
        run = LintRun([result], files_checked=1)
        if fix and not diff:
            sys.stdout.write(result.source if result.source is not None else "")
            sys.stdout.flush()
            stream = sys.stderr  # the fixed text is the output; the report goes beside it
    else:
        try:
            run = lint_paths(paths, request, resolver=resolver)
        except ConfigError as exc:  # a sub-project's configuration, found during the walk
            raise UsageError(str(exc)) from None
        if fix and not diff:
            _write_fixes(run)
    _print_errors(run)
    if diff:
        code = _print_diff(run)
        return EXIT_ERROR if missing else (EXIT_OK if exit_zero else code)
    if add_noqa:
        return _add_noqa(run, quiet) or (EXIT_ERROR if missing else EXIT_OK)
    if not run.files_checked and not missing and not quiet:
        print("ampdoctor: warning: no Python files found under the given paths", file=sys.stderr)
    if quiet < 2:
        if statistics:
            from .report.statistics import render_statistics

            render_statistics(run.findings, stream, output_format in ("json", "json-lines"))
        else:
            _report(run, output_format, output_file, show_suppressed, fix_mode=fix, quiet=quiet > 0, stream=stream)
        if show_fixes and fix and output_format in _HUMAN_FORMATS:
            _print_fixed(run, stream)
    if missing or any(r.error for r in run.results):
        return EXIT_ERROR
    if exit_zero:
        return EXIT_OK
    if exit_non_zero_on_fix and run.fixed:
        return EXIT_FINDINGS
    failing = [f for r in run.results for f in r.findings if f.severity >= resolver.for_file(r.file_path).fail_on]
    return EXIT_FINDINGS if failing else EXIT_OK


# The formats for people, after which ``--show-fixes`` lists what was fixed.
_HUMAN_FORMATS = ("text", "concise", "grouped")


def _watch(options: dict[str, Any]) -> int:
    """``--watch``: the same run again after each change (watch.py)."""
    from . import LintRequest
    from .gc_budget import ending
    from .watch import watch

    ending(False)  # a watch goes on: what one run holds is not left to the end of the process
    options = {k: v for k, v in options.items() if k in _RUN_OPTIONS}
    options["watch"] = False
    if options["fix"] or options["diff"] or options["add_noqa"] or options["stdin_filename"] is not None:
        raise UsageError("--watch only reports: not with --fix, --diff, --add-noqa or standard input")
    paths = [p for p in options["paths"] if p.exists()]

    def once() -> int:
        try:
            return run_lint(**options)
        except UsageError as exc:
            print(f"ampdoctor: error: {exc}", file=sys.stderr)
            return EXIT_ERROR

    def files() -> list[str]:
        from . import file_discovery, known_codes

        try:
            resolver = _resolver(paths, options["config_file"], options["isolated"], known_codes())
            settings = _first(resolver, paths)
        except UsageError:
            return []
        request = LintRequest(settings=settings, codes=frozenset(), extra_exclude=tuple(options["exclude"]))
        return list(file_discovery(request, resolver).names(paths))

    return watch(once, files)


_RUN_OPTIONS = frozenset(run_lint.__code__.co_varnames[: run_lint.__code__.co_kwonlyargcount])


def _print_files(paths: Sequence[Path], request: LintRequest, resolver: Resolver) -> None:
    """``--show-files``: the files a run would check, one per line, sorted."""
    from . import file_discovery

    for name in sorted(file_discovery(request, resolver).names(paths)):
        print(name)
    sys.stdout.flush()


def _print_settings(settings: Settings, known: list[str], paths: Sequence[Path]) -> None:
    """``--show-settings``: the configuration the first path is checked with."""
    per_file = ", ".join(f"{pattern} = {list(codes)}" for pattern, codes in settings.per_file_ignores)
    rows = [
        ("path", str(paths[0]) if paths else "."),
        ("configuration", str(settings.source) if settings.source else "(none: defaults)"),
        ("root", str(settings.root)),
        ("select", list(settings.select)),
        ("extend-select", list(settings.extend_select)),
        ("ignore", list(settings.ignore)),
        ("per-file-ignores", per_file or "(none)"),
        ("exclude", list(settings.exclude)),
        ("respect-gitignore", str(settings.respect_gitignore).lower()),
        ("fail-on", settings.fail_on.label),
        ("project", str(settings.project).lower()),
        ("enabled codes", ", ".join(sorted(settings.enabled_codes(known)))),
    ]
    width = max(len(key) for key, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


def _add_noqa(run: LintRun, quiet: int) -> int:
    """``--add-noqa``: the directives written; 2 when a file could not be written, else 0."""
    from .add_noqa import add_noqa
    from .report import plural

    outcome = add_noqa(run.results)
    for path, reason in outcome.errors:
        print(f"ampdoctor: error: {path}: not written: {reason}", file=sys.stderr)
    if quiet < 2:
        print(f"Added {plural(outcome.added, 'noqa directive')}.", file=sys.stderr)
        if outcome.skipped:
            print(
                f"{plural(outcome.skipped, 'finding')} on lines that end inside a string or a continued line: "
                "no directive added.",
                file=sys.stderr,
            )
    return EXIT_ERROR if outcome.errors else EXIT_OK


def _print_fixed(run: LintRun, stream: TextIO) -> None:
    from .report.statistics import fixed_by_file, fixed_lines

    lines = fixed_lines(fixed_by_file(run.results))
    if lines:
        stream.write("\n".join(lines) + "\n")


def _write_fixes(run: LintRun) -> None:
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


def _as_read(result: FileResult) -> None:
    """The file was not written: its report is that of the text as it was read, the findings
    the fixes would have removed included."""
    if result.unfixed is None:
        return
    findings, suppressed, cells = result.unfixed
    result.findings, result.suppressed = findings, suppressed
    if cells:
        result.cells = cells
    result.source, result.original, result.notebook = result.original, None, None


def _print_errors(run: LintRun) -> None:
    """One line per file whose error no AMP000 finding shows (exit code 2 follows)."""
    for result in run.results:
        error = result.unreported_error
        if error is not None:
            print(f"ampdoctor: error: {result.path}: {error}", file=sys.stderr)


def _print_diff(run: LintRun) -> int:
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


def _report(
    run: LintRun,
    output_format: str,
    output_file: Path | None,
    show_suppressed: bool,
    fix_mode: bool,
    quiet: bool = False,
    stream: TextIO | None = None,
) -> None:
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
        quiet=quiet,
    )
    # A file name may hold bytes that are not UTF-8 (read as surrogates): written back as the
    # bytes they are, where a strict stream would stop the report with an encoding error.
    if output_file is not None:
        try:
            with open(output_file, "w", encoding="utf-8", errors="surrogateescape") as stream:
                render(output_format, context, stream, color=False)
        except OSError as exc:
            raise UsageError(f"cannot write {output_file}: {exc.strerror or exc}") from None
        return
    stream = sys.stdout if stream is None else stream
    if stream is sys.stdout and isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
        stream.reconfigure(errors="surrogateescape")
    render(output_format, context, stream, color=use_color(stream))
