"""Point every runtime finding at the user's code.

The rules decide what is wrong; this module decides where the user acts, from what the session
captured (``sites.py``):

- loss-scale findings (AMP501, AMP502) point at the line of ``scaler.step(...)``;
- loss and scaler-less findings (AMP503, AMP510) at the line of the first backward call (AMP510
  at the first float16 autocast region when the rule names it: ``at``);
- findings about a module (AMP504 to AMP509) at the statement in the user's ``forward`` that
  issued the module's op (the op the finding names when there is one, a matmul-class op before
  others), else at the module's class definition when it is the user's.

Every finding about a module also carries the module's class and the file:line of that class
(``class_file``, ``class_line``) and, when known, ``source``: the forward statement as
``file:line``.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from ..findings import Finding, Location
from .observations import Observations
from .opnames import MATMUL_OPS
from .rulebase import class_of, module_class_of
from .sites import format_site, is_user_file

STEP_CODES = frozenset({"AMP501", "AMP502"})
BACKWARD_CODES = frozenset({"AMP503", "AMP510"})


def place_findings(findings: list[Finding], observations: Observations, locator: Any) -> list[Finding]:
    return [_place(finding, observations, locator) for finding in findings]


def _place(finding: Finding, observations: Observations, locator: Any) -> Finding:
    extra: dict[str, Any] = dict(finding.extra)  # the rule's extras, as it made them
    module = extra.get("module")
    location: Optional[Location] = None
    if module or isinstance(extra.get("ops"), dict):
        # A module's findings point at its forward statement; ops outside every module (the
        # loss code after the model) at the statement that ran them.
        if module:
            _add_class(extra, module, observations, locator)
        site = op_site(observations, module, _ops_named(extra))
        if site is not None:
            extra.setdefault("source", format_site(site))
            location = Location(site[0], site[1])
    if finding.code in STEP_CODES and observations.step_site is not None:
        extra.setdefault("step_site", format_site(observations.step_site))
        location = Location(*observations.step_site)
    elif finding.code in BACKWARD_CODES and observations.backward_site is not None:
        extra.setdefault("backward_site", format_site(observations.backward_site))
        location = Location(*observations.backward_site)
    at = extra.pop("at", None)
    if at:  # the rule named the statement itself
        extra["source"] = format_site(tuple(at))
        location = Location(at[0], at[1])
    if location is None:
        location = _class_location(extra) or finding.location
    return finding.replace(location=location, extra=extra)


def _ops_named(extra: dict[str, Any]) -> list[str]:
    named = []
    if extra.get("op"):
        named.append(extra["op"])
    if isinstance(extra.get("ops"), dict):
        named.extend(extra["ops"])
    return named


def op_site(observations: Observations, module: Optional[str], preferred_ops: list[str]) -> Optional[tuple[str, int]]:
    """The user's forward statement that issued an op of ``module``: one of ``preferred_ops``
    first, then a matmul-class op, then any."""
    sites = [(op, site) for (mod, op, _), site in observations.op_sites.items() if mod == module]
    if not sites:
        return None
    for wanted in preferred_ops:
        for op, site in sites:
            if op == wanted:
                return site
    for op, site in sites:
        if op in MATMUL_OPS:
            return site
    return sites[0][1]


def _add_class(extra: dict[str, Any], module: str, observations: Observations, locator: Any) -> None:
    if "class_file" in extra:
        return
    cls = class_of(observations, extra.get("module_class") or module_class_of(observations, module))
    if cls is None:
        return
    extra.setdefault("module_class", cls.__name__)
    path, line = locator.class_source(cls)
    if path:
        extra["class_file"] = path
    if line:
        extra["class_line"] = line


def _class_location(extra: dict[str, Any]) -> Optional[Location]:
    path, line = extra.get("class_file"), extra.get("class_line")
    if path and line and is_user_file(path) and os.path.exists(path):
        return Location(path, line)
    return None
