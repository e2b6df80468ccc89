"""The ``ampdoctor`` command: thin click wrappers around the lint engine, the catalog and trace.

Exit codes (lint): 0 nothing at or above ``--fail-on``; 1 findings (or, with ``--diff``,
changes a fix would make); 2 usage errors, bad configuration, unreadable or unparsable input.
Heavy modules (libcst, rich, torch) are imported inside the commands that need them.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from ._version import __version__
from .lint.lint_command import EXIT_ERROR, UsageError, run_lint
from .lint.lint_command import use_color as _use_color
from .lint.report import FORMATS

_SEVERITIES = ("info", "warning", "error")


def _fail(message: str) -> click.exceptions.Exit:
    click.echo(f"ampdoctor: error: {message}", err=True)
    return click.exceptions.Exit(EXIT_ERROR)


def _split_codes(values: Sequence[str]) -> tuple[str, ...]:
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())


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
@click.option(
    "--output-format",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    envvar="AMPDOCTOR_OUTPUT_FORMAT",
    help="How to print findings.",
)
@click.option(
    "-o", "--output-file", type=click.Path(dir_okay=False, path_type=Path), help="Write the report to a file."
)
@click.option("--select", multiple=True, help="Rule codes or prefixes to enable (replaces the configured set).")
@click.option("--extend-select", multiple=True, help="Rule codes or prefixes to enable in addition.")
@click.option("--ignore", multiple=True, help="Rule codes or prefixes to disable.")
@click.option(
    "--fail-on",
    type=click.Choice(_SEVERITIES),
    default=None,
    help="Lowest severity that makes the exit code 1 [default: warning]. A file that cannot be read or parsed "
    "(AMP000) always makes it 2.",
)
@click.option("--fix", is_flag=True, help="Apply safe fixes in place.")
@click.option("--unsafe-fixes", is_flag=True, help="Also apply fixes that may change behaviour.")
@click.option("--diff", is_flag=True, help="Show the fixes as a diff instead of writing them.")
@click.option("--show-suppressed", is_flag=True, help="Count findings silenced by noqa comments.")
@click.option(
    "--exclude",
    multiple=True,
    help="Glob of files or folders to skip (repeatable); applies to files named on the command line too.",
)
@click.option(
    "--config",
    "config_file",
    multiple=True,
    help="A configuration file to use for every file (pyproject.toml, ampdoctor.toml), or an inline "
    "TOML override such as \"select = ['AMP2']\" (repeatable).",
)
@click.option("--isolated", is_flag=True, help="Ignore every configuration file.")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache (.ampdoctor_cache/).")
@click.option(
    "--no-project",
    is_flag=True,
    help="Check each file on its own: do not follow calls into the project's other modules.",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=None,
    help="Processes to use [default: CPU count; 1: this one only].",
)
@click.option("--exit-zero", is_flag=True, help="Exit with 0 even when findings are reported (2 still means an error).")
@click.option(
    "--exit-non-zero-on-fix", is_flag=True, help="Exit with 1 when --fix changed a file, even with nothing left."
)
@click.option("--statistics", is_flag=True, help="Count the findings of each code instead of listing them.")
@click.option("--show-fixes", is_flag=True, help="With --fix: list what was fixed, file by file.")
@click.option("--add-noqa", is_flag=True, help="Add a `# noqa: CODE` comment to every line with a finding.")
@click.option("-q", "--quiet", is_flag=True, help="Print the findings and nothing else (no summary, no warnings).")
@click.option("-s", "--silent", is_flag=True, help="Print nothing but errors; the exit code still tells.")
@click.option("--show-files", is_flag=True, help="List the files that would be checked, then exit.")
@click.option("--show-settings", is_flag=True, help="Show the configuration the first path is checked with, then exit.")
@click.option(
    "--stdin-filename",
    default=None,
    help="Read the code from standard input and report it under this name (its per-file ignores apply); "
    "`ampdoctor lint -` reads standard input too.",
)
@click.option("--watch", "-w", is_flag=True, help="Lint again whenever a checked file changes (Ctrl-C stops).")
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="Say on stderr what the run read, made and wrote (caches, summaries, project checks), with timings.",
)
def lint_command(
    paths: tuple[Path, ...],
    output_format: str,
    output_file: Path | None,
    select: tuple[str, ...],
    extend_select: tuple[str, ...],
    ignore: tuple[str, ...],
    fail_on: str | None,
    fix: bool,
    unsafe_fixes: bool,
    diff: bool,
    show_suppressed: bool,
    exclude: tuple[str, ...],
    config_file: tuple[str, ...],
    isolated: bool,
    no_cache: bool,
    no_project: bool,
    jobs: int | None,
    exit_zero: bool,
    exit_non_zero_on_fix: bool,
    statistics: bool,
    show_fixes: bool,
    add_noqa: bool,
    quiet: bool,
    silent: bool,
    show_files: bool,
    show_settings: bool,
    stdin_filename: str | None,
    watch: bool,
    verbose: bool,
) -> None:
    """Check Python files and notebooks for mixed-precision mistakes."""
    try:
        code = run_lint(
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
            project=not no_project,
            exit_zero=exit_zero,
            exit_non_zero_on_fix=exit_non_zero_on_fix,
            statistics=statistics,
            show_fixes=show_fixes,
            add_noqa=add_noqa,
            quiet=2 if silent else 1 if quiet else 0,
            show_files=show_files,
            verbose=verbose,
            show_settings=show_settings,
            stdin_filename=stdin_filename,
            watch=watch,
        )
    except UsageError as exc:
        raise _fail(str(exc)) from None
    raise click.exceptions.Exit(code)


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
            {
                "code": r.code,
                "name": r.name,
                "severity": r.severity.label,
                "fixable": r.fixable,
                "origin": r.origin,
                "summary": r.summary,
            }
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

    console = Console(file=stream, force_terminal=_use_color(stream), no_color=not _use_color(stream), highlight=False)
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

    # The words of ``ampdoctor rules``' fix column, with the option that applies the fix.
    fix = {"no": "no", "safe": "safe (--fix)", "unsafe": "unsafe (--unsafe-fixes)", "sometimes": "sometimes"}[
        rule.fixable
    ]
    header = f"{rule.code} {rule.name}  (severity: {rule.severity.label}, fixable: {fix}, {rule.origin})"
    from .codes import paths_of_modules, paths_of_tests

    modules = paths_of_modules(rule.code)
    if modules:
        header += "\nimplemented in: " + ", ".join(modules)
    # The page's examples are tests too, run by the examples test of their origin.
    examples = "tests/test_catalog.py" if rule.origin == "lint" else "tests/trace/test_trace_rule_pages.py"
    header += "\ntested in: " + ", ".join([*paths_of_tests(rule.code), f"{examples} (the page's examples)"])
    # The example markers (bad / good / fixed ... on the fence, `# expect: CODE` on the lines)
    # are for the tests; readers see plain Python.
    body = re.sub(r"^```python[^\n]*", "```python", rule.body, flags=re.M)
    body = re.sub(r"[ \t]*#\s*expect:\s*(?:AMP\d{3}[ \t,]*)+", "", body)
    if not color:  # a pipe or a file: the page's own text, no padding to a console width
        stream.write(f"{header}\n\n{body.strip()}\n")
        return
    console = Console(file=stream, force_terminal=color, no_color=not color, highlight=False)
    console.print(header, markup=False)
    console.print(Markdown(body))


@main.command("server")
@click.option(
    "--stdio", is_flag=True, hidden=True, help="Accepted for editors that pass it; stdio is the only transport."
)
def server_command(stdio: bool) -> None:
    """Run the language server over stdio (diagnostics as you type; needs ampdoctor[server])."""
    from .server import ServerUnavailable, serve

    try:
        serve()
    except ServerUnavailable as exc:
        raise _fail(str(exc)) from None


def _register_trace() -> None:
    try:
        from .trace.trace_cli import trace_command
    except ImportError:  # pragma: no cover - the trace package ships with ampdoctor
        return
    main.add_command(trace_command, "trace")


_register_trace()


def run() -> None:  # pragma: no cover - entry point
    main()
