"""The runtime rules (AMP501-AMP514), one module per concern, each rule registered by its code
with ``rulebase.rule`` in the module ``ampdoctor/codes.py`` names for it:

- ``scale_rules.py``      AMP501 the loss scale collapses, AMP502 frequent skipped steps
- ``nonfinite_rules.py``  AMP503 non-finite loss, AMP504 where the first inf/NaN was born
- ``underflow_rules.py``  AMP505 gradients underflow float16, AMP510 float16 backward without a scaler
- ``activation_rules.py`` AMP506 float16 activations close to float16's max
- ``census_rules.py``     AMP507-AMP509 what the op census saw, and AMP105 (lint's code) for binary_cross_entropy
- ``error_rules.py``      AMP301, AMP105 (lint's codes): a script that died of them
- ``rank_rules.py``       AMP511 ranks that disagree on the loss scale (the merged torchrun report)
- ``protocol_rules.py``   AMP101, AMP201-AMP205, AMP303: lint's protocol codes, seen at run time
- ``compare_rules.py``    AMP512-AMP514 why mixed precision does not pay off (``--compare float32``)

``evaluate`` runs the rules of one run on its observations; ``evaluate_ranks`` the rules of a
merged report on the ranks' JSON reports. Every message says what was measured and every help
text says what to change, in the training script's terms.
"""

from __future__ import annotations

from typing import Any

from ...findings import Finding, Location
from ..observations import Observations
from ..rulebase import Locator, Thresholds, registered
from . import protocol_rules


def _load() -> None:
    """Import every rule module ``ampdoctor/codes.py`` names (importing one registers its rules)."""
    import importlib

    from ...codes import PACKAGE, modules_under

    for module in modules_under("trace.rules."):
        importlib.import_module(f"{PACKAGE}.{module}")


_load()


def registered_codes() -> list[str]:
    return sorted({entry.code for entry in registered()})


def evaluate(observations: Observations, thresholds: Thresholds, locator: Locator) -> list[Finding]:
    from ..placing import place_findings

    observations.name_origin_op()
    findings = [finding for entry in registered("run") for finding in entry.check(observations, thresholds, locator)]
    findings = _withhold_invalidated(findings)
    findings = place_findings(findings, observations, locator)
    return sorted(findings, key=lambda f: (-f.severity, f.code, f.extra.get("step") or 0))


def evaluate_ranks(reports: dict[int, dict[str, Any]], location: Location) -> list[Finding]:
    """The findings of a merged torchrun report, from every rank's JSON report."""
    findings = []
    for entry in registered("ranks"):
        finding = entry.check(reports, location)
        if finding is not None:
            findings.append(finding)
    return findings


# A finding whose message already states what another would add: float16 without a scaler
# (AMP510) says how many parameters lose their gradient, which is AMP505 at scale 1.
EXPLAINS = {"AMP510": ("AMP505",)}


def _withhold_invalidated(findings: list[Finding]) -> list[Finding]:
    """Drop the numeric findings a protocol mistake invalidates, or another finding already
    explains; the finding that stays says which were withheld and why."""
    withheld: dict[str, set[str]] = {}
    for finding in findings:
        for code in (*protocol_rules.INVALIDATES.get(finding.code, ()), *EXPLAINS.get(finding.code, ())):
            withheld.setdefault(code, set()).add(finding.code)
    present = {f.code for f in findings}
    kept = []
    for finding in findings:
        if finding.code in withheld:
            continue
        dropped = sorted(code for code, causes in withheld.items() if finding.code in causes and code in present)
        if dropped:
            why = (
                "explained by this finding" if finding.code in EXPLAINS else "which measured what this mistake changed"
            )
            finding = finding.replace(
                message=finding.message + f" Withheld: {', '.join(dropped)}, {why}.",
                extra={**finding.extra, "withheld": dropped},
            )
        invalidated = list(protocol_rules.INVALIDATES.get(finding.code, ()))
        if invalidated:  # their data (the gradients table, the charts) would mislead too
            finding = finding.replace(extra={**finding.extra, "invalidates": invalidated})
        kept.append(finding)
    return kept
