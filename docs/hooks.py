"""MkDocs hooks: the pages whose one source lies outside ``docs/``, generated at build time.

* ``rules/AMPxxx.md`` (the rule catalog, read with ``ampdoctor.catalog``) becomes the page
  ``rules/AMPxxx.md`` of the site: the page's Markdown with its severity, fix and kind under the
  title, and its examples as ``ampdoctor rule CODE`` prints them (the test markers, ``bad`` /
  ``good`` / ``fixed`` on the fence and ``# expect: CODE`` on the lines, left out);
* ``rules/index.md``: the rule index (code, name, severity, fixable, kind, summary), by family;
* ``changelog.md``: ``CHANGELOG.md`` as it is.

The navigation's ``Rules`` entry (``rules/index.md`` in mkdocs.yml) becomes a section holding
the index and every rule page.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "rules"
INDEX = "rules/index.md"

if str(ROOT) not in sys.path:  # the checkout's package, also where ampdoctor is not installed
    sys.path.insert(0, str(ROOT))

from ampdoctor.catalog import Rule, load_rule  # noqa: E402

# The words of `ampdoctor rule`'s fix column, with the option that applies the fix.
FIX_WORDS = {"no": "no", "safe": "safe (`--fix`)", "unsafe": "unsafe (`--unsafe-fixes`)", "sometimes": "sometimes"}
FAMILIES = [
    ("AMP0", "Input"),
    ("AMP1", "AMP1xx: autocast regions"),
    ("AMP2", "AMP2xx: GradScaler protocol"),
    ("AMP3", "AMP3xx: numerics"),
    ("AMP4", "AMP4xx: API and migration"),
    ("AMP5", "AMP5xx: runtime findings of `ampdoctor trace`"),
    ("AMP6", "AMP6xx: float8 training"),
]


def rules() -> list[Rule]:
    """Every rule page of the checkout, in code order (read afresh: ``mkdocs serve`` rebuilds)."""
    return [load_rule(path) for path in sorted(RULES.glob("AMP*.md"))]


def reader_body(body: str) -> str:
    """A page's Markdown as readers see it: what ``ampdoctor rule`` (``rule_command`` in
    ``ampdoctor/cli.py``) removes is removed here the same way."""
    body = re.sub(r"^```python[^\n]*", "```python", body, flags=re.M)
    return re.sub(r"[ \t]*#\s*expect:\s*(?:AMP\d{3}[ \t,]*)+", "", body)


def rule_page(rule: Rule) -> str:
    body = reader_body(rule.body).strip("\n")
    title, _, rest = body.partition("\n") if body.startswith("# ") else (f"# {rule.code} `{rule.name}`", "", body)
    facts = (
        f"**Severity:** {rule.severity.label} · **Fixable:** {FIX_WORDS[rule.fixable]} · "
        f"**Kind:** {rule.origin} · `ampdoctor rule {rule.code}`"
    )
    return f"{title}\n\n{facts}\n\n> {rule.summary}\n{rest}\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def index_page(all_rules: list[Rule]) -> str:
    lines = [
        "# Rule catalog",
        "",
        "Every rule of `ampdoctor lint` and `ampdoctor trace`, one page each, made from the rule",
        "pages in `rules/` (the same pages `ampdoctor rule CODE` prints; their examples are executed",
        "by the tests). `ampdoctor rules` prints this list; the [rule commands](../rule.md) say more.",
    ]
    for prefix, title in FAMILIES:
        family = [r for r in all_rules if r.code.startswith(prefix)]
        if not family:
            continue
        lines += [
            "",
            f"## {title}",
            "",
            "| code | name | severity | fixable | kind | summary |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| [`{r.code}`]({r.code}.md) | `{r.name}` | {r.severity.label} | {r.fixable} | {r.origin} | {_cell(r.summary)} |"
            for r in family
        ]
    return "\n".join(lines) + "\n"


def on_config(config: Any) -> Any:
    """Expand the navigation's ``rules/index.md`` entry into the index and every rule page."""
    section = [{"Rule catalog": INDEX}] + [{f"{r.code} {r.name}": f"rules/{r.code}.md"} for r in rules()]

    def expand(items: list) -> list:
        out = []
        for item in items:
            if isinstance(item, dict):
                (title, value), *_ = item.items()
                if value == INDEX:
                    value = section
                elif isinstance(value, list):
                    value = expand(value)
                out.append({title: value})
            else:
                out.append(section if item == INDEX else item)
        return out

    if config["nav"]:
        config["nav"] = expand(config["nav"])
    return config


def on_files(files: Files, config: Any) -> Files:
    all_rules = rules()
    for rule in all_rules:
        files.append(File.generated(config, f"rules/{rule.code}.md", content=rule_page(rule)))
    files.append(File.generated(config, INDEX, content=index_page(all_rules)))
    files.append(File.generated(config, "changelog.md", content=(ROOT / "CHANGELOG.md").read_text(encoding="utf-8")))
    return files
