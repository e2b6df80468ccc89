"""The README's promises: set-up commands, the CI command, the rule table."""

from __future__ import annotations

import re
from pathlib import Path

from ampdoctor.catalog import all_rules

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _shell_blocks() -> list[str]:
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", README, re.S)]


def test_two_setup_commands_and_ci_runs_the_test_command():
    blocks = _shell_blocks()
    install_and_lint, install_and_test = blocks[0], blocks[1]
    assert install_and_lint.endswith("ampdoctor lint fixtures/lint/buggy_classic_mistakes.py")
    assert (ROOT / "fixtures/lint/buggy_classic_mistakes.py").is_file()
    assert install_and_test.endswith("python -m pytest")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert install_and_test in ci.splitlines()


def test_rule_table_matches_the_catalog():
    table = README.split("<!-- rule-table:start -->")[1].split("<!-- rule-table:end -->")[0]
    rows = re.findall(r"^\| `(AMP\d{3})` \| `([a-z0-9-]+)` \| (\w+) \| (\w+) \| (\w+) \|", table, re.M)
    expected = [(r.code, r.name, r.severity.label, r.fixable, r.origin) for r in all_rules().values()]
    assert rows == expected


def test_constraints_pin_torch():
    assert "torch==2.13.0" in (ROOT / "constraints.txt").read_text()
