"""The project checks' registry (``project/checks.py`` ``PROJECT_CHECKS``): each check says which
codes it reports, ``run_checks`` runs only the checks of the selected codes, and ``ampdoctor rule
CODE`` names the modules that implement and test a code (``ampdoctor/codes.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import copy_twin, project_findings

from ampdoctor.catalog import all_rules
from ampdoctor.codes import modules_of, paths_of_modules
from ampdoctor.config import Settings
from ampdoctor.lint import LintRequest, lint_paths
from ampdoctor.lint.project import checks
from ampdoctor.lint.project.checks import PROJECT_CHECKS

ROOT = Path(__file__).resolve().parent.parent


def test_every_code_in_the_registry_is_a_lint_rule_with_a_page():
    pages = {code for code, rule in all_rules().items() if rule.origin == "lint"}
    for check in PROJECT_CHECKS:
        assert check.codes is None or check.codes <= pages, check.function.__name__


def test_each_check_is_named_by_the_module_that_implements_it():
    assert modules_of("AMP211", "lint.project.") == ("lint.project.checkpoints",)
    assert modules_of("AMP101", "lint.project.") == ("lint.project.checks", "lint.project.region_calls")
    assert modules_of("AMP402", "lint.project.") == ()
    modules = paths_of_modules("AMP211")
    assert modules[0].startswith("ampdoctor/lint/rules/") and "ampdoctor/lint/project/checkpoints.py" in modules
    assert all((ROOT / module).is_file() for module in modules)


def test_only_the_checks_of_the_selected_codes_run(tmp_path: Path, monkeypatch):
    ran = []
    registry = []
    for check in PROJECT_CHECKS:
        registry.append(
            checks.Check(
                None if check.codes is None else sorted(check.codes),
                check.function,
                lambda f, r, call=check.call, name=check.function.__name__: ran.append(name) or call(f, r),
            )
        )
    monkeypatch.setattr(checks, "PROJECT_CHECKS", tuple(registry))
    root = copy_twin("checkpoint_helper", "buggy", tmp_path / "p")
    settings = Settings(root=root)
    run = lint_paths([root], LintRequest(settings, frozenset({"AMP211"}), use_cache=False), cwd=root)
    assert {(f.location.path, f.location.line, f.code) for f in run.findings} == {("train.py", 37, "AMP211")}
    assert ran == ["checkpoint_reports", "seeded_reports"]
    ran.clear()
    assert project_findings(root, ("AMP211",)) == {("train.py", 37, "AMP211")}
    assert len(ran) == len(PROJECT_CHECKS)


def test_rule_command_names_the_implementing_and_testing_modules():
    done = subprocess.run(
        [sys.executable, "-m", "ampdoctor", "rule", "AMP211"], capture_output=True, text=True, check=True
    )
    lines = done.stdout.splitlines()
    assert lines[1] == ("implemented in: ampdoctor/lint/rules/scaler_setup.py, ampdoctor/lint/project/checkpoints.py")
    assert lines[2].startswith("tested in: tests/test_project_snapshots.py, ")
    assert lines[2].endswith(", tests/test_catalog.py (the page's examples)")
    trace = subprocess.run(
        [sys.executable, "-m", "ampdoctor", "rule", "AMP505"], capture_output=True, text=True, check=True
    )
    lines = trace.stdout.splitlines()
    assert lines[1] == "implemented in: ampdoctor/trace/rules/underflow_rules.py"
    assert lines[2].endswith("tests/trace/test_trace_rule_pages.py (the page's examples)")
    for line in lines[1:3]:
        for path in line.split(": ", 1)[1].removesuffix(" (the page's examples)").split(", "):
            assert (ROOT / path).is_file(), path
