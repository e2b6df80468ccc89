"""Static analysis: ``lint_source`` for one text, ``lint_paths`` for files and folders."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from stat import S_ISREG

from ..config import Settings
from ..findings import Finding
from ..records import Record
from . import verbose

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable
    from concurrent.futures import ProcessPoolExecutor

    from ..config_tree import Resolver
    from .cache import ResultCache
    from .discovery import Discovery
    from .engine import FileResult
    from .project.shapes import ModuleSummary

# Below this many files, starting worker processes costs more than it saves.
PARALLEL_THRESHOLD = 48


class LintRun(Record):
    """What a run found: one ``engine.FileResult`` per file, in path order."""

    __slots__ = ("results", "files_checked")

    def __init__(self, results: list[FileResult], files_checked: int = 0) -> None:
        self.results = results
        self.files_checked = files_checked

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
    """Lint one Python source text and return its findings (suppression comments honoured).
    Calls between the text's own functions and methods are followed as in a project of one
    module."""
    from .engine import LintOptions, check_source

    settings = Settings(select=tuple(select), ignore=tuple(ignore))
    options = LintOptions(codes=settings.enabled_codes(known_codes()), summaries=True)
    summary: list[ModuleSummary] = []
    findings, _, parsed = check_source(source, path, options, summary)
    if parsed and summary:
        from .project.run import link_source

        findings = link_source(findings, summary[0], source, path, options.codes)
    return findings


class _Job(Record):
    """One file to lint. ``name``: its path as a string (a path object is made only where one is
    used: a tree's worth of them, and pickling them to the workers, cost 30 ms). ``keyed``: the
    result cache does not know the file, so the worker that reads it also keys its bytes.
    ``codes``: the file's own rule selection, where its configuration's differs from the run's
    (None: ``LintRequest.codes``)."""

    __slots__ = ("name", "display", "per_file_ignored", "keyed", "codes")

    def __init__(
        self, name: str, display: str, per_file_ignored: tuple[str, ...], codes: frozenset[str] | None = None
    ) -> None:
        self.name = name
        self.display = display
        self.per_file_ignored = per_file_ignored
        self.keyed = False
        self.codes = codes

    @property
    def path(self) -> Path:
        return Path(self.name)


class LintRequest(Record):
    """What to lint and how: the settings, the enabled codes and the command line's options."""

    __slots__ = (
        "settings",
        "codes",
        "fix",
        "unsafe_fixes",
        "jobs",
        "prefilter",
        "use_cache",
        "extra_exclude",
        "project",
    )

    def __init__(
        self,
        settings: Settings,
        codes: frozenset[str],
        fix: bool = False,
        unsafe_fixes: bool = False,
        jobs: int | None = None,
        prefilter: bool = True,
        use_cache: bool = False,
        extra_exclude: Sequence[str] = (),
        project: bool = True,
    ) -> None:
        self.settings = settings
        self.codes = codes
        self.fix = fix
        self.unsafe_fixes = unsafe_fixes
        self.jobs = jobs
        self.prefilter = prefilter
        self.use_cache = use_cache
        self.extra_exclude = extra_exclude
        # Follow calls across functions and modules (lint/project); also needs settings.project.
        self.project = project

    @property
    def links_project(self) -> bool:
        return self.project and self.settings.project


def lint_paths(
    paths: Sequence[Path], request: LintRequest, cwd: Path | None = None, resolver: Resolver | None = None
) -> LintRun:
    """Lint files and folders. ``resolver``: each file's settings (the nearest configuration
    above it; ``config_tree.py``); without one, ``request.settings`` apply to every file."""
    from .gc_budget import paused

    with paused():  # see gc_budget.py
        return _lint_paths(paths, request, cwd, resolver)


def _lint_paths(paths: Sequence[Path], request: LintRequest, cwd: Path | None, resolver: Resolver | None) -> LintRun:
    settings = request.settings
    cwd = cwd or Path.cwd()
    if resolver is not None and resolver.fixed is not None:
        resolver = None  # one configuration for every file: ``request.settings``
    discovery = file_discovery(request, resolver)
    base = os.path.realpath(cwd) + os.sep
    per_file = bool(settings.per_file_ignores)
    own_codes: dict[int, frozenset[str] | None] = {}
    cache = None
    if request.use_cache and not request.fix:
        from .cache import ResultCache

        cache = ResultCache(settings.root, request.codes)
        if verbose.on():
            verbose.note(f"results cache {cache.path}: {len(cache.entries)} entries read ({verbose.size(cache.path)})")
    # Where the cache cannot serve the run (no cache, or none yet for this build and these rules),
    # the workers start as soon as the files listed so far are worth them, while the listing goes
    # on: their start (a fork, the imports, the rules' gates) took 50-80 ms before the first batch.
    early = cache is None or not cache.entries
    pool = None
    try:
        jobs = []
        for name in discovery.names(paths):
            if resolver is None:
                jobs.append(_Job(name, _display(name, base), settings.ignored_for(Path(name)) if per_file else ()))
            else:
                own = resolver.for_file(name)
                if id(own) not in own_codes:
                    codes = resolver.codes(own)
                    own_codes[id(own)] = None if codes == request.codes else codes
                ignored = own.ignored_for(Path(name)) if own.per_file_ignores else ()
                jobs.append(_Job(name, _display(name, base), ignored, own_codes[id(own)]))
            if early and len(jobs) == PARALLEL_THRESHOLD:
                pool = _early_pool(request)
        verbose.note(f"{len(jobs)} files to check")
        results = _run_cached(jobs, request, cache, pool) if cache is not None else _run(jobs, request, pool)
        # Saved: the project pass, whose peak is the run's, has no use for its entries.
        cache = None
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    if discovery.unlistable:
        from .engine import unreadable

        results.extend(
            unreadable(_display(f, base), f, f"cannot list folder: {why}") for f, why in discovery.unlistable
        )
    if request.links_project:
        from .gc_budget import held
        from .project.run import link_results

        codes = request.codes.union(*(c for c in own_codes.values() if c is not None))
        try:
            with held():
                link_results(
                    results,
                    settings,
                    codes,
                    request.use_cache and not request.fix,
                    cwd,
                    request.jobs,
                    _file_settings(resolver, request) if resolver and set(own_codes) - {id(settings)} else None,
                )
        except Exception as exc:
            _say_project_failed(exc)
    results.sort(key=lambda r: r.path)
    return LintRun(results, files_checked=len(jobs))


def file_discovery(request: LintRequest, resolver: Resolver | None = None) -> Discovery:
    """The walk that lists a run's files (``discovery.Discovery``): ``request.settings``'
    excludes, or with ``resolver`` each folder's own configuration's."""
    from .discovery import Discovery

    settings = request.settings
    if resolver is None or resolver.fixed is not None:
        excludes = tuple(settings.exclude) + tuple(request.extra_exclude)
        return Discovery(settings.root, excludes, settings.respect_gitignore)
    return Discovery(settings.root, tuple(request.extra_exclude), settings.respect_gitignore, resolver)


def _file_settings(resolver: Resolver, request: LintRequest) -> Callable[[str], tuple[Settings, frozenset[str]]]:
    """For the project pass: a file's settings and enabled codes, by its path."""

    def of(file_path: str) -> tuple[Settings, frozenset[str]]:
        own = resolver.for_file(file_path)
        return own, resolver.codes(own)

    return of


def _say_project_failed(exc: Exception) -> None:
    """One line on stderr: the run goes on with each file's own findings (``AMPDOCTOR_DEBUG=1``
    re-raises, as ``trace`` does: the test suite runs with it, so a failing pass fails a test)."""
    import os
    import sys

    if os.environ.get("AMPDOCTOR_DEBUG"):
        raise exc

    detail = " ".join(str(exc).split())[:200]
    sys.stderr.write(
        f"ampdoctor: the project analysis failed ({type(exc).__name__}"
        f"{': ' + detail if detail else ''}); file-local findings only\n"
    )


def _run_cached(
    jobs: list[_Job], request: LintRequest, cache: ResultCache, pool: ProcessPoolExecutor | None = None
) -> list[FileResult]:
    """Serve unchanged files from the cache; lint the rest (in parallel when there are many).

    A file is read here only when the cache holds findings for it: to show them, or to compare
    its bytes when its size or time changed. The files the cache does not know are read, keyed
    and screened by the token prefilter where they are linted (in the workers, when there are
    many: a tree linted for the first time), and what that found is recorded here afterwards."""
    from .cache import content_key, decode_entry, settings_key
    from .engine import FileResult, result_from_cache

    screens = request.prefilter
    results, misses, stats = [], [], {}
    # A file whose rule selection or per-file ignores are not the run's: its entry is valid only
    # for those (changing a sub-project's configuration lints its files again, and no others).
    cfgs: dict[str, str] = {}
    settled: dict[tuple[int, tuple[str, ...]], str] = {}
    for job in jobs:
        cfg = ""
        if job.codes is not None or job.per_file_ignored:
            cfg = settled.get((id(job.codes), job.per_file_ignored), "")
            if not cfg:
                cfg = settled[(id(job.codes), job.per_file_ignored)] = settings_key(job.codes, job.per_file_ignored)
            cfgs[job.display] = cfg
        try:
            stat = os.stat(job.name)
            if not S_ISREG(stat.st_mode):
                misses.append(job)  # the engine says why it is not read
                continue
            entry = cache.by_stat(job.display, stat, cfg)
            if entry is not None and entry.get("skip") and screens:
                results.append(_served(FileResult(job.display, file_path=job.name), entry, stat))
                continue
            hit = decode_entry(entry) if entry is not None and "key" in entry else None
            if hit is not None and not hit[0]:
                served = FileResult(job.display, suppressed=hit[1], file_path=job.name, parsed=True)
                results.append(_served(served, entry, stat))
                continue
            known = cache.entries.get(job.display)
            if hit is not None or (isinstance(known, dict) and "key" in known):
                with open(job.name, "rb") as handle:  # findings to show, or bytes to compare
                    data = handle.read()
                if hit is None:  # changed size or time, or written just before the cache
                    hit = cache.get(job.display, content_key(data, job.per_file_ignored), stat, cfg)
        except OSError:
            misses.append(job)  # the engine reports why it cannot be read
            continue
        if hit is not None:
            served = result_from_cache(job.path, job.display, data, *hit)
            results.append(_served(served, cache.entries.get(job.display), stat))
            continue
        job.keyed = True
        misses.append(job)
        stats[job.display] = stat
    verbose.note(f"{len(jobs) - len(misses)} files served from the results cache, {len(misses)} to lint")
    for result in _run(misses, request, pool):
        seen_as = stats.get(result.path)
        if seen_as is not None:
            result.seen = (seen_as.st_size, seen_as.st_mtime_ns)
        if seen_as is not None and result.key is not None:
            cfg = cfgs.get(result.path, "")
            if result.screened and screens:
                cache.put_skipped(result.path, seen_as, cfg, result.half_risk)
            elif result.unreported_error is None:
                cache.put(result.path, result.key, result.findings, result.suppressed, seen_as, cfg, result.half_risk)
        results.append(result)
    written = cache.save()
    if written is not None:
        verbose.note(
            f"results cache written: {len(cache.changed)} entries changed, to {written} ({verbose.size(written)})"
        )
    return results


def _served(result: FileResult, entry: object, stat: os.stat_result) -> FileResult:
    """A result served from the cache, with what its entry kept of the file for the project pass
    and the file's size and time as the cache saw them."""
    if isinstance(entry, dict) and "h" in entry:
        result.half_risk = bool(entry["h"])
    result.seen = (stat.st_size, stat.st_mtime_ns)
    return result


def _display(name: str, base: str) -> str:
    """The path relative to the current folder when it is below it, as given otherwise."""
    absolute = name if os.path.isabs(name) else os.path.join(base, name)
    absolute = os.path.normpath(absolute)
    if absolute.startswith(base):
        return absolute[len(base) :].replace(os.sep, "/")
    return Path(name).as_posix()


def _workers(request: LintRequest) -> int:
    return request.jobs if request.jobs is not None else (os.cpu_count() or 1)


def _run(jobs: list[_Job], request: LintRequest, pool: ProcessPoolExecutor | None = None) -> list[FileResult]:
    """Lint ``jobs``: in worker processes when there are many (in ``pool`` when one was
    started early), else here. ``pool`` is shut down once it is of no more use."""
    workers = _workers(request)
    if workers <= 1 or len(jobs) < PARALLEL_THRESHOLD:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)  # started for a folder of few files
        # none: the rules are never imported. With cores to spare, a large module's summary is
        # made partly beside (``summary.start_summary``).
        results = _lint_batch(jobs, request, spare_core=workers > 1) if jobs else []
        if jobs:
            verbose.note(f"linted {len(jobs)} files in this process")
        return results
    if pool is None:
        pool = _start_pool(request)
    with pool:
        batches = _batches(jobs, workers)
        linted = pool.map(_worker_batch, batches, [request] * len(batches))
        if request.links_project:
            _ready_project_pass()
        results = [result for batch in linted for result in batch]
    verbose.note(f"linted {len(jobs)} files in {workers} worker processes")
    return results


def _early_pool(request: LintRequest) -> ProcessPoolExecutor | None:
    """The worker processes, started before all the files are listed. None where one process
    lints."""
    if _workers(request) <= 1:
        return None
    pool = _start_pool(request)
    pool.submit(os.getpid)  # starts the processes now (all of them, where they are forked)
    return pool


def _start_pool(request: LintRequest) -> ProcessPoolExecutor:
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(max_workers=_workers(request), initializer=_worker_ready, initargs=(request,))


def _worker_ready(request: LintRequest) -> None:
    """A worker's start: what every batch needs is imported and built once, before the batches
    come; then what it holds so far is frozen out of the collector's sight (gc_budget.py)."""
    from . import engine
    from .gc_budget import worker_started

    verbose.disable()  # the main process tells what the run did

    if request.prefilter:
        engine.prefilter_spec(request.codes)  # imports the rules
        engine._text_gate(request.codes)  # made once per rule selection, then looked up
    if request.links_project:
        from . import facts  # noqa: F401
        from .project import summary, tokens  # noqa: F401
    worker_started()


def _ready_project_pass() -> None:
    """Import what the project pass runs, while the workers lint: otherwise the pass imports it
    after them (the fact model, the summaries and the rules, for the modules it summarizes on
    demand: 40 ms), when nothing else runs beside it."""
    from . import engine, facts  # noqa: F401
    from .project import run, summary  # noqa: F401
    from .rules import lint_rules

    lint_rules()


def _worker_batch(jobs: list[_Job], request: LintRequest) -> list[FileResult]:
    """``_lint_batch`` in a worker process, which then reclaims what the batch left."""
    results = _lint_batch(jobs, request)
    if request.links_project:
        from .project.packed_calls import packed

        for result in results:
            if result.summary is not None:
                result.summary = packed(result.summary)  # (most of its call records are never read)
    if any(result.parsed for result in results):
        from .gc_budget import collect

        collect()
    return results


def _batches(jobs: list[_Job], workers: int) -> list[list[_Job]]:
    """The jobs in batches for the workers, largest files first (longest-processing-time-first
    scheduling), each batch holding about the same number of bytes: a large file goes alone, so
    the few files that are parsed (the large ones, mostly) spread over the workers instead of
    filling the first batch; the many small ones travel together, for fewer round trips."""
    sized = sorted(((_size(job), job) for job in jobs), key=lambda pair: pair[0], reverse=True)
    budget = max(1, sum(size for size, _ in sized) // (workers * 32))
    batches: list[list[_Job]] = []
    batch: list[_Job] = []
    held = 0
    for size, job in sized:
        if batch and (held + size > budget or len(batch) >= 64):
            batches.append(batch)
            batch, held = [], 0
        batch.append(job)
        held += size
    if batch:
        batches.append(batch)
    return batches


def _size(job: _Job) -> int:
    try:
        return os.stat(job.name).st_size
    except OSError:
        return 0


def _lint_batch(jobs: Iterable[_Job], request: LintRequest, spare_core: bool = False) -> list[FileResult]:
    from .gc_budget import paused

    with paused():  # see gc_budget.py: the collector's own passes cost a sixth of the run
        return _lint_each(jobs, request, spare_core)


def _lint_each(jobs: Iterable[_Job], request: LintRequest, spare_core: bool) -> list[FileResult]:
    from . import engine
    from .engine import LintOptions, prefilter_spec
    from .gc_budget import Spending

    spending = Spending()

    spec = prefilter_spec(request.codes) if request.prefilter else None
    specs = {request.codes: spec}
    results = []
    for job in jobs:
        codes = request.codes if job.codes is None else job.codes
        if codes not in specs:  # a file whose configuration selects other rules
            specs[codes] = prefilter_spec(codes) if request.prefilter else None
        options = LintOptions(
            codes,
            request.fix,
            request.unsafe_fixes,
            job.per_file_ignored,
            summaries=request.links_project,
            spare_core=spare_core,
        )
        try:
            result = engine.lint_file(job.path, job.display, options, specs[codes], job.keyed)
        except Exception as exc:  # a defect of ours on this file: say so, and check the others
            result = engine.internal_error(job.path, job.display, exc)
        results.append(result)
        if result.parsed:
            spending.parsed_source(len(result.source or ""))
        if not result.findings and not request.fix:
            # Nothing reports from the text of a file without findings (the project pass reads
            # a file again where it adds one): the main process would hold the text of every
            # file checked, 8.7 MB of the 31-repository tree's.
            result.source = None
    return results
