"""The thread's autocast state: switched off for the tracer's own ops, and left after a traced
script as it was found before it.

The tracer reads its statistics when the script steps, and a script may step inside its autocast
region (AMP102). Under autocast ``cat`` and ``stack`` cast their inputs to one dtype: for float16
tensors in a bfloat16 region that raises ("Unexpected floating ScalarType in
at::autocast::prioritize"), and float64 ones are narrowed. ``autocast_off`` switches the regions
open on the tensors' device types off for the tracer's block, and on again after it.

A script stopped by ``--timeout`` can be stopped anywhere, torch's own ``autocast.__enter__``
and ``__exit__`` included: a stop that lands after the region switched autocast on but before
its ``with`` block began (or inside the exit, before it switched it back) leaves autocast on for
everything the process runs next. Stopping a tight loop of regions leaked that way in about one
run in five. ``autocast_as_found`` puts the state back once the script has ended: per device
type, whether autocast is on, its dtype, the cache switch, and the nesting level (whose return
to zero clears the cast cache, as the outermost exit does).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

# The device types autocast keeps a state for (one that this build does not know is skipped).
DEVICE_TYPES = ("cpu", "cuda", "xpu", "hpu", "mps", "mtia", "maia", "xla", "ipu", "privateuseone")


class autocast_off:
    """``with autocast_off(device_types):`` the block runs as outside any autocast region on
    those device types (a region open there is on again after it)."""

    def __init__(self, device_types: Iterable[str]) -> None:
        self._off = [kind for kind in set(device_types) if _enabled(kind)]

    def __enter__(self) -> None:
        for kind in self._off:
            torch.set_autocast_enabled(kind, False)

    def __exit__(self, *exc_info: Any) -> None:
        for kind in self._off:
            torch.set_autocast_enabled(kind, True)


def _enabled(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except RuntimeError:  # a device type without autocast ("meta")
        return False


def _nesting() -> int:
    level = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    return level


def _states() -> dict[str, tuple[bool, torch.dtype]]:
    states = {}
    for device in DEVICE_TYPES:
        try:
            states[device] = (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
        except RuntimeError:  # not a device type of this build
            continue
    return states


@contextmanager
def autocast_as_found() -> Iterator[None]:
    """Within the block, anything; after it, this thread's autocast state as before it."""
    before, cache, nesting = _states(), torch.is_autocast_cache_enabled(), _nesting()
    try:
        yield
    finally:
        for device, (enabled, dtype) in before.items():
            if torch.is_autocast_enabled(device) != enabled:
                torch.set_autocast_enabled(device, enabled)
            if torch.get_autocast_dtype(device) != dtype:
                torch.set_autocast_dtype(device, dtype)
        torch.set_autocast_cache_enabled(cache)
        level = _nesting()
        while level > nesting:
            level = torch.autocast_decrement_nesting()
            if level == 0:
                torch.clear_autocast_cache()
