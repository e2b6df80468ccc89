"""The ``json-lines`` format: one finding per line, each a compact JSON object.

Each line is the object the ``json`` format puts in its list (``Finding.to_dict()``, made strict
JSON in the same way), so a reader can handle the findings one at a time as they stream in. A
run without findings prints nothing.
"""

from __future__ import annotations

import json
from typing import TextIO

from . import ReportContext
from .json_ import jsonable


def render(ctx: ReportContext, stream: TextIO, *, color: bool) -> None:
    for finding in ctx.findings:
        stream.write(json.dumps(jsonable(finding.to_dict()), separators=(",", ":"), allow_nan=False) + "\n")
