import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
# An internal failure re-raises instead of being said in one line (the project pass, trace):
# a test then fails on it. The tests of that one line take the variable away.
os.environ.setdefault("AMPDOCTOR_DEBUG", "1")
# Every trace notes an autocast dtype the machine has no fast arithmetic for (AMP514, info): on a
# CPU that depends on the machine the tests run on. The tests of that note turn it back on.
os.environ.setdefault("AMPDOCTOR_HARDWARE_CHECK", "0")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests of the training frameworks, of several processes and in a browser are slow by nature:
    the fast lane (``pytest -m "not slow"``) leaves them out without each test saying so twice."""
    for item in items:
        if any(item.get_closest_marker(name) for name in ("frameworks", "distributed", "browser")):
            item.add_marker(pytest.mark.slow)
