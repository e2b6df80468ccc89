"""A traced script leaves the thread's autocast state as it found it, however it was stopped."""

import torch

from ampdoctor.trace.autocast_state import _nesting, autocast_as_found, autocast_off


def test_a_region_left_open_is_closed_and_the_state_put_back():
    torch.set_autocast_dtype("cpu", torch.float16)
    try:
        with autocast_as_found():
            region = torch.autocast("cpu", dtype=torch.bfloat16)
            region.__enter__()  # as a stop landing inside ``with`` before the block began leaves it
            torch.autocast("cpu", dtype=torch.float16, cache_enabled=False).__enter__()
            assert torch.is_autocast_enabled("cpu") and _nesting() == 2
            assert not torch.is_autocast_cache_enabled()
        assert not torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.float16
        assert _nesting() == 0 and torch.is_autocast_cache_enabled()
    finally:
        torch.set_autocast_dtype("cpu", torch.bfloat16)


def test_a_region_the_caller_has_open_stays_open():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with autocast_as_found():
            with torch.autocast("cpu", enabled=False):
                torch.autocast("cpu", dtype=torch.float16).__enter__()
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert _nesting() == 1
    assert not torch.is_autocast_enabled("cpu") and _nesting() == 0


def test_autocast_off_switches_only_open_regions_off_and_back_on():
    with torch.autocast("cpu", dtype=torch.float16):
        with autocast_off(["cpu", "cpu", "meta", "cuda"]):
            assert not torch.is_autocast_enabled("cpu") and not torch.is_autocast_enabled("cuda")
            assert torch.get_autocast_dtype("cpu") == torch.float16
        assert torch.is_autocast_enabled("cpu") and not torch.is_autocast_enabled("cuda")
    with autocast_off(["cpu"]):
        assert not torch.is_autocast_enabled("cpu")
    assert not torch.is_autocast_enabled("cpu")
