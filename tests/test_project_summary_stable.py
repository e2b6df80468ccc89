"""A module's summary is the same text in every run: the cache stores it as JSON, and a run that
hashes strings another way (``PYTHONHASHSEED``) must not write it differently."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SUMMARIZE_FIXTURES = """
import json, sys
from pathlib import Path
from ampdoctor.lint.engine import decode_source, parse_source
from ampdoctor.lint.facts import build_facts
from ampdoctor.lint.project.summary import summarize
for path in sorted(Path(sys.argv[1]).rglob("*.py")):
    source = decode_source(path.read_bytes())
    try:
        tree = parse_source(source)
    except SyntaxError:
        continue
    print(path.name, json.dumps(summarize(build_facts(tree, source)), separators=(",", ":")))
"""


def _summaries(seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    fixtures = str(ROOT / "fixtures" / "lint")
    done = subprocess.run(
        [sys.executable, "-c", SUMMARIZE_FIXTURES, fixtures], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout


def test_the_summaries_of_the_fixtures_are_the_same_text_whatever_the_hash_seed():
    first = _summaries("1")
    assert first.count("\n") >= 200 and '"flows"' in first
    assert _summaries("2") == first
    assert _summaries("3") == first
