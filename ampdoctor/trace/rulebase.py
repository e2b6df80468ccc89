"""What every runtime rule shares: the registry, thresholds, where findings point, how a finding
is made.

A rule is a function registered with ``@rule("AMP5xx")``, in a module that ``ampdoctor/codes.py``
names for its code. A rule of one run (scope "run") takes
the observations, the thresholds and a ``Locator`` that turns a module class into a
``Location``, and yields findings; a rule of the merged torchrun report (scope "ranks") takes the
ranks' JSON reports and a location and returns a finding or None; a rule of ``--compare
float32`` (scope "compare") takes the observations, the comparison, the profile, the hardware,
the thresholds and a locator, and yields findings (rules/compare_rules.py). Severities come from the rule
pages (``rules/AMP5xx.md``). The rules themselves live in ``rules/``.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, Optional

from ..catalog import severity_of
from ..codes import check_registration
from ..findings import Finding, Location
from .observations import Observations

FLOAT32_SMALLEST_NORMAL = 2.0**-126

RULE_SCOPES = ("run", "ranks", "compare")


@dataclass(frozen=True)
class RegisteredRule:
    code: str
    check: Callable[..., Any]
    scope: str = "run"


_REGISTRY: list[RegisteredRule] = []


def rule(code: str, scope: str = "run") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the check behind ``code`` (several functions may
    report one code)."""
    if scope not in RULE_SCOPES:
        raise ValueError(f"unknown rule scope {scope!r}")

    def register(check: Callable[..., Any]) -> Callable[..., Any]:
        check_registration(code, check.__module__, "trace.rules.")
        _REGISTRY.append(RegisteredRule(code, check, scope))
        return check

    return register


def registered(scope: Optional[str] = None) -> list[RegisteredRule]:
    """The rules registered so far, in code order (registration order within a code)."""
    return sorted((r for r in _REGISTRY if scope is None or r.scope == scope), key=lambda r: r.code)


@dataclass(frozen=True)
class Thresholds:
    """Rule thresholds; every one can be changed (``--threshold NAME=VALUE`` on the CLI)."""

    # AMP501: the scale fell below this, or backed off this many times in a row.
    collapse_scale: float = 1.0
    collapse_backoffs: int = 10
    # AMP502: share of skipped steps among the iterations after the warm-up.
    skip_warmup: int = 20
    skip_share: float = 0.05
    # AMP504 (backward): skipped steps before an overflow born in the backward is reported (a
    # skip or two while GradScaler calibrates its scale is how it is meant to work).
    origin_skips: int = 4
    # AMP505: share of gradient elements, of a parameter or reaching a module's outputs, that
    # float16 loses at the loss scale in use: flushed to zero (below 2**-24) or kept with at most
    # 4 significant bits (below 2**-20: a rounding error over 2**-5 of the value, up to 1/2).
    # Subnormals from 2**-20 up keep 5 to 10 bits (at most 3% rounding error, small beside the
    # gradient's own mini-batch noise): not counted, however many they are. The share must also
    # be exceeded over the whole model (all parameter elements; all measured boundary elements):
    # a few modules losing a little are not the model's gradients underflowing. Exact zeros
    # count (parameters only) where at least ``underflow_evidence`` of the elements sit between
    # 2**-24 and 2**-20, evidence that the values reach down to where float16 flushes: zeros
    # alone are usually structural (inactive ReLU units, unused embedding rows).
    underflow_share: float = 0.01
    underflow_evidence: float = 0.001
    # AMP506: float16 outputs above FLOAT16_MAX / activation_headroom.
    activation_headroom: float = 4.0
    # --compare float32: below this speed-up, or this memory saving, AMP512-AMP514 explain why.
    compare_speedup: float = 1.1
    compare_memory_saving: float = 0.10
    # --compare float32: no speed verdict when the cores other processes kept busy differ by more
    # than this between the two runs (a tenth of the machine's cores where that is more).
    compare_load_change: float = 0.5
    # --compare float32, CPU autocast: no speed verdict when the machine was saturated during a run
    # and the script's threads got less than this share of the cores they would use.
    compare_busy: float = 0.75
    # AMP513: dtype conversions above this share of iteration time.
    cast_share: float = 0.10
    # AMP512: a module with misaligned GEMMs is reported from this share of GEMM time.
    align_share: float = 0.02
    # AMP515: share of an operand's non-zero values that its float8 casts flushed to zero, over
    # at least ``float8_min_values`` values. A healthy tensorwise cast flushes only values about
    # 2**17 (e4m3) below the tensor's largest; this share means an outlier set the scale.
    float8_flush_share: float = 0.05
    float8_min_values: int = 256

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def with_overrides(self, overrides: dict[str, str]) -> Thresholds:
        values = asdict(self)
        for name, text in overrides.items():
            if name not in values:
                raise ValueError(f"unknown threshold {name!r} (known: {', '.join(self.names())})")
            kind = type(values[name])
            try:
                values[name] = kind(float(text)) if kind is int else kind(text)
            except ValueError:
                raise ValueError(f"threshold {name} needs a number, got {text!r}") from None
        return Thresholds(**values)


class Locator:
    """Locations for runtime findings: the traced script, at a module class's line when that
    class is defined in the script."""

    def __init__(self, script: Optional[str], class_files: dict[type, Optional[str]]) -> None:
        self.script = script or "<trace>"
        self._class_files = class_files

    def class_source(self, cls: Optional[type]) -> tuple[Optional[str], Optional[int]]:
        from .numerics import class_source

        if cls is None:
            return None, None
        return class_source(cls, self._class_files)

    def location(self, cls: Optional[type] = None) -> Location:
        path, line = self.class_source(cls)
        if path and line and _same_file(path, self.script):
            return Location(self.script, line)
        return Location(self.script, 1)

    def at(self, site: Optional[tuple[str, int]]) -> Location:
        """A (file, line) of the user's code the run recorded; the script when there is none."""
        return Location(*site) if site else self.location()


def died_of(observations: Observations, *fragments: str) -> Optional[tuple[str, Optional[tuple[str, int]]]]:
    """The script's error (message, where in the user's code) when the script died of an error
    whose message holds one of ``fragments``; None otherwise."""
    error = observations.script_error
    if error is None or not any(fragment in error[0] for fragment in fragments):
        return None
    return error


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def defined_at(path: Optional[str], line: Optional[int]) -> str:
    """ ", class defined at FILE:LINE" for a class in the user's code; torch's own say nothing."""
    from .sites import is_user_file

    return f", class defined at {path}:{line}" if path and line and is_user_file(path) else ""


def make_finding(code: str, message: str, location: Location, help: str, **extra: Any) -> Finding:
    return Finding(
        code=code,
        severity=severity_of(code),
        message=message,
        location=location,
        help=help,
        extra={k: v for k, v in extra.items() if v is not None},
    )


def format_scale(scale: float) -> str:
    if scale <= 0 or not math.isfinite(scale):
        return repr(scale)
    exponent = math.log2(scale)
    if exponent.is_integer():
        return f"{scale:g} (2**{int(exponent)})" if abs(exponent) > 16 or scale < 1 else f"{scale:g}"
    return f"{scale:.4g}"


def _modules_of(observations: Observations) -> dict[str, type]:
    classes: dict[str, type] = {}
    for cls in observations.class_files:
        classes.setdefault(cls.__name__, cls)
    return classes


def class_of(observations: Observations, class_name: Optional[str]) -> Optional[type]:
    return _modules_of(observations).get(class_name) if class_name else None


def module_location(locator: Locator, observations: Observations, module: Optional[str]) -> Location:
    """Where a finding about ``module`` points: its class's definition in the script, if found."""
    return locator.location(class_of(observations, module_class_of(observations, module)))


def module_class_of(observations: Observations, module: Optional[str]) -> Optional[str]:
    if module is None:
        return None
    stats = observations.activations.get(module)
    if stats is not None:
        return stats.module_class
    for grad in observations.gradients.values():
        if grad.module == module:
            return grad.module_class
    return None
