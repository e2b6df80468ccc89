"""Static analysis: ``lint_source`` for one text, ``lint_paths`` for files and folders."""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

from ..config import Settings
from ..findings import Finding

# Below this many files, worker start-up (each imports libcst) costs more than it saves.
PARALLEL_THRESHOLD = 48


@dataclass
class LintRun:
    results: list  # list[engine.FileResult]
    files_checked: int = 0

    @property
    def findings(self) -> list[Finding]:
        return [f for r in self.results for f in r.findings]

    @property
    def suppressed(self) -> int:
        return sum(r.suppressed for r in self.results)

    @property
    def fixed(self) -> int:
        return sum(r.fixed for r in self.results)


def known_codes() -> list[str]:
    from ..catalog import all_rules

    return [code for code, rule in all_rules().items() if rule.origin == "lint"]


def lint_source(
    source: str,
    path: str = "<string>",
    *,
    select: Sequence[str] = ("AMP",),
    ignore: Sequence[str] = (),
) -> list[Finding]:
    """Lint one Python source text and return its findings (suppression comments honoured)."""
    from .engine import LintOptions, check_source

    settings = Settings(select=tuple(select), ignore=tuple(ignore))
    options = LintOptions(codes=settings.enabled_codes(known_codes()))
    findings, _, _ = check_source(source, path, options)
    return findings


@dataclass
class _Job:
    path: Path
    display: str
    per_file_ignored: tuple[str, ...]


@dataclass
class LintRequest:
    settings: Settings
    codes: frozenset[str]
    fix: bool = False
    unsafe_fixes: bool = False
    jobs: Optional[int] = None
    prefilter: bool = True
    extra_exclude: Sequence[str] = field(default_factory=tuple)


def lint_paths(paths: Sequence[Path], request: LintRequest, cwd: Optional[Path] = None) -> LintRun:
    from .discovery import Discovery

    settings = request.settings
    cwd = cwd or Path.cwd()
    discovery = Discovery(settings.root, tuple(settings.exclude) + tuple(request.extra_exclude), settings.respect_gitignore)
    jobs = [_Job(p, _display(p, cwd), settings.ignored_for(p)) for p in discovery.files(paths)]
    results = _run(jobs, request)
    results.sort(key=lambda r: r.path)
    return LintRun(results, files_checked=len(jobs))


def _display(path: Path, cwd: Path) -> str:
    try:
        return path.resolve().relative_to(cwd.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def _run(jobs: list[_Job], request: LintRequest) -> list:
    workers = request.jobs if request.jobs is not None else (os.cpu_count() or 1)
    if workers <= 1 or len(jobs) < PARALLEL_THRESHOLD:
        return _lint_batch(jobs, request)
    batches = [jobs[i::workers * 4] for i in range(workers * 4)]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return [result for batch in pool.map(_lint_batch, batches, [request] * len(batches)) for result in batch]


def _lint_batch(jobs: Iterable[_Job], request: LintRequest) -> list:
    from .engine import LintOptions, lint_file, needed_tokens

    tokens = needed_tokens(request.codes) if request.prefilter else None
    results = []
    for job in jobs:
        options = LintOptions(request.codes, request.fix, request.unsafe_fixes, job.per_file_ignored)
        results.append(lint_file(job.path, job.display, options, tokens))
    return results
