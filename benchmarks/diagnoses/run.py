"""Run the diagnosis benchmark: trace every case and score what the report concludes.

    python benchmarks/diagnoses/run.py [--case NAME ...] [--no-frameworks] [--jobs N] [--details]

Every case (see cases.py) is run as ``python -m ampdoctor trace SCRIPT --steps 0 --json ...
-- ARGS``, each script ending by its own limit. The report is scored:

- **culprit**: the top runtime finding (the first of the report's ``findings``, which are
  ordered by severity) has the expected code (and names the expected module, where a case says);
- **line**: that finding points at the case's script, at one of the expected lines;
- **cure**: its message and help match every ``cure`` pattern and no ``cure_not`` pattern;
- **false alarms**: warnings and errors, at run time or from lint, other than the expected and
  allowed codes, plus any forbidden code at any severity. For a healthy case every warning and
  error is a false alarm.

The lint column lists the codes of the report's static findings (lint of the script), which
are shown for comparison and do not count as the tracer's culprit. A case is right when
culprit, line and cure are right and there is no false alarm (healthy: no false alarm).
Prints a Markdown table; ``--details`` adds, per case that is not right, what the report said;
``--json PATH`` writes every case's score and top finding; ``--update-docs`` also replaces
the table in docs/trace.md (between its ``diagnoses-table`` markers) with this run's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cases import CASES, ROOT, Case, stale_cases

SEVERE = {"warning", "error"}
TABLE_PAGE = ROOT / "docs" / "trace.md"
TABLE_START = "<!-- diagnoses-table:start -->"
TABLE_END = "<!-- diagnoses-table:end -->"


@dataclass
class Score:
    case: str
    mistake: str
    expected: Optional[str]
    expected_lines: list[int]
    top: Optional[str] = None
    top_where: Optional[str] = None
    top_text: str = ""
    culprit: bool = False
    line: bool = False
    cure: bool = False
    false_alarms: list[str] = field(default_factory=list)
    runtime_codes: list[str] = field(default_factory=list)
    static_codes: list[str] = field(default_factory=list)
    error: Optional[str] = None
    run_error: Optional[str] = None

    @property
    def right(self) -> bool:
        if self.run_error:
            return False
        if self.expected is None:
            return not self.false_alarms
        return self.culprit and self.line and self.cure and not self.false_alarms


def trace_case(case: Case, timeout: float = 600.0) -> tuple[Optional[dict[str, Any]], Optional[str]]:
    """Trace one case in a subprocess; the JSON report, or why there is none."""
    with tempfile.TemporaryDirectory() as folder:
        report_path = Path(folder) / "report.json"
        command = [
            sys.executable,
            "-m",
            "ampdoctor",
            "trace",
            str(case.script),
            "--steps",
            str(case.steps),
            "--json",
            str(report_path),
            "--no-progress",
            "--fail-on",
            "never",
            "--timeout",
            str(int(timeout * 0.8)),
            "--",
            *case.args,
        ]
        env = dict(os.environ, PYTHONHASHSEED="0", COLUMNS="200")
        try:
            done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, f"no report within {timeout:.0f} s"
        if not report_path.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
            return None, f"exit {done.returncode}, no report: {tail[0]}"
        return json.loads(report_path.read_text()), None


def _text(finding: dict[str, Any]) -> str:
    return " ".join(str(finding.get(key) or "") for key in ("message", "help"))


def _points_at(finding: dict[str, Any], case: Case, lines: tuple[int, ...]) -> bool:
    path = finding.get("path")
    if not path:
        return False
    where = Path(path) if Path(path).is_absolute() else ROOT / path  # the trace ran in ROOT
    return where.resolve() == case.script.resolve() and finding.get("line") in lines


def score(case: Case, report: Optional[dict[str, Any]], run_error: Optional[str] = None) -> Score:
    lines = case.lines()
    result = Score(case.name, case.mistake, case.expect, list(lines), run_error=run_error)
    if report is None:
        return result
    findings = report.get("findings") or []
    static = report.get("static_findings") or []
    result.runtime_codes = [f["code"] for f in findings]
    result.static_codes = [f["code"] for f in static]
    result.error = report.get("error")
    expected = {case.expect, *case.also} - {None}
    for finding in [*findings, *static]:
        code = finding["code"]
        if code in case.forbidden or (finding.get("severity") in SEVERE and code not in expected | set(case.allowed)):
            result.false_alarms.append(code)
    if findings:
        top = findings[0]
        result.top = top["code"]
        where = top.get("path")
        result.top_where = f"{Path(where).name}:{top.get('line')}" if where else None
        result.top_text = _text(top)
        if case.expect is not None:
            result.culprit = top["code"] in expected and (not case.modules or (top.get("module") or "") in case.modules)
            result.line = result.culprit and _points_at(top, case, lines)
            text = result.top_text
            result.cure = (
                result.culprit
                and all(re.search(p, text, re.I) for p in case.cure)
                and not any(re.search(p, text, re.I) for p in case.cure_not)
            )
    return result


def run_cases(cases: list[Case], jobs: int = 1) -> list[Score]:
    def one(case: Case) -> Score:
        report, run_error = trace_case(case)
        return score(case, report, run_error)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, cases))


def _mark(ok: bool, applies: bool = True) -> str:
    if not applies:
        return "–"
    return "yes" if ok else "**no**"


def table(scores: list[Score]) -> str:
    rows = [
        "| case | mistake | expected | top runtime finding | culprit | line | cure | false alarms | lint |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in scores:
        bug = s.expected is not None
        expected = f"{s.expected} :{','.join(map(str, s.expected_lines))}" if bug else "nothing"
        if s.run_error:
            top = f"(no report: {s.run_error})"
        else:
            top = f"{s.top} {s.top_where or ''}".strip() if s.top else "nothing"
        alarms = ", ".join(s.false_alarms) if s.false_alarms else "0"
        if s.false_alarms:
            alarms = f"**{alarms}**"
        lint = ", ".join(sorted(set(s.static_codes))) or "–"
        rows.append(
            f"| `{s.case}` | {s.mistake} | {expected} | {top} | {_mark(s.culprit, bug)} | {_mark(s.line, bug)} | "
            f"{_mark(s.cure, bug)} | {alarms} | {lint} |"
        )
    bugs = [s for s in scores if s.expected is not None]
    healthy = [s for s in scores if s.expected is None]
    rows.append("")
    rows.append(
        f"Injected mistakes: {len(bugs)}; culprit right {sum(s.culprit for s in bugs)}, line right "
        f"{sum(s.line for s in bugs)}, cure right {sum(s.cure for s in bugs)}, without false alarms "
        f"{sum(not s.false_alarms and not s.run_error for s in bugs)}, all right {sum(s.right for s in bugs)}. "
        f"Healthy versions: {len(healthy)}, without a warning {sum(s.right for s in healthy)}."
    )
    return "\n".join(rows)


def details(scores: list[Score]) -> str:
    out = []
    for s in scores:
        if s.right:
            continue
        out.append(
            f"- `{s.case}`: runtime {s.runtime_codes or 'none'}, lint {s.static_codes or 'none'}"
            + (f", script error {s.error}" if s.error else "")
            + (f", {s.run_error}" if s.run_error else "")
        )
        if s.top_text:
            out.append(f"  top finding ({s.top_where}): {s.top_text.strip()}")
    return "\n".join(out)


def update_docs(text: str, path: Path = TABLE_PAGE) -> None:
    """Put ``text`` between the page's diagnoses-table markers."""
    page = path.read_text()
    start, end = page.find(TABLE_START), page.find(TABLE_END)
    if start < 0 or end < start:
        raise SystemExit(f"error: {path.name} has no {TABLE_START} ... {TABLE_END} block")
    path.write_text(page[: start + len(TABLE_START)] + "\n" + text + "\n" + page[end:])


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--case", action="append", default=[], help="run only cases whose name contains this (repeatable)"
    )
    parser.add_argument(
        "--no-frameworks", action="store_true", help="leave out the transformers/Lightning/Accelerate cases"
    )
    parser.add_argument("--jobs", type=int, default=1, help="cases traced at the same time")
    parser.add_argument(
        "--details", action="store_true", help="after the table, what the report said where it is wrong"
    )
    parser.add_argument("--json", metavar="PATH", help="write every case's score as JSON")
    parser.add_argument(
        "--update-docs", "--update-readme", action="store_true", help="also put the table into docs/trace.md"
    )
    args = parser.parse_args(argv)
    if args.update_docs and (args.case or args.no_frameworks):
        print("error: --update-docs needs every case (no --case, no --no-frameworks)", file=sys.stderr)
        return 2
    stale = stale_cases()
    if stale:
        print(
            f"error: case scripts out of date ({', '.join(stale)}): run python benchmarks/diagnoses/cases.py",
            file=sys.stderr,
        )
        return 2
    cases = [c for c in CASES if not (args.no_frameworks and c.framework)]
    if args.case:
        cases = [c for c in cases if any(part in c.name for part in args.case)]
    if not cases:
        print("error: no case matches", file=sys.stderr)
        return 2
    scores = run_cases(cases, args.jobs)
    print(table(scores))
    if args.details:
        print()
        print(details(scores))
    if args.update_docs:
        update_docs(table(scores))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(s) | {"right": s.right} for s in scores], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
