"""The ``json`` format: a list of ``Finding.to_dict()`` objects, a stable interface.

Each object has ``code``, ``name``, ``severity``, ``message``, ``path``, ``line``, ``column``,
``end_line``, ``end_column``, ``cell`` (null outside notebooks), ``help`` (null or text) and
``fix`` (null or ``{description, applicability, edits: [{line, column, end_line, end_column,
content}]}``), ``related`` (a list, empty unless another function or module explains the
finding: ``[{path, line, column, message}]``); runtime findings add ``extra``. The output is strict JSON: non-finite numbers
become the strings ``"inf"``, ``"-inf"`` and ``"nan"``.
"""

from __future__ import annotations

import json
import math
from typing import Any, TextIO

from . import ReportContext


def render(ctx: ReportContext, stream: TextIO, *, color: bool) -> None:
    data = [jsonable(finding.to_dict()) for finding in ctx.findings]
    json.dump(data, stream, indent=2, allow_nan=False)
    stream.write("\n")


def jsonable(value: Any) -> Any:
    """``value`` with every part representable in strict JSON."""
    if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    return str(value)
