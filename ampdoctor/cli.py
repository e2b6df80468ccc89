"""The ``ampdoctor`` command: thin click wrappers around the lint engine, the catalog and trace.

Exit codes (lint): 0 nothing at or above ``--fail-on``; 1 findings (or, with ``--diff``,
changes a fix would make); 2 usage errors, bad configuration, unreadable or unparsable input.
Heavy modules (libcst, rich, torch) are imported inside the commands that need them.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Optional, Sequence

import click

from ._version import __version__

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
_SEVERITIES = ("info", "warning", "error")


class UsageError(Exception):
    """A one-line error for the user; exit code 2."""


def _fail(message: str) -> "click.exceptions.Exit":
    click.echo(f"ampdoctor: error: {message}", err=True)
    return click.exceptions.Exit(EXIT_ERROR)


def _split_codes(values: Sequence[str]) -> tuple[str, ...]:
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())


def _use_color(stream) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return hasattr(stream, "isatty") and stream.isatty()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="ampdoctor")
def main() -> None:
    """Find mixed-precision (torch.amp) bugs in PyTorch training code.

    \b
    ampdoctor lint PATH...        static checks, no torch needed
    ampdoctor trace train.py      run the script and instrument its AMP steps
    ampdoctor rules               every rule code
    ampdoctor rule AMP201         one rule's documentation
    """


# ---------------------------------------------------------------------------------------
# lint
# ---------------------------------------------------------------------------------------


@main.command("lint")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--output-format", type=click.Choice(["text", "concise", "json", "sarif", "github"]), default="text",
              show_default=True, envvar="AMPDOCTOR_OUTPUT_FORMAT", help="How to print findings.")
@click.option("-o", "--output-file", type=click.Path(dir_okay=False, path_type=Path), help="Write the report to a file.")
@click.option("--select", multiple=True, help="Rule codes or prefixes to enable (replaces the configured set).")
@click.option("--extend-select", multiple=True, help="Rule codes or prefixes to enable in addition.")
@click.option("--ignore", multiple=True, help="Rule codes or prefixes to disable.")
@click.option("--fail-on", type=click.Choice(_SEVERITIES), default=None,
              help="Lowest severity that makes the exit code 1 [default: warning].")
@click.option("--fix", is_flag=True, help="Apply safe fixes in place.")
@click.option("--unsafe-fixes", is_flag=True, help="Also apply fixes that may change behaviour.")
@click.option("--diff", is_flag=True, help="Show the fixes as a diff instead of writing them.")
@click.option("--show-suppressed", is_flag=True, help="Count findings silenced by noqa comments.")
@click.option("--exclude", multiple=True, help="Glob of files or folders to skip (repeatable).")
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="Use this pyproject.toml.")
@click.option("--isolated", is_flag=True, help="Ignore every configuration file.")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache (.ampdoctor_cache/).")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Worker processes [default: CPU count].")
def lint_command(paths, output_format, output_file, select, extend_select, ignore, fail_on, fix, unsafe_fixes,
                 diff, show_suppressed, exclude, config_file, isolated, no_cache, jobs) -> None:
    """Check Python files and notebooks for mixed-precision mistakes."""
    try:
        code = _lint(
            paths=list(paths) or [Path(".")],
            output_format=output_format,
            output_file=output_file,
            select=_split_codes(select),
            extend_select=_split_codes(extend_select),
            ignore=_split_codes(ignore),
            fail_on=fail_on,
            fix=fix,
            unsafe_fixes=unsafe_fixes,
            diff=diff,
            show_suppressed=show_suppressed,
            exclude=exclude,
            config_file=config_file,
            isolated=isolated,
            use_cache=not no_cache,
            jobs=jobs,
        )
    except UsageError as exc:
        raise _fail(str(exc)) from None
    raise click.exceptions.Exit(code)


def _settings(paths: Sequence[Path], config_file: Optional[Path], isolated: bool, known: list[str]):
    from .config import ConfigError, Settings, find_config, load_settings

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


def _lint(*, paths, output_format, output_file, select, extend_select, ignore, fail_on, fix, unsafe_fixes, diff,
          show_suppressed, exclude, config_file, isolated, use_cache, jobs) -> int:
    from .config import ConfigError, validate_codes
    from .findings import Severity
    from .lint import LintRequest, known_codes, lint_paths

    missing = [p for p in paths if not p.exists()]
    if missing:
        raise UsageError(f"no such file or folder: {missing[0]}")
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
    )
    run = lint_paths(paths, request)
    if fix and not diff:
        _write_fixes(run)
    if diff:
        return _print_diff(run)
    _report(run, output_format, output_file, show_suppressed, fix_mode=fix)
    if any(r.error for r in run.results):
        return EXIT_ERROR
    failing = [f for f in run.findings if f.severity >= settings.fail_on]
    return EXIT_FINDINGS if failing else EXIT_OK


def _write_fixes(run) -> None:
    from .lint.engine import write_result

    for result in run.results:
        if result.changed:
            try:
                write_result(Path(result.file_path), result)
            except OSError as exc:
                raise UsageError(f"cannot write {result.path}: {exc.strerror or exc}") from None


def _print_diff(run) -> int:
    from .lint.engine import unified_diff

    changed = 0
    for result in run.results:
        text = unified_diff(result)
        if text:
            click.echo(text, nl=False)
            changed += result.fixed
    if changed:
        click.echo(f"Would fix {changed} problem{'s' if changed != 1 else ''}.", err=True)
    else:
        click.echo("No fixes available.", err=True)
    if any(r.error for r in run.results):
        return EXIT_ERROR
    return EXIT_FINDINGS if changed else EXIT_OK


def _report(run, output_format: str, output_file: Optional[Path], show_suppressed: bool, fix_mode: bool) -> None:
    from .findings import Finding
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
    render(output_format, context, stream, color=_use_color(stream))


# ---------------------------------------------------------------------------------------
# rules / rule
# ---------------------------------------------------------------------------------------


@main.command("rules")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def rules_command(output_format: str) -> None:
    """List every rule: code, name, severity, fixable, summary."""
    from .catalog import all_rules

    rules = list(all_rules().values())
    if output_format == "json":
        import json

        data = [
            {"code": r.code, "name": r.name, "severity": r.severity.label, "fixable": r.fixable,
             "origin": r.origin, "summary": r.summary}
            for r in rules
        ]
        click.echo(json.dumps(data, indent=2))
        return
    stream = sys.stdout
    if not (hasattr(stream, "isatty") and stream.isatty()):
        # Piped or redirected: one line per rule, aligned, never wrapped.
        width = max(len(r.name) for r in rules)
        for r in rules:
            click.echo(f"{r.code:<7} {r.name:<{width}}  {r.severity.label:<8} {r.fixable:<9} {r.origin:<6} {r.summary}")
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(file=stream, force_terminal=_use_color(stream), no_color=not _use_color(stream),
                      highlight=False)
    table = Table(box=None, pad_edge=False, show_edge=False)
    for column in ("code", "name", "severity", "fix", "kind", "summary"):
        table.add_column(column, overflow="fold" if column == "summary" else "ignore", no_wrap=column != "summary")
    for rule in rules:
        table.add_row(rule.code, rule.name, rule.severity.label, rule.fixable, rule.origin, rule.summary)
    console.print(table)


@main.command("rule")
@click.argument("code")
def rule_command(code: str) -> None:
    """Show the documentation of one rule (by code or name)."""
    from .catalog import find_rule

    rule = find_rule(code)
    if rule is None:
        raise _fail(f"unknown rule {code!r}; run 'ampdoctor rules' for the list")
    stream = sys.stdout
    color = _use_color(stream)
    from rich.console import Console
    from rich.markdown import Markdown

    console = Console(file=stream, force_terminal=color, no_color=not color, highlight=False)
    fix = {"no": "no", "safe": "yes", "unsafe": "with --unsafe-fixes", "sometimes": "sometimes"}[rule.fixable]
    console.print(f"{rule.code} {rule.name}  (severity: {rule.severity.label}, fixable: {fix}, {rule.origin})",
                  markup=False)
    # The example markers (bad / good / fixed ...) are for the tests; readers see plain Python.
    body = re.sub(r"^```python[^\n]*", "```python", rule.body, flags=re.M)
    console.print(Markdown(body))


def _register_trace() -> None:
    try:
        from .trace.cli import trace_command
    except ImportError:  # pragma: no cover - the trace package ships with ampdoctor
        return
    main.add_command(trace_command, "trace")


_register_trace()


def run() -> None:  # pragma: no cover - entry point
    main()
