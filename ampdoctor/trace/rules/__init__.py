"""The runtime rules (AMP501-AMP522), one module per concern, each rule registered by its code
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
- ``float8_rules.py``     AMP515 float8 casts that flush values to zero, AMP516 unaligned float8 GEMMs,
                          AMP517 the output layer in float8, AMP518 a conversion that converted nothing,
                          AMP519 a GPU without float8 GEMMs, AMP520 float8 layers that never ran,
                          AMP521 float8 scales gone wrong (inf/NaN operands, amax floored or zero),
                          AMP522 MXFP8 layers that ran without their bias

``evaluate`` runs the rules of one run on its observations; ``evaluate_ranks`` the rules of a
merged report on the ranks' JSON reports. Every message says what was measured and every help
text says what to change, in the training script's terms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ...findings import Finding, Location
from ..observations import Observations
from ..rulebase import Locator, Thresholds, registered

if TYPE_CHECKING:
    from .compare_rules import Compared


def _load() -> None:
    """Import every rule module ``ampdoctor/codes.py`` names (importing one registers its rules)."""
    import importlib

    from ...codes import PACKAGE, modules_under

    for module in modules_under("trace.rules."):
        importlib.import_module(f"{PACKAGE}.{module}")


_load()


def registered_codes() -> list[str]:
    return sorted({entry.code for entry in registered()})


def evaluate(
    observations: Observations, thresholds: Thresholds, locator: Locator, compared: Optional[Compared] = None
) -> list[Finding]:
    """The findings of one run, the one path every finding of a run takes: the rules of the run
    and, for ``--compare float32``'s mixed-precision run (``compared``), those of the comparison;
    then what ``WITHHOLDS`` withholds, each finding placed at the user's statement, most severe
    first."""
    from ..placing import place_findings

    observations.name_origin_op()
    findings = [finding for entry in registered("run") for finding in entry.check(observations, thresholds, locator)]
    if compared is not None:
        from .compare_rules import evaluate_compare, with_gemm_share

        found = evaluate_compare(observations, compared, thresholds, locator)
        if any(f.code == "AMP514" for f in found):  # the measured finding replaces the expected one
            findings = [f for f in findings if f.code != "AMP514"]
        findings = with_gemm_share(findings, observations, compared.profile) + found
    findings = _withhold(findings)
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


# What a finding withholds, and why: the one policy for findings that would mislead beside it.
INVALIDATES, EXPLAINS = "invalidates", "explains"
WITHHOLDS: dict[str, tuple[str, tuple[str, ...]]] = {
    # A protocol mistake (protocol_rules.py) makes the numeric findings that measured what it
    # changed meaningless: the gradients were clipped while scaled (AMP201); the weights were
    # stepped with scaled gradients, so whatever overflowed afterwards (the loss, activations,
    # the scale) follows from that step (AMP203).
    "AMP201": (INVALIDATES, ("AMP505",)),
    "AMP203": (INVALIDATES, ("AMP501", "AMP502", "AMP503", "AMP504", "AMP505", "AMP506")),
    # Gradients of an unscaled loss stepped by a scaler: it scaled nothing, so "no scaler" and
    # the underflow at its scale describe this same mistake.
    "AMP204": (INVALIDATES, ("AMP501", "AMP502", "AMP505", "AMP510")),
    # A scaler made anew restarts from its initial scale: its calibration skips are this mistake.
    "AMP205": (INVALIDATES, ("AMP501", "AMP502", "AMP504")),
    # float16 weights stepped directly: the NaN/inf that follow come from the update itself.
    "AMP303": (INVALIDATES, ("AMP501", "AMP502", "AMP503", "AMP504", "AMP505", "AMP508", "AMP510")),
    # A finding whose message already states what another would add: float16 without a scaler
    # (AMP510) says how many parameters lose their gradient, which is AMP505 at scale 1.
    "AMP510": (EXPLAINS, ("AMP505",)),
}


def _withhold(findings: list[Finding]) -> list[Finding]:
    """Drop the findings another finding of the run invalidates or explains (``WITHHOLDS``); the
    finding that stays says which were withheld and why."""
    withheld: dict[str, set[str]] = {}
    for finding in findings:
        for code in WITHHOLDS.get(finding.code, ("", ()))[1]:
            withheld.setdefault(code, set()).add(finding.code)
    present = {f.code for f in findings}
    kept = []
    for finding in findings:
        if finding.code in withheld:
            continue
        how, codes = WITHHOLDS.get(finding.code, ("", ()))
        dropped = sorted(code for code in codes if code in present)
        if dropped:
            why = "explained by this finding" if how == EXPLAINS else "which measured what this mistake changed"
            finding = finding.replace(
                message=finding.message + f" Withheld: {', '.join(dropped)}, {why}.",
                extra={**finding.extra, "withheld": dropped},
            )
        if how == INVALIDATES:  # their data (the gradients table, the charts) would mislead too
            finding = finding.replace(extra={**finding.extra, "invalidates": list(codes)})
        kept.append(finding)
    return kept
