"""Shared test helpers: lint a text with every rule, apply fixes, read ``# expect:`` markers.

``check_source`` skips what the command line does before it: the token prefilter and the text
gate. So every finding ``lint_text`` returns is also checked to survive both, with its rule
alone selected (``assert_kept_on_the_command_line``): a rule whose ``tokens``, ``needs`` or
``anchors`` miss its own examples fails its tests instead of losing findings on the command line.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from ampdoctor.lint import gate, known_codes
from ampdoctor.lint.engine import LintOptions, check_source, fix_source, passes_prefilter, prefilter_spec
from ampdoctor.lint.rules import lint_rules
from ampdoctor.lint.textscan import text_gate

_EXPECT_SUFFIX = re.compile(r"[ \t]*#\s*expect:\s*AMP\d{3}(?:[\s,]+AMP\d{3})*[ \t]*$", re.M)
_EXPECT = re.compile(r"#\s*expect:\s*((?:AMP\d{3}[\s,]*)+)")


def all_options(**kwargs) -> LintOptions:
    return LintOptions(codes=frozenset(known_codes()), **kwargs)


def lint_text(source: str, path: str = "example.py", **kwargs):
    findings, _suppressed, _parsed = check_source(source, path, all_options(**kwargs))
    assert_kept_on_the_command_line(source, {f.code for f in findings})
    return findings


def assert_kept_on_the_command_line(source: str, codes: Iterable[str]) -> None:
    """For each rule code: with that rule alone selected, the token prefilter (``tokens`` and
    ``needs``), the gate on the syntax tree and the text gate (``anchors``) all keep the file, as
    ``ampdoctor lint --select CODE`` needs them to for the rule to report anything."""
    data = source.encode("utf-8")
    rules = lint_rules()
    for code in sorted(codes):
        rule = rules.get(code)
        if rule is None:
            continue  # AMP000: not a rule's finding
        assert passes_prefilter(data, prefilter_spec([code])), f"{code}: the token prefilter drops this file"
        assert gate.keeps(source, [rule.anchors]), f"{code}: the gate (the rule's anchors) drops this file"
        assert text_gate((rule.anchors,)).keeps(data), f"{code}: the text gate drops this file"


def found_pairs(source: str, path: str = "example.py") -> list[tuple[int, str]]:
    return sorted((f.location.line, f.code) for f in lint_text(source, path))


def expected_pairs(source: str) -> list[tuple[int, str]]:
    pairs = []
    for number, line in enumerate(source.splitlines(), start=1):
        marker = _EXPECT.search(line)
        if marker:
            pairs.extend((number, code) for code in re.findall(r"AMP\d{3}", marker.group(1)))
    return sorted(pairs)


def strip_markers(source: str) -> str:
    return _EXPECT_SUFFIX.sub("", source)


def fix_text(source: str, unsafe: bool = False) -> str:
    new_source, _fixed, _findings, _suppressed, _parsed = fix_source(
        source, "example.py", all_options(fix=True, unsafe_fixes=unsafe)
    )
    return new_source


# ---- multi-module fixture projects (fixtures/lint/projects/NAME/{buggy,clean}) -----------------

PROJECTS = Path(__file__).resolve().parent.parent / "fixtures" / "lint" / "projects"


def copy_twin(name: str, twin: str, destination):
    """A writable copy of a fixture project's twin (``buggy`` or ``clean``) at ``destination``."""
    shutil.copytree(PROJECTS / name / twin, destination)
    return destination


def lint_project(root, paths=None, project_mode=True):
    """The run of every rule over ``paths`` (default: the whole project at ``root``), no cache."""
    from ampdoctor.config import Settings
    from ampdoctor.lint import LintRequest, lint_paths

    settings = Settings(root=root, project=project_mode)
    request = LintRequest(settings, settings.enabled_codes(known_codes()), use_cache=False)
    return lint_paths(paths or [root], request, cwd=root)


def project_findings(root, codes: Iterable[str], paths=None, project_mode=True) -> set[tuple[str, int, str]]:
    """(path, line, code) of the run's findings of ``codes``."""
    wanted = set(codes)
    run = lint_project(root, paths, project_mode)
    return {(f.location.path, f.location.line, f.code) for f in run.findings if f.code in wanted}


def write_project(root, files: dict[str, str]) -> None:
    """A project at ``root``: a ``pyproject.toml`` and ``files`` (path -> text)."""
    (root / "pyproject.toml").write_text("", encoding="utf-8")
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")


def summaries_made(monkeypatch) -> list[bytes]:
    """The bytes of each module the project pass summarizes from here on, in the order made."""
    from ampdoctor.lint.project import store

    made: list[bytes] = []
    original = store.summarize_bytes
    monkeypatch.setattr(store, "summarize_bytes", lambda data: made.append(data) or original(data))
    return made


def replace_once(path, old: str, new: str) -> None:
    """Edit a file of a copied project: ``old`` must be in it."""
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} is not in {path.name}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def trace_source(source: str, tmp_path, expect: str | None = "end"):
    """Trace ``source`` (written to ``tmp_path/train.py``) in this process: (the session, what the
    script printed). ``expect``: how the run must have ended (None: any way)."""
    import contextlib
    import io

    from ampdoctor.trace.runner import Target, run_target
    from ampdoctor.trace.session import TraceSession

    path = tmp_path / "train.py"
    path.write_text(source)
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        with TraceSession(script=str(path)) as session:
            session.outcome = run_target(Target(script=str(path)))
    if expect is not None:
        assert session.outcome.reason == expect, session.outcome.traceback
    return session, stdout.getvalue()
