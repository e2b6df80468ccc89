"""Precision and recall of ``ampdoctor lint`` on labelled files of public repositories.

    python benchmarks/realcode_bench.py MIRRORS [MANIFEST ...] [--ampdoctor EXE] [--no-project] [-v]

MANIFEST: JSON lists of labelled files (default: the three in ``benchmarks/realcode/``); each
entry names a repository (``OWNER/NAME``), a commit, a file path and its expected findings
(``code``, ``line``, optional ``alt_lines``, ``scope`` — ``lexical`` when the mistake shows inside
one function, ``cross_function`` or ``cross_file`` otherwise — and ``debatable``). MIRRORS holds a
git snapshot of each repository as ``OWNER+NAME/repo`` (bare, or a work tree with ``.git``).

Each repository is linted whole at its commit, as a user lints it (``lint --isolated --no-cache
--output-format json`` on a folder holding the commit's ``.py`` files), and only the labelled
files are scored. A finding matches an expected one of the same code on its line or an
alternative line, give or take two lines; for AMP211, also up to fifteen lines after it (the
``torch.save`` of a labelled dict). A finding on a debatable label counts neither way; any other
unmatched finding in a labelled file is a false alarm. Nothing is asserted: the figures are
printed, per manifest and in total (precision, lexical recall, cross-scope recall).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_MANIFESTS = sorted((HERE / "realcode").glob("*.json"))


def git_dir(mirrors: Path, repo: str) -> Path:
    folder = mirrors / repo.replace("/", "+") / "repo"
    return folder / ".git" if (folder / ".git").is_dir() else folder


def extract(git: Path, commit: str, into: Path) -> bool:
    """Write the commit's ``.py`` files under ``into``; False when the commit is not there."""
    listing = subprocess.run(
        ["git", "--git-dir", str(git), "ls-tree", "-r", "--name-only", commit], capture_output=True, text=True
    )
    if listing.returncode:
        return False
    paths = [p for p in listing.stdout.splitlines() if p.endswith(".py")]
    into.mkdir(parents=True, exist_ok=True)
    for start in range(0, len(paths), 500):  # command lines have a length limit
        archive = subprocess.run(
            ["git", "--git-dir", str(git), "archive", "--format=tar", commit, "--", *paths[start : start + 500]],
            capture_output=True,
        )
        if archive.stdout:
            with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
                tar.extractall(into, filter="data")
    return True


def lint(exe: str, folder: Path, no_project: bool) -> list[dict]:
    args = [exe, "lint", "--isolated", "--no-cache", "--output-format", "json", str(folder)]
    if no_project:
        args.insert(2, "--no-project")
    done = subprocess.run(args, capture_output=True, text=True, timeout=1800)
    data = json.loads(done.stdout or "[]")
    return data if isinstance(data, list) else data.get("findings", [])


def lines_of(expected: dict) -> set[int]:
    anchors = {expected["line"], *expected.get("alt_lines", [])}
    spread = range(-2, 16) if expected["code"] == "AMP211" else range(-2, 3)
    return {line + d for line in anchors for d in spread}


def score(entries: list[dict], found: dict[tuple[str, str, str], list[dict]], verbose: bool) -> Counter:
    tally: Counter = Counter()
    for entry in entries:
        key = (entry["repo"], entry["commit"], entry["path"])
        findings = found.get(key)
        if findings is None:
            tally["unavailable"] += 1
            continue
        matched: set[int] = set()
        for expected in entry["expected"]:
            near = lines_of(expected)
            hits = [i for i, f in enumerate(findings) if f["code"] == expected["code"] and f["line"] in near]
            matched.update(hits)
            if expected.get("debatable"):
                continue
            kind = "lexical" if expected.get("scope", "lexical") == "lexical" else "cross"
            tally[f"{kind} expected"] += 1
            if hits:
                tally[f"{kind} found"] += 1
                tally["true"] += 1
            elif verbose:
                print(
                    f"  miss {entry['id']} {expected['code']} {entry['path']}:{expected['line']} ({expected['scope']})"
                )
        for i, finding in enumerate(findings):
            if i not in matched:
                tally["false"] += 1
                if verbose:
                    print(f"  false alarm {entry['id']} {finding['code']} {entry['path']}:{finding['line']}")
    return tally


def line(name: str, tally: Counter) -> str:
    judged = tally["true"] + tally["false"]
    precision = tally["true"] / judged if judged else 0.0
    return (
        f"{name}: precision {precision:.3f} ({tally['true']} true, {tally['false']} false), "
        f"lexical recall {tally['lexical found']}/{tally['lexical expected']}, "
        f"cross-scope recall {tally['cross found']}/{tally['cross expected']}"
        + (f", {tally['unavailable']} files without a snapshot" if tally["unavailable"] else "")
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mirrors", type=Path)
    parser.add_argument("manifests", nargs="*", type=Path)
    parser.add_argument("--ampdoctor", default=str(Path(sys.executable).with_name("ampdoctor")))
    parser.add_argument("--no-project", action="store_true", help="score the file-local analysis alone")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every miss and false alarm")
    options = parser.parse_args()
    manifests = options.manifests or DEFAULT_MANIFESTS
    sets = {path: json.loads(path.read_text(encoding="utf-8")) for path in manifests}
    found: dict[tuple[str, str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="realcode-") as scratch:
        pairs = sorted({(e["repo"], e["commit"]) for entries in sets.values() for e in entries})
        for repo, commit in pairs:
            root = Path(scratch) / f"{repo.replace('/', '+')}@{commit[:12]}"
            if not extract(git_dir(options.mirrors, repo), commit, root):
                print(f"no snapshot of {repo} at {commit[:12]}", file=sys.stderr)
                continue
            wanted = {
                e["path"] for entries in sets.values() for e in entries if (e["repo"], e["commit"]) == (repo, commit)
            }
            for path in wanted:
                found[(repo, commit, path)] = []
            for finding in lint(options.ampdoctor, root, options.no_project):
                rel = os.path.relpath(os.path.realpath(finding["path"]), os.path.realpath(root)).replace(os.sep, "/")
                if rel in wanted:
                    found[(repo, commit, rel)].append(finding)
    total: Counter = Counter()
    for path, entries in sets.items():
        if options.verbose:
            print(path.name)
        tally = score(entries, found, options.verbose)
        print(line(path.name, tally))
        total.update(tally)
    if len(sets) > 1:
        print(line("all", total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
