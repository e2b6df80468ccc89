"""Static analysis: ``lint_source`` for one text, ``lint_paths`` for files and folders."""

from __future__ import annotations

import os
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
    use_cache: bool = False
    extra_exclude: Sequence[str] = field(default_factory=tuple)


def lint_paths(paths: Sequence[Path], request: LintRequest, cwd: Optional[Path] = None) -> LintRun:
    from .discovery import Discovery

    settings = request.settings
    cwd = cwd or Path.cwd()
    discovery = Discovery(settings.root, tuple(settings.exclude) + tuple(request.extra_exclude), settings.respect_gitignore)
    jobs = [_Job(p, _display(p, cwd), settings.ignored_for(p)) for p in discovery.files(paths)]
    if request.use_cache and not request.fix:
        results = _run_cached(jobs, request)
    else:
        results = _run(jobs, request)
    results.sort(key=lambda r: r.path)
    return LintRun(results, files_checked=len(jobs))


def _run_cached(jobs: list[_Job], request: LintRequest) -> list:
    """Serve unchanged files from the cache; lint the rest (in parallel when there are many)."""
    from .cache import ResultCache, content_key
    from .engine import FileResult, passes_prefilter, prefilter_spec, result_from_cache

    cache = ResultCache(request.settings.root, request.codes)
    spec = None
    if request.prefilter:
        # The spec comes from the rule classes (importing libcst); a warm cache knows it.
        spec = cache.prefilter
        if spec is None:
            spec = prefilter_spec(request.codes)
            cache.prefilter = spec
    results, misses, keys = [], [], {}
    for job in jobs:
        try:
            data = job.path.read_bytes()
        except OSError:
            misses.append(job)  # the engine reports why it cannot be read
            continue
        if spec is not None and not passes_prefilter(data, spec):
            results.append(FileResult(job.display, file_path=str(job.path)))
            continue
        key = content_key(data, job.per_file_ignored)
        hit = cache.get(job.display, key)
        if hit is None:
            misses.append(job)
            keys[job.display] = key
        else:
            results.append(result_from_cache(job.path, job.display, data, *hit))
    for result in _run(misses, request):
        results.append(result)
        if result.path in keys:
            cache.put(result.path, keys[result.path], result.findings, result.suppressed)
    cache.save()
    return results


def _display(path: Path, cwd: Path) -> str:
    try:
        return path.resolve().relative_to(cwd.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def _run(jobs: list[_Job], request: LintRequest) -> list:
    workers = request.jobs if request.jobs is not None else (os.cpu_count() or 1)
    if workers <= 1 or len(jobs) < PARALLEL_THRESHOLD:
        return _lint_batch(jobs, request)
    from concurrent.futures import ProcessPoolExecutor

    batches = [jobs[i::workers * 4] for i in range(workers * 4)]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return [result for batch in pool.map(_lint_batch, batches, [request] * len(batches)) for result in batch]


def _lint_batch(jobs: Iterable[_Job], request: LintRequest) -> list:
    from . import engine
    from .engine import LintOptions, prefilter_spec

    spec = prefilter_spec(request.codes) if request.prefilter else None
    results = []
    for job in jobs:
        options = LintOptions(request.codes, request.fix, request.unsafe_fixes, job.per_file_ignored)
        results.append(engine.lint_file(job.path, job.display, options, spec))
    return results
