"""Precision of ampdoctor on public training code "in the wild".

Usage:
    python benchmarks/wild_bench.py AMPDOCTOR VERDICTS MIRRORS [-v]

AMPDOCTOR  the ampdoctor executable (for example .venv/bin/ampdoctor)
VERDICTS   benchmarks/wild/verdicts.json
MIRRORS    folder holding one git snapshot per repository as OWNER+NAME/repo
           (a bare git directory, or a work tree with a .git folder inside)

For every repository listed in VERDICTS the script takes the pinned commit, writes
that commit's .py files into a scratch folder (blob by blob, the same files
`git archive` would give, but it tolerates snapshots that lack large non-Python
blobs) and lints the folder whole, as a user would:

    ampdoctor lint --isolated --no-cache --output-format json FOLDER

Findings are matched to verdicts on (repo, path, code, line). AMP401 (deprecated
API) is not judged: its findings are counted but neither matched nor listed.
The script prints:

  * the findings per code and the verdicts per kind (true / false / debatable);
  * precision = true / (true + false) over the judged findings that are still
    reported (debatable findings count neither way);
  * "unjudged": findings that have no verdict yet (new findings to judge);
  * "vanished": verdicts whose finding is no longer reported.

With -v it also lists every matched finding with its verdict and reason.
Exit status: 0 when every repository could be linted, 1 otherwise.
Only the standard library is used (Python 3.11).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

NOT_JUDGED = {"AMP401"}
KINDS = ("true", "false", "debatable")


def git_dir(mirror: pathlib.Path) -> pathlib.Path:
    """The git directory of a snapshot: bare, or with a .git folder inside."""
    return mirror / ".git" if (mirror / ".git").exists() else mirror


def extract_py(gdir: pathlib.Path, commit: str, dest: pathlib.Path) -> int:
    """Write the .py files of `commit` under `dest`; return how many were written."""
    listing = subprocess.run(
        ["git", "--git-dir", str(gdir), "ls-tree", "-r", "-z", commit],
        capture_output=True,
        check=True,
    ).stdout
    entries = []
    for record in listing.split(b"\0"):
        if not record:
            continue
        meta, path = record.split(b"\t", 1)
        mode, kind, sha = meta.split()
        # regular files only: symlinks (120000) and submodules (commit) are skipped
        if kind == b"blob" and mode != b"120000" and path.endswith(b".py"):
            entries.append((sha.decode(), path.decode("utf-8", "surrogateescape")))
    if not entries:
        return 0
    batch = subprocess.run(
        ["git", "--git-dir", str(gdir), "cat-file", "--batch"],
        input="".join(sha + "\n" for sha, _ in entries).encode(),
        capture_output=True,
        check=True,
    ).stdout
    pos = written = 0
    for _sha, path in entries:
        end = batch.index(b"\n", pos)
        header = batch[pos:end].split()
        pos = end + 1
        if header[-1] == b"missing":  # blob absent from the snapshot
            continue
        size = int(header[2])
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(batch[pos : pos + size])
        pos += size + 1
        written += 1
    return written


def lint(ampdoctor: str, root: pathlib.Path, folder: str) -> list[dict]:
    """Lint `root/folder` from `root`; return its findings with repo-relative paths."""
    proc = subprocess.run(
        [ampdoctor, "lint", "--isolated", "--no-cache", "--output-format", "json", folder],
        cwd=root,
        capture_output=True,
        text=True,
    )
    # exit status 1 (findings) and 2 (AMP000, an unparsable file) are normal here
    findings = json.loads(proc.stdout)
    prefix = folder + "/"
    for f in findings:
        if f["path"].startswith(prefix):
            f["path"] = f["path"][len(prefix) :]
    return findings


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ampdoctor")
    ap.add_argument("verdicts")
    ap.add_argument("mirrors")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)

    # the linter runs from a scratch folder: pin the executable to an absolute path
    exe = args.ampdoctor if os.sep in args.ampdoctor else shutil.which(args.ampdoctor)
    if not exe or not os.access(exe, os.X_OK):
        ap.error(f"not an executable: {args.ampdoctor}")
    args.ampdoctor = os.path.abspath(exe)

    data = json.loads(pathlib.Path(args.verdicts).read_text())
    mirrors = pathlib.Path(args.mirrors)
    verdicts = {}
    for v in data["verdicts"]:
        verdicts[(v["repo"], v["path"], v["code"], int(v["line"]))] = v

    per_code = collections.Counter()
    matched: list[tuple[dict, dict]] = []
    unjudged: list[tuple[str, dict]] = []
    seen_keys = set()
    failed = []
    skipped_codes = collections.Counter()

    with tempfile.TemporaryDirectory(prefix="wild_bench_") as tmp:
        root = pathlib.Path(tmp)
        for entry in data["repos"]:
            repo, commit = entry["repo"], entry["commit"]
            folder = repo.replace("/", "+")
            try:
                n = extract_py(git_dir(mirrors / folder / "repo"), commit, root / folder)
                findings = lint(args.ampdoctor, root, folder)
            except (subprocess.CalledProcessError, json.JSONDecodeError, OSError) as exc:
                failed.append((repo, str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__))
                continue
            if args.verbose:
                print(f"# {repo}@{commit[:12]}: {n} .py files, {len(findings)} findings", file=sys.stderr)
            for f in findings:
                per_code[f["code"]] += 1
                if f["code"] in NOT_JUDGED:
                    skipped_codes[f["code"]] += 1
                    continue
                key = (repo, f["path"], f["code"], int(f["line"]))
                if key in verdicts:
                    seen_keys.add(key)
                    matched.append((f, verdicts[key]))
                else:
                    unjudged.append((repo, f))

    failed_repos = {r for r, _ in failed}
    vanished = [v for k, v in verdicts.items() if k not in seen_keys and k[0] not in failed_repos]

    linted = len(data["repos"]) - len(failed)
    print(f"repositories linted: {linted}/{len(data['repos'])}")
    for repo, why in failed:
        print(f"  FAILED {repo}: {why}")
    total = sum(per_code.values())
    print(f"findings: {total} ({', '.join(f'{c} {n}' for c, n in sorted(per_code.items()))})")
    print(f"not judged by design: {sum(skipped_codes.values())} ({', '.join(sorted(skipped_codes))})")

    kinds = collections.Counter(v["verdict"] for _, v in matched)
    by_code = collections.defaultdict(collections.Counter)
    for f, v in matched:
        by_code[f["code"]][v["verdict"]] += 1
    print("verdicts of the reported findings: " + ", ".join(f"{k} {kinds.get(k, 0)}" for k in KINDS))
    for code in sorted(by_code):
        c = by_code[code]
        print(f"  {code}: " + ", ".join(f"{k} {c.get(k, 0)}" for k in KINDS))
    t, fa = kinds.get("true", 0), kinds.get("false", 0)
    prec = f"{t / (t + fa):.3f}" if t + fa else "n/a"
    print(f"precision: {prec} (true {t} / (true {t} + false {fa}); debatable {kinds.get('debatable', 0)} not counted)")

    if args.verbose:
        print("matched findings:")
        for f, v in sorted(matched, key=lambda m: (m[1]["repo"], m[0]["path"], m[0]["line"])):
            print(f"  [{v['verdict']}] {v['repo']} {f['path']}:{f['line']} {f['code']}: {v['reason']}")

    print(f"unjudged ({len(unjudged)}):")
    for repo, f in sorted(unjudged, key=lambda u: (u[0], u[1]["path"], u[1]["line"])):
        print(f"  {repo} {f['path']}:{f['line']} {f['code']} {f['message'][:100]}")
    print(f"vanished ({len(vanished)}):")
    for v in sorted(vanished, key=lambda v: (v["repo"], v["path"], v["line"])):
        print(f"  {v['repo']} {v['path']}:{v['line']} {v['code']} [{v['verdict']}]")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
