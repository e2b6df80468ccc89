"""The rule pages in rules/ are the docs, the examples and these tests."""

from __future__ import annotations

import libcst as cst
import pytest
from helpers import expected_pairs, fix_text, found_pairs, strip_markers

from ampdoctor.catalog import (
    CatalogError,
    Rule,
    all_rules,
    find_rule,
    load_rule,
    rules_dir,
)
from ampdoctor.lint.gate import Anchors
from ampdoctor.lint.rules import lint_rules

RULES = list(all_rules().values())
LINT_RULES = [r for r in RULES if r.origin == "lint"]
REQUIRED_SECTIONS = ("## What it does", "## Why is this a problem", "## Example", "## References")


def _examples(kind: str):
    for rule in LINT_RULES:
        for index, example in enumerate(rule.examples):
            if example.kind == kind:
                yield pytest.param(rule, index, id=f"{rule.code}-{kind}-{index}")


def test_every_static_rule_has_a_page_and_every_page_a_rule():
    implemented = set(lint_rules())
    documented = {r.code for r in LINT_RULES} - {"AMP000"}
    assert implemented == documented


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_page_structure(rule: Rule):
    for section in REQUIRED_SECTIONS:
        assert section in rule.body, f"{rule.path.name} lacks {section!r}"
    assert rule.body.lstrip().startswith(f"# {rule.code} `{rule.name}`")
    assert rule.name == rule.name.lower() and " " not in rule.name
    assert rule.summary.endswith("."), "summaries are one sentence"


@pytest.mark.parametrize("rule", LINT_RULES, ids=lambda r: r.code)
def test_static_rule_has_bad_and_good_examples(rule: Rule):
    kinds = [e.kind for e in rule.examples]
    assert "bad" in kinds, f"{rule.code} has no bad example"
    if rule.code != "AMP000":
        assert "good" in kinds or "fixed" in kinds, f"{rule.code} has no good example"
    for example in rule.examples:
        if example.kind == "bad":
            assert any(code == rule.code for _, code in example.expected), (
                f"{rule.code}: a bad example (page line {example.page_line}) does not mark {rule.code}"
            )


@pytest.mark.parametrize("rule,index", list(_examples("bad")))
def test_bad_example_reports_exactly_the_marked_codes(rule: Rule, index: int):
    example = rule.examples[index]
    assert found_pairs(example.source) == expected_pairs(example.source), f"{rule.path.name}:{example.page_line}"


@pytest.mark.parametrize(
    "declaration,value,complaint",
    [
        ("tokens", ("no_such_token",), "token prefilter"),
        ("needs", (rb"no_such_pattern",), "token prefilter"),
        ("anchors", Anchors(names=("no_such_module.thing",)), "the gate"),
    ],
)
def test_a_rule_whose_declarations_miss_its_own_example_fails_its_tests(monkeypatch, declaration, value, complaint):
    """check_source runs the rules on any text; the command line first drops files by each rule's
    tokens, needs and anchors. The shared helper checks those too, so wrong ones cannot pass."""
    page = find_rule("AMP201")
    source = next(e.source for e in page.examples if e.kind == "bad")
    assert "AMP201" in {code for _, code in found_pairs(source)}  # as declared: found and kept
    monkeypatch.setattr(lint_rules()["AMP201"], declaration, value)
    with pytest.raises(AssertionError, match=complaint):
        found_pairs(source)


@pytest.mark.parametrize("rule,index", list(_examples("good")) + list(_examples("fixed")))
def test_good_example_is_clean(rule: Rule, index: int):
    example = rule.examples[index]
    assert found_pairs(example.source) == [], f"{rule.path.name}:{example.page_line}"


@pytest.mark.parametrize("rule,index", list(_examples("fixed")))
def test_fix_turns_the_bad_example_into_the_fixed_one(rule: Rule, index: int):
    fixed = rule.examples[index]
    bad = next(e for e in reversed(rule.examples[:index]) if e.kind == "bad")
    unsafe = "unsafe-fixes" in fixed.options
    result = fix_text(strip_markers(bad.source), unsafe=unsafe)
    assert result == fixed.source
    cst.parse_module(result)
    assert fix_text(result, unsafe=unsafe) == result, "fixing twice changes the text again"


def test_fixable_flag_matches_the_examples():
    for rule in LINT_RULES:
        has_fixed_example = any(e.kind == "fixed" for e in rule.examples)
        if rule.fixable in ("safe", "unsafe"):
            assert has_fixed_example, f"{rule.code} is fixable but shows no fixed example"
        if rule.fixable == "no":
            assert not has_fixed_example, f"{rule.code} is not fixable but shows a fixed example"


def test_lookup_by_code_and_name():
    assert find_rule("amp201").code == "AMP201"
    assert find_rule("clip-before-unscale").code == "AMP201"
    assert find_rule("AMP999") is None


def test_every_rule_name_is_unique_and_leads_to_its_rule():
    rules = all_rules()
    names = [rule.name for rule in rules.values()]
    assert sorted(name for name in set(names) if names.count(name) > 1) == []
    for code, rule in rules.items():
        assert find_rule(rule.name).code == code


def test_malformed_page_is_a_catalog_error(tmp_path):
    page = tmp_path / "AMP999.md"
    page.write_text("---\ncode: AMP999\nname: x\n---\nbody\n", encoding="utf-8")
    with pytest.raises(CatalogError, match="missing"):
        load_rule(page)
    page.write_text("no front matter", encoding="utf-8")
    with pytest.raises(CatalogError, match="front matter"):
        load_rule(page)


def test_pages_ship_inside_the_package_build(tmp_path):
    import tomllib

    config = tomllib.loads((rules_dir().parent / "pyproject.toml").read_text())
    include = config["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert include == {"rules": "ampdoctor/_rules"}


def test_every_rule_family_module_is_loaded():
    import importlib
    import pkgutil

    from ampdoctor.lint import rules
    from ampdoctor.lint.rules import LintRule

    lint_rules()
    modules = [info.name for info in pkgutil.iter_modules(rules.__path__)]
    assert set(rules.FAMILIES) <= set(modules)
    for name in modules:
        module = importlib.import_module(f"{rules.__name__}.{name}")
        holds = [
            value
            for value in vars(module).values()
            if isinstance(value, type)
            and issubclass(value, LintRule)
            and value.__module__ == module.__name__
            and "code" in vars(value)
        ]
        assert bool(holds) == (name in rules.FAMILIES), name  # a helper module holds no rule


def test_a_rule_code_leads_to_its_file():
    """Each rule sits in a family module named for what it checks, with no code in its name (a
    new code never renames a module); every family holds a rule."""
    import re

    from ampdoctor.lint import rules

    held = set()
    for code, rule in lint_rules().items():
        module = type(rule).__module__.rsplit(".", 1)[-1]
        assert module in rules.FAMILIES, (code, module)
        assert not re.search(r"\d{3}", module), (code, module)
        held.add(module)
    assert held == set(rules.FAMILIES)
