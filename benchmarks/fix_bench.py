"""Fix safety on public training repositories: what `--fix` and `--fix --unsafe-fixes` do to them.

Usage:
    python benchmarks/fix_bench.py AMPDOCTOR MIRRORS LIST.json [LIST.json ...] [-v]

AMPDOCTOR  the ampdoctor executable (for example .venv/bin/ampdoctor)
MIRRORS    folder holding one git snapshot per repository as OWNER+NAME/repo
LIST.json  repositories at pinned commits: a {"repos": [{"repo", "commit"}]} file
           (benchmarks/wild/verdicts.json) or a list of {"repo", "commit", ...} entries
           (the realcode manifests); each repository is taken once

For every repository, and for each of the two modes, the commit's .py files are written into a
scratch folder and the folder is linted whole, as a user would, then:

    ampdoctor lint --isolated --no-cache --fix [--unsafe-fixes] FOLDER   (twice)

A repository passes a mode when
  * every file the fixes changed still compiles (`compile(..., "exec")`);
  * linting the fixed folder reports, for every rule, no more findings than before the fix
    (nothing new), and fewer in all when some fix was applied;
  * the second `--fix` changes no file (a fix run is idempotent);
  * neither run exits with 2 for a reason the unfixed folder does not share (a fix that could
    not be applied or written).

The script prints one line per repository and mode and a summary; with -v, the codes fixed.
Exit status: 0 when every repository passes both modes, 1 otherwise.
Only the standard library is used (Python 3.11).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from wild_bench import extract_py, git_dir


def repositories(lists: list[str]) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for name in lists:
        data = json.loads(pathlib.Path(name).read_text(encoding="utf-8"))
        entries = data["repos"] if isinstance(data, dict) else data
        for entry in entries:
            seen.setdefault(entry["repo"], entry["commit"])
    return sorted(seen.items())


def lint(exe: str, folder: pathlib.Path, *flags: str) -> tuple[int, list[dict], str]:
    proc = subprocess.run(
        [exe, "lint", "--isolated", "--no-cache", "--output-format", "json", *flags, "."],
        cwd=folder,
        capture_output=True,
        text=True,
    )
    try:
        findings = json.loads(proc.stdout) if proc.stdout.strip() else []
    except json.JSONDecodeError:
        findings = []
    return proc.returncode, findings, proc.stderr


def digests(folder: pathlib.Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*.py"))
    }


def check_mode(
    exe: str, source: pathlib.Path, scratch: pathlib.Path, unsafe: bool
) -> tuple[bool, str, collections.Counter]:
    folder = scratch / ("unsafe" if unsafe else "safe")
    shutil.copytree(source, folder)
    flags = ["--fix", "--unsafe-fixes"] if unsafe else ["--fix"]
    _, before, _ = lint(exe, folder)
    start = digests(folder)
    _, _, fix_err = lint(exe, folder, *flags)
    middle = digests(folder)
    changed = [name for name in middle if middle[name] != start.get(name)]
    problems = []
    for name in changed:
        try:
            compile((folder / name).read_bytes(), name, "exec")
        except (SyntaxError, ValueError) as exc:
            problems.append(f"{name} no longer compiles: {exc}")
    _, after, _ = lint(exe, folder)
    counts_before = collections.Counter(f["code"] for f in before)
    counts_after = collections.Counter(f["code"] for f in after)
    grown = {c: (counts_before[c], counts_after[c]) for c in counts_after if counts_after[c] > counts_before[c]}
    if grown:
        problems.append(f"findings added: {grown}")
    if changed and sum(counts_after.values()) >= sum(counts_before.values()):
        problems.append("files changed but no finding went away")
    new_errors = [line for line in fix_err.splitlines() if "not fixed" in line or "does not parse" in line]
    problems += new_errors
    lint(exe, folder, *flags)
    if digests(folder) != middle:
        problems.append("a second --fix changed files again")
    fixed = counts_before - counts_after
    summary = f"{len(changed)} files changed, {sum(fixed.values())} findings fixed"
    return not problems, summary + ("; " + "; ".join(problems) if problems else ""), fixed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ampdoctor")
    ap.add_argument("mirrors")
    ap.add_argument("lists", nargs="+")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    exe = args.ampdoctor if os.sep in args.ampdoctor else shutil.which(args.ampdoctor)
    exe = str(pathlib.Path(exe).resolve())
    mirrors = pathlib.Path(args.mirrors)
    results = []
    totals: dict[str, collections.Counter] = {"safe": collections.Counter(), "unsafe": collections.Counter()}
    with tempfile.TemporaryDirectory(prefix="ampdoctor-fix-bench.") as tmp:
        for repo, commit in repositories(args.lists):
            folder = repo.replace("/", "+")
            gdir = git_dir(mirrors / folder / "repo")
            if not gdir.exists():
                print(f"{repo}: no snapshot under {mirrors}", file=sys.stderr)
                continue
            source = pathlib.Path(tmp) / folder / "source"
            source.mkdir(parents=True)
            try:
                files = extract_py(gdir, commit, source)
            except subprocess.CalledProcessError:
                print(f"{repo}: commit {commit[:12]} not in the snapshot", file=sys.stderr)
                continue
            for unsafe in (False, True):
                mode = "unsafe" if unsafe else "safe"
                ok, summary, fixed = check_mode(exe, source, pathlib.Path(tmp) / folder, unsafe)
                totals[mode] += fixed
                results.append(ok)
                print(f"{'ok  ' if ok else 'FAIL'} {mode:6} {repo} ({files} files): {summary}")
                if args.verbose and fixed:
                    print("       fixed: " + ", ".join(f"{c} {n}" for c, n in sorted(fixed.items())))
            shutil.rmtree(pathlib.Path(tmp) / folder)
    repos = len(results) // 2
    print(f"\nrepositories: {repos}; runs passed: {sum(results)}/{len(results)}")
    for mode, counter in totals.items():
        print(f"findings fixed ({mode}): " + (", ".join(f"{c} {n}" for c, n in sorted(counter.items())) or "none"))
    return 0 if results and all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
