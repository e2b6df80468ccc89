"""Helpers for the trace tests: run scripts through the click command or the Python API."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest
from click.testing import CliRunner

from ampdoctor.trace.trace_cli import trace_command

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures" / "trace"
SCRIPTS = Path(__file__).resolve().parent / "scripts"


@dataclass
class CliRun:
    exit_code: int
    stdout: str
    stderr: str
    report: Optional[dict[str, Any]]

    @property
    def codes(self) -> set[str]:
        return {f["code"] for f in self.report["findings"]} if self.report else set()


@pytest.fixture
def trace_cli(tmp_path):
    """Invoke ``trace_command`` with CliRunner; the JSON report is read from ``--json``."""

    def invoke(*args: str) -> CliRun:
        json_path = tmp_path / "report.json"
        if json_path.exists():
            json_path.unlink()
        runner = CliRunner()
        result = runner.invoke(trace_command, ["--json", str(json_path), *args], catch_exceptions=False)
        report = json.loads(json_path.read_text()) if json_path.exists() else None
        return CliRun(result.exit_code, result.stdout, result.stderr, report)

    return invoke
