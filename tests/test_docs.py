"""The documentation: a README that stays short and links to pages that exist, and a MkDocs site
(``mkdocs.yml``, ``docs/``) that builds strictly with one page per rule made from ``rules/*.md``."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ampdoctor.catalog import all_rules
from ampdoctor.cli import main

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text(encoding="utf-8")
MAX_README_LINES = 600
MARKERS = re.compile(r"```python +(bad|good|fixed)|#\s*expect:")


def _hooks():
    spec = importlib.util.spec_from_file_location("ampdoctor_docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _readme_links() -> list[str]:
    """The README's relative link targets, outside code blocks."""
    text = re.sub(r"^```.*?^```", "", README, flags=re.S | re.M)
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    return [t for t in targets if not re.match(r"[a-z]+:", t)]


def test_readme_is_short():
    lines = len(README.splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines (at most {MAX_README_LINES}): move detail to docs/"


def test_readme_links_resolve_and_reach_every_docs_page():
    missing = [t for t in _readme_links() if t.split("#")[0] and not (ROOT / t.split("#")[0]).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"
    linked = {t.split("#")[0] for t in _readme_links()}
    pages = {f"docs/{p.name}" for p in DOCS.glob("*.md") if p.name != "index.md"}
    assert pages, "docs/ has no pages"
    assert not pages - linked, f"docs pages the README does not link to: {sorted(pages - linked)}"


def test_nav_names_every_written_page():
    """Every page written in docs/ is in mkdocs.yml's navigation (the build warns, strictly, too)."""
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    written = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert written <= set(re.findall(r":\s*(\S+\.md)\s*$", config, re.M))


def _introduction(text: str) -> str:
    """A page's text from its title to its first second-level heading, as a reader sees it:
    links reduced to their words (the two pages link to different places) and lines joined."""
    intro = text.split("\n## ", 1)[0]
    intro = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", intro)
    return " ".join(intro.split())


def test_site_home_page_introduces_ampdoctor_as_the_readme_does():
    """The site's home page repeats the README's introduction, figures included: the two were
    written once and drift apart when only one is kept (the site said 4-5.5x ruff for months)."""
    home = (DOCS / "index.md").read_text(encoding="utf-8")
    assert _introduction(home) == _introduction(README)


def test_site_home_page_names_every_extra():
    """The home page's installation names each optional extra the package declares."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    install = (DOCS / "index.md").read_text(encoding="utf-8").split("## Install", 1)[1].split("\n## ", 1)[0]
    user_extras = set(extras) - {"dev", "frameworks"}  # the test suite's, named in the README's set-up
    assert user_extras, "pyproject.toml declares no extras"
    missing = sorted(extra for extra in user_extras if f"ampdoctor[{extra}]" not in install)
    assert not missing, f"docs/index.md's Install section leaves out the extras {missing}"


def test_rule_pages_read_as_the_rule_command_prints_them():
    """The site's rule page is the page ``ampdoctor rule CODE`` prints, test markers removed."""
    hooks = _hooks()
    runner = CliRunner()
    for code, rule in all_rules().items():
        printed = runner.invoke(main, ["rule", code], catch_exceptions=False).output
        body = hooks.reader_body(rule.body).strip()
        assert printed.endswith(f"\n\n{body}\n"), code
        page = hooks.rule_page(rule)
        assert page.startswith(f"# {code} `{rule.name}`\n"), code
        assert rule.summary in page and rule.severity.label in page, code
        assert not MARKERS.search(page), f"{code}: a test marker is left on the page"


def test_rule_index_lists_every_rule():
    rules = list(all_rules().values())
    index = _hooks().index_page(rules)
    for rule in rules:
        row = f"| [`{rule.code}`]({rule.code}.md) | `{rule.name}` | {rule.severity.label} | {rule.fixable} | {rule.origin} |"
        assert row in index, rule.code


@pytest.mark.slow
def test_the_site_builds_strictly_with_a_page_per_rule(tmp_path):
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    site = tmp_path / "site"
    config = load_config(str(ROOT / "mkdocs.yml"), site_dir=str(site), strict=True)
    build(config)  # strict: a broken link, a missing page or a page left out of the nav fails it
    for code, rule in all_rules().items():
        page = site / "rules" / code / "index.html"
        assert page.is_file(), f"no page for {code}"
        html = page.read_text(encoding="utf-8")
        assert code in html and rule.name in html, code
        assert "expect:" not in html and "python bad" not in html, code
    index = (site / "rules" / "index.html").read_text(encoding="utf-8")
    assert all(f'href="{code}/"' in index for code in all_rules())
    assert "Changelog" in (site / "changelog" / "index.html").read_text(encoding="utf-8")
    # The README's links into the docs name sections that the site has.
    for target in _readme_links():
        path, _, anchor = target.partition("#")
        if path.startswith("docs/") and path.endswith(".md") and anchor:
            name = path[len("docs/") : -len(".md")]
            html = (site / ("" if name == "index" else name) / "index.html").read_text(encoding="utf-8")
            assert f'id="{anchor}"' in html, f"README: {target}: no such section"
