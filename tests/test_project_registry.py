"""The project checks' registry (``project/checks.py`` ``PROJECT_CHECKS``): one table says which
check reports which code, ``run_checks`` runs only the checks of the selected codes, and
``ampdoctor rule CODE`` names the modules that implement a code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import copy_twin, project_findings

from ampdoctor.catalog import all_rules
from ampdoctor.config import Settings
from ampdoctor.lint import LintRequest, implementing_modules, lint_paths
from ampdoctor.lint.project import checks
from ampdoctor.lint.project.checks import PROJECT_CHECKS, checks_for

ROOT = Path(__file__).resolve().parent.parent


def test_every_code_in_the_registry_is_a_lint_rule_with_a_page():
    pages = {code for code, rule in all_rules().items() if rule.origin == "lint"}
    for check in PROJECT_CHECKS:
        assert check.codes is None or check.codes <= pages, check.function.__name__


def test_each_check_is_named_by_the_module_that_implements_it():
    assert checks_for("AMP211") == ["ampdoctor.lint.project.checkpoints"]
    assert checks_for("AMP101") == ["ampdoctor.lint.project.checks", "ampdoctor.lint.project.region_calls"]
    assert checks_for("AMP402") == []
    modules = implementing_modules("AMP211")
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


def test_rule_command_names_the_implementing_modules():
    done = subprocess.run(
        [sys.executable, "-m", "ampdoctor", "rule", "AMP211"], capture_output=True, text=True, check=True
    )
    second = done.stdout.splitlines()[1]
    assert second.startswith("implemented in: ampdoctor/lint/rules/") and "project/checkpoints.py" in second
    trace = subprocess.run(
        [sys.executable, "-m", "ampdoctor", "rule", "AMP505"], capture_output=True, text=True, check=True
    )
    assert "implemented in" not in trace.stdout
