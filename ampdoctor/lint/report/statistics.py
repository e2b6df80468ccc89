"""``--statistics`` (how many findings of each code, instead of the findings) and
``--show-fixes`` (what ``--fix`` fixed, file by file), as ruff prints them.

Statistics in the text formats are one line per code, most frequent first::

    3  AMP201  [*] clip-scaled-gradients
    1  AMP105  [ ] unsafe-loss-under-autocast

``[*]`` marks a code whose findings here all have a safe fix. With ``--output-format json`` (or
``json-lines``) they are a JSON list of ``{code, name, count, fixable}``.
"""

from __future__ import annotations

import json
from collections import Counter

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import TextIO

    from ...findings import Finding
    from ..engine import FileResult


def render_statistics(findings: list[Finding], stream: TextIO, json_output: bool) -> None:
    from ...catalog import all_rules

    rules = all_rules()
    counts = Counter(f.code for f in findings)
    fixable = {code: all(f.fix is not None and f.fix.is_safe for f in findings if f.code == code) for code in counts}
    ordered = sorted(counts, key=lambda code: (-counts[code], code))
    names = {code: rules[code].name if code in rules else "" for code in ordered}
    if json_output:
        data = [{"code": c, "name": names[c], "count": counts[c], "fixable": fixable[c]} for c in ordered]
        json.dump(data, stream, indent=2)
        stream.write("\n")
        return
    if not ordered:
        return
    width = max(len(str(n)) for n in counts.values())
    code_width = max(len(code) for code in ordered)
    for code in ordered:
        mark = "[*]" if fixable[code] else "[ ]"
        stream.write(f"{counts[code]:>{width}}  {code:<{code_width}}  {mark} {names[code]}".rstrip() + "\n")


def fixed_lines(fixed_by_file: dict[str, Counter[str]]) -> list[str]:
    """``Fixed 3 problems:`` then, per file, ``- path:`` and ``    2 × AMP201 (name)``."""
    from ...catalog import all_rules
    from . import plural

    total = sum(sum(counter.values()) for counter in fixed_by_file.values())
    if not total:
        return []
    rules = all_rules()
    lines = [f"Fixed {plural(total, 'problem')}:"]
    for path in sorted(fixed_by_file):
        counter = fixed_by_file[path]
        if not counter:
            continue
        lines.append(f"- {path}:")
        for code, count in sorted(counter.items(), key=lambda item: (-item[1], item[0])):
            name = rules[code].name if code in rules else ""
            lines.append(f"    {count} × {code}" + (f" ({name})" if name else ""))
    return lines


def fixed_by_file(results: Iterable[FileResult]) -> dict[str, Counter[str]]:
    """For each file ``--fix`` changed: how many findings of each code the fixes removed (those
    of the text as read that the fixed text no longer has)."""
    found: dict[str, Counter[str]] = {}
    for result in results:
        if not result.fixed or result.unfixed is None:
            continue
        before = Counter(f.code for f in result.unfixed[0])
        after = Counter(f.code for f in result.findings)
        found[result.path] = before - after
    return found
