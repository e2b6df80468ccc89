"""torchao float8 training as the reports show it: the JSON report's ``float8`` object (the
float8 watch's observations, per layer) and the cells of the terminal and HTML tables made from
it."""

from __future__ import annotations

from typing import Any, Optional

from ..compare.comparison import json_number
from ..observations import Observations


def float8_cells(layer: dict[str, Any]) -> list[Optional[float]]:
    """One layer of ``float8_dict``, as the tables show it: the share flushed of its input,
    weight and output gradient (None for an operand it never cast) and its output error."""
    casts = layer["casts"]
    values = [
        casts[role]["flushed_share"] if role in casts and casts[role]["nonzero"] else None
        for role in ("input", "weight", "grad_output")
    ]
    values.append(layer["output_error"])
    # JSON numbers: a non-finite one is a string ("NaN", "Infinity"), which float() reads back.
    return [float(value) if value is not None else None for value in values]


def float8_dict(obs: Observations) -> Optional[dict[str, Any]]:
    if not (obs.float8_imported or obs.float8_conversions or obs.float8_casts):
        return None
    from ..float8 import unaligned

    layers: dict[Optional[str], dict[str, Any]] = {}

    def layer(module: Optional[str]) -> dict[str, Any]:
        found = layers.get(module)
        if found is None:
            found = layers[module] = {"module": module, "gemms": 0, "unaligned_gemms": 0, "casts": {}}
        return found

    for (module, role), stats in obs.float8_casts.items():
        layer(module)["casts"][role] = {**stats.to_dict(), "flushed_share": json_number(stats.flushed_share)}
    for (module, _phase, a, b), count in obs.float8_gemms.items():
        entry = layer(module)
        entry["gemms"] += count
        if unaligned(a, b):
            entry["unaligned_gemms"] += count
    for module, shadow in obs.float8_shadows.items():
        layer(module).update(output_error=json_number(shadow.relative_error), forwards=shadow.forwards)
    for entry in layers.values():
        entry.setdefault("output_error", None)
        entry.setdefault("forwards", 0)
    return {
        "conversions": [
            {"file": site[0] if site else None, "line": site[1] if site else None, "linear_layers": n, "converted": c}
            for site, n, c in obs.float8_conversions
        ],
        "output_layer": obs.float8_last_layer,
        "layers": sorted(layers.values(), key=lambda entry: str(entry["module"])),
    }
