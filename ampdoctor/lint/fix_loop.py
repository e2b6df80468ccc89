"""The fix loop: apply the findings' fixes, pass after pass, until none applies.

Each pass is checked by linting its result. A pass that does not parse is a defect (nothing is
written). A pass after which some rule reports more findings than before (an ``unscale_`` that
now runs twice is an AMP206), or whose text Python's compiler refuses where the text before it
compiled (a keyword argument given twice parses, but does not compile), is undone and its fixes
tried one at a time; a fix that does either on its own is withheld, and its finding stays in
the report without a fix.
"""

from __future__ import annotations

from collections.abc import Callable

from ..findings import Edit, Finding
from .fixes import FixError, SourceLines, apply_edits, edit_spans, overlaps, realize_rewrites

MAX_FIX_PASSES = 10

# lint a text: (findings, suppressed, parsed)
Check = Callable[[str], tuple[list[Finding], int, bool]]


def fix_until_stable(source: str, path: str, check: Check, unsafe: bool) -> tuple[str, int, list[Finding], int, bool]:
    """Apply fixes until none applies: (new source, fixes applied, findings, suppressed, parsed).
    ``check(text)`` lints a text: (findings, suppressed, parsed). ``unsafe``: apply unsafe fixes.

    Each pass is checked by linting its result: a pass after which some rule reports more than
    before (an ``unscale_`` that now runs twice, AMP206) is undone and its fixes are tried one at
    a time, and a fix that adds a finding on its own is withheld: its finding stays, without the
    fix, for a person to resolve."""
    fixed = 0
    withheld: set[tuple[str, str, str]] = set()
    retried_at: str | None = None  # the text at which the withheld fixes were last tried again
    findings, suppressed, parsed = check(source)
    compiles = parsed and _compiles(source)  # (a text that never compiled is not held to it)
    for _ in range(MAX_FIX_PASSES):
        applicable = [
            f
            for f in findings
            if f.fix and (f.fix.is_safe or unsafe) and (not withheld or _fix_key(f, source) not in withheld)
        ]
        applicable = realize_rewrites(applicable, source, path)  # codemods run only when applied
        if not applicable and withheld and parsed and retried_at != source:
            # A fix withheld against an earlier text may add nothing against this one (other
            # fixes changed it): try them all again, once per text, as a second --fix would.
            withheld.clear()
            retried_at = source
            continue
        if not applicable or not parsed:
            break
        candidate, applied = _compose(source, applicable)
        outcome = check(candidate)
        if not outcome[2]:
            raise FixError("a fix produced code that does not parse; nothing was written")
        if _adds_findings(findings, outcome[0]) or (compiles and not _compiles(candidate)):
            sound = _first_sound_fix(source, check, findings, applicable, withheld, compiles)
            if sound is None:
                break
            (candidate, outcome), applied = sound, 1
        source, (findings, suppressed, parsed) = candidate, outcome
        fixed += applied
    if withheld:
        findings = [f.replace(fix=None) if f.fix and _fix_key(f, source) in withheld else f for f in findings]
    return source, fixed, findings, suppressed, parsed


def _compose(source: str, applicable: list[Finding]) -> tuple[str, int]:
    """The source with every fix whose edits do not overlap an earlier one's, and their number."""
    lines = SourceLines(source)
    taken: list[tuple[int, int]] = []
    edits: list[Edit] = []
    applied = 0
    for finding in applicable:
        fix = finding.fix
        assert fix is not None  # only findings with a fix are applicable
        spans = edit_spans(lines, fix)
        if overlaps(spans, taken):
            continue  # the next pass picks it up against the updated text
        taken.extend(spans)
        edits.extend(fix.edits)
        applied += 1
    return apply_edits(source, edits), applied


def _adds_findings(before: list[Finding], after: list[Finding]) -> bool:
    """Whether some rule reports more findings after the edits than before them."""
    counts: dict[str, int] = {}
    for finding in before:
        counts[finding.code] = counts.get(finding.code, 0) + 1
    for finding in after:
        counts[finding.code] = counts.get(finding.code, 0) - 1
    return any(count < 0 for count in counts.values())


def _first_sound_fix(
    source: str,
    check: Check,
    findings: list[Finding],
    applicable: list[Finding],
    withheld: set[tuple[str, str, str]],
    compiles: bool,
) -> tuple[str, tuple[list[Finding], int, bool]] | None:
    """The text with the first fix that adds no finding on its own (nor, where ``compiles``,
    makes the text one the compiler refuses), and its lint; each fix before it that does is
    withheld. The fixes after it were resolved against the text before it: the next pass takes
    them up against the new text."""
    for finding in applicable:
        fix = finding.fix
        assert fix is not None
        candidate = apply_edits(source, fix.edits)
        result = check(candidate)
        if not result[2]:
            raise FixError("a fix produced code that does not parse; nothing was written")
        if not _adds_findings(findings, result[0]) and (not compiles or _compiles(candidate)):
            return candidate, result
        withheld.add(_fix_key(finding, source))
    return None


def _compiles(text: str) -> bool:
    """Whether Python compiles ``text``: the parser takes some code its compiler refuses (a
    keyword argument given twice, ``return`` outside a function). Asked only of texts fixes
    made, once per pass."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (``x is 1``: the user's code, not the fix's to report)
        try:
            compile(text, "<fixed>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return False
    return True


def _fix_key(finding: Finding, source: str) -> tuple[str, str, str]:
    """A finding's identity across passes whose edits moved its line: code, message, line text."""
    lines = source.splitlines()
    line = finding.location.line
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return finding.code, finding.message, text
