"""Lint recall and precision on a corpus of training scripts with their mistakes marked.

    python benchmarks/recall_bench.py [CORPUS] [--by-code] [--details]

CORPUS defaults to benchmarks/recall/. Every ``# expect: AMPxxx`` marker names a mistake lint
should report on that line; a file without markers is clean. A folder with a ``pyproject.toml``
is a multi-module project: it is linted as a whole, as ``ampdoctor lint FOLDER`` would, so that
mistakes that take a second module to see are scored too; other files are linted one by one. A finding counts as found when
its code and line match a marker; any other finding is a false alarm; a marker with no finding
is a miss. The table gives, per rule family and overall: expected mistakes, findings, found,
false alarms, misses, precision (found / findings) and recall (found / expected), in Markdown.
``--by-code`` adds a row per code; ``--details`` lists every miss and false alarm after the table.
Nothing here is asserted: the numbers are measured, and the tests only check the scoring.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = Path(__file__).resolve().parent / "recall"
FAMILIES = {
    "1": "AMP1xx autocast regions",
    "2": "AMP2xx GradScaler protocol",
    "3": "AMP3xx numerics",
    "4": "AMP4xx API and migration",
}
_MARKER = re.compile(r"#\s*expect:\s*((?:AMP\d{3}[\s,]*)+)")


def expected_marks(source: str) -> Counter:
    """(line, code) → how many times that mistake is marked."""
    marks: Counter = Counter()
    for number, line in enumerate(source.splitlines(), start=1):
        found = _MARKER.search(line)
        if found:
            for code in re.findall(r"AMP\d{3}", found.group(1)):
                marks[(number, code)] += 1
    return marks


def found_marks(source: str, path: str) -> Counter:
    import ampdoctor

    return Counter((f.location.line, f.code) for f in ampdoctor.lint_source(source, path))


def project_folders(corpus: Path) -> list[Path]:
    """The multi-module projects in the corpus (folders with a pyproject.toml), outermost only."""
    folders: list[Path] = []
    for marker in sorted(corpus.rglob("pyproject.toml")):
        folder = marker.parent
        if not any(folder.is_relative_to(outer) for outer in folders):
            folders.append(folder)
    return folders


def project_marks(folder: Path) -> dict[Path, Counter]:
    """Per file of a project: (line, code) of each finding, the project linted as a whole."""
    import ampdoctor

    run = ampdoctor.lint_paths([folder], config=folder / "pyproject.toml")
    marks: dict[Path, Counter] = {}
    for result in run.results:
        path = Path(result.file_path).resolve()
        marks[path] = Counter((f.location.line, f.code) for f in result.findings)
    return marks


def score_file(expected: Counter, found: Counter) -> tuple[Counter, Counter, Counter]:
    """Per code: (hits, false alarms, misses) of one file."""
    hits, false_alarms, misses = Counter(), Counter(), Counter()
    for key in expected.keys() | found.keys():
        code = key[1]
        matched = min(expected[key], found[key])
        hits[code] += matched
        false_alarms[code] += found[key] - matched
        misses[code] += expected[key] - matched
    return hits, false_alarms, misses


class Score:
    """Totals for one row of the table."""

    def __init__(self) -> None:
        self.hits = self.false_alarms = self.misses = 0

    def add(self, hits: int, false_alarms: int, misses: int) -> None:
        self.hits += hits
        self.false_alarms += false_alarms
        self.misses += misses

    @property
    def expected(self) -> int:
        return self.hits + self.misses

    @property
    def findings(self) -> int:
        return self.hits + self.false_alarms

    @property
    def precision(self) -> float | None:
        return self.hits / self.findings if self.findings else None

    @property
    def recall(self) -> float | None:
        return self.hits / self.expected if self.expected else None


def score_corpus(corpus: Path) -> tuple[dict[str, Score], list[str], int]:
    """Scores per code (with "" for nothing), notes on misses and false alarms, files read."""
    per_code: dict[str, Score] = {}
    notes: list[str] = []
    files = sorted(corpus.rglob("*.py"))
    in_projects: dict[Path, Counter] = {}
    for folder in project_folders(corpus):
        in_projects.update(project_marks(folder))
        in_projects.update((p.resolve(), in_projects.get(p.resolve(), Counter())) for p in folder.rglob("*.py"))
    for path in files:
        source = path.read_text(encoding="utf-8")
        expected = expected_marks(source)
        found = in_projects.get(path.resolve())
        if found is None:
            found = found_marks(source, str(path))
        hits, false_alarms, misses = score_file(expected, found)
        for code in hits.keys() | false_alarms.keys() | misses.keys():
            per_code.setdefault(code, Score()).add(hits[code], false_alarms[code], misses[code])
        name = path.relative_to(corpus)
        for line, code in sorted(found - expected):
            notes.append(f"false alarm {code} {name}:{line}")
        for line, code in sorted(expected - found):
            notes.append(f"miss        {code} {name}:{line}")
    return per_code, notes, len(files)


def rows(per_code: dict[str, Score], by_code: bool) -> list[tuple[str, Score]]:
    families: dict[str, Score] = {}
    overall = Score()
    for code, score in per_code.items():
        family = FAMILIES.get(code[3:4], f"{code[:4]}xx")
        families.setdefault(family, Score()).add(score.hits, score.false_alarms, score.misses)
        overall.add(score.hits, score.false_alarms, score.misses)
    table: list[tuple[str, Score]] = []
    for family in sorted(families):
        table.append((family, families[family]))
        if by_code:
            prefix = family[:4]
            table.extend((f"  {code}", per_code[code]) for code in sorted(per_code) if code.startswith(prefix))
    table.append(("**overall**", overall))
    return table


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def markdown(table: list[tuple[str, Score]]) -> str:
    lines = [
        "| rules | expected | findings | found | false alarms | misses | precision | recall |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, s in table:
        lines.append(
            f"| {label} | {s.expected} | {s.findings} | {s.hits} | {s.false_alarms} | {s.misses} "
            f"| {_ratio(s.precision)} | {_ratio(s.recall)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", nargs="?", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--by-code", action="store_true", help="a row per code under each family")
    parser.add_argument("--details", action="store_true", help="list every miss and false alarm")
    args = parser.parse_args(argv)
    if not args.corpus.is_dir():
        print(f"error: {args.corpus} is not a folder", file=sys.stderr)
        return 2
    per_code, notes, count = score_corpus(args.corpus)
    if count == 0:
        print(f"error: no .py files under {args.corpus}", file=sys.stderr)
        return 2
    clean = sum(1 for p in args.corpus.rglob("*.py") if not expected_marks(p.read_text(encoding="utf-8")))
    print(f"{count} files ({clean} clean) in {args.corpus}\n")
    print(markdown(rows(per_code, args.by_code)))
    if args.details and notes:
        print()
        print("\n".join(notes))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
