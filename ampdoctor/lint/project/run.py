"""The project pass: after every file has been linted on its own, link the project and add the
cross-module findings to the files being reported (and withdraw a file's own finding where the
project shows what the file alone could not: ``seeds.withdrawn``).

The project is the marked folder above the linted paths (``root.py``), or their common folder
when there is none. Its files are listed with the run's own exclusions; the linted files are the
*targets* (the only ones reported), the others take part through their summaries.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ...catalog import severity_of
from ...findings import Finding, Location, Related
from .. import verbose
from ..cache import CACHE_DIR
from .checks import run_checks
from .link import Project
from .reports import Callers, CrossReport, said_by_the_file
from .reuse import load_reports, reports_path, save_reports, state_key
from .root import project_root
from .store import SummaryStore
from .tokens import float16_risk
from .words import Words

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable

    from ...config import Settings
    from ..engine import FileResult
    from .shapes import ModuleSummary

    # A file's own (settings, enabled codes), by its path.
    FileSettings = Callable[[str], tuple[Settings, frozenset[str]]]

# More Python files than any project holds: the marked folder is something else (a home folder
# kept in git), and listing it would cost more than the lint itself.
MAX_PROJECT_FILES = 50_000


def project_folder(paths: Sequence[Path | str]) -> tuple[Path, bool] | None:
    """The project the linted files belong to, and whether it is a marked folder (whose other
    files take part) or only the linted files' common folder (then the project is the files
    that were linted: a folder without a marker may be a home folder or ``/tmp``)."""
    if not paths:
        return None
    root = project_root(paths)
    if root is not None:
        return root, True
    folders = list({os.path.dirname(os.path.abspath(p)) for p in paths})
    return Path(os.path.commonpath(folders)), False


def link_results(
    results: list[FileResult],
    settings: Settings,
    codes: frozenset[str],
    use_cache: bool,
    cwd: Path,
    jobs: int | None = None,
    file_settings: FileSettings | None = None,
    unsaved: bool = False,
) -> None:
    """Add the cross-module findings to ``results`` (engine.FileResult objects), in place.
    ``unsaved``: each result's ``source`` is an editor's text for its file, which the analysis
    reads instead of the file (and the caches never keep).
    ``file_settings``: where files have their own configurations, a file's (settings, enabled
    codes) by its path (``codes`` is then all of theirs together); None: ``settings`` and
    ``codes`` for every file."""
    targets = {}
    result: FileResult | None  # (also, below, a project file's result: None where it is not linted)
    for result in results:
        # A file that fixes changed is judged again on the next run, against its new text.
        if result.file_path.endswith(".py") and result.error is None and not result.changed:
            targets[os.path.abspath(result.file_path)] = result
    if not targets:
        return
    found = project_folder(list(targets))  # absolute path strings: no path objects for a whole tree
    if found is None:
        return
    root, marked = found
    if marked:
        files = _project_files(root, targets, Path(settings.root) / CACHE_DIR if use_cache and not unsaved else None)
        if files is None:
            return
    else:
        files = sorted(_relative(path, str(root)) for path in targets)
    store = SummaryStore(root, Path(settings.root) / CACHE_DIR if use_cache else None)
    if verbose.on() and store.path is not None:
        verbose.note(f"summaries index {store.path}: {len(store.entries)} modules ({verbose.size(store.path)})")
    project = Project(
        set(files),
        store.summary,
        store.defines_without,
        store.outline,
        store.text,
        store.imports,
        store.class_statements,
    )
    base = str(root)
    target_rels = {}
    for rel in files:
        result = targets.get(os.path.join(base, rel))
        if result is not None:
            target_rels[rel] = result
    unknown = []
    for rel, result in target_rels.items():
        if unsaved and result.summary is not None:
            store.hold(rel, (result.source or "").encode("utf-8"), result.summary)
            result.summary = None
        elif result.summary is not None:  # made by the lint pass from the facts its rules used
            try:
                store.put(rel, (root / rel).read_bytes(), result.summary)
            except OSError:
                pass
            result.summary = None  # the reporters have no use for it
        elif not result.parsed:
            store.note(rel)  # read and passed over by the lint pass: nothing to link
        elif not store.known(rel):
            unknown.append(rel)  # served from the result cache, its summary lost: make it again
        if result.tokens is not None:  # what the lint pass read of its bytes
            store.seed(rel, result.tokens)
            result.tokens = None
    for rel in unknown:
        store.summary(rel)
        store.mark_linted(rel)
    # A named file can hold a cross-module finding when the lint pass summarized it, now or in
    # an earlier run: it parsed it (its rules' anchors hold: it has a scaler, autocast ...), or
    # the file clips gradients (an update helper). Other files are summarized only on demand.
    checked = [rel for rel in target_rels if store.linted(rel)]
    store.prefetch(checked, jobs)
    callers = Callers(files, store.has_class, store.mentions, store.names, store.text)
    # Named files that only hold what float16 autocast set up elsewhere breaks (a BCE, a large
    # fill): summarized only if such an autocast reaches them.
    lazy = []
    if "AMP301" in codes or "AMP105" in codes:
        summarized = set(checked)
        lazy = [
            rel
            for rel, result in target_rels.items()
            if rel not in summarized
            and (
                result.half_risk
                if result.half_risk is not None
                else store.has_class(rel, "half_risk") and float16_risk(store.text(rel) or b"")
            )
        ]
    key = None
    if store.path and not unsaved:
        seen = {rel: result.seen for rel, result in target_rels.items() if result.seen is not None}
        key = state_key(root, files, len(target_rels), codes, checked, lazy, seen)
    reports = load_reports(reports_path(store.path), key) if store.path is not None and key is not None else None
    if reports is None:
        reports = run_checks(project, checked, callers, codes, lazy, store if jobs != 1 else None)
        if store.path is not None and key is not None:
            save_reports(reports_path(store.path), key, reports)
        verbose.note(f"project checks ran on {len(checked)} named modules: {_shown(reports)} findings")
    else:
        verbose.note(f"project checks reused from the cache (nothing they read changed): {_shown(reports)} findings")
    if verbose.on():
        verbose.note(
            f"summaries: {store.decoded} read from the store, {store.made} made in this process (beside the lint pass's)"
            + (f", {store.taken} made by the forked one" if store.taken else "")
        )
    del project, callers  # what the checks learned: let go before the store is written
    if use_cache:
        store.forget_missing(set(files))
        store.save()
        _tag_folder(Path(settings.root) / CACHE_DIR)
    if reports:
        _attach(reports, target_rels, root, cwd, settings, file_settings)


def _project_files(root: Path, targets: dict[str, FileResult], folder: Path | None = None) -> list[str] | None:
    """Project-relative POSIX paths of the project's Python modules (the linted ones included).

    Files the run excludes from linting (the configuration's ``exclude``, ``--exclude``) are
    still part of the project: a call may land in them, and nothing is reported there. Folders that hold no project code are skipped: the
    tool folders lint never walks (``.venv``, ``build``, ``site-packages`` ...), hidden folders,
    and the folders named in the root's ``.gitignore`` (``wandb/``, ``outputs/``). A plain walk
    of names, without path objects: a pre-commit run lists thousands of files to lint one, and
    with ``folder`` (the cache folder) only the folders that changed since the last run
    (``listing.py``).
    """
    from ..discovery import DEFAULT_EXCLUDED_DIRS
    from .listing import project_modules

    skipped = frozenset(DEFAULT_EXCLUDED_DIRS) | _ignored_folders(root)
    base = str(root)
    found = project_modules(base, skipped, MAX_PROJECT_FILES, folder)
    if found is None:
        return None  # a home folder under version control, not a project: link nothing
    for path in targets:
        rel = _relative(path, base)
        if not rel.startswith(".."):
            found.add(rel)
    return sorted(found)


def _relative(path: str, base: str) -> str:
    """The POSIX path of ``path`` (absolute and normalized) relative to the folder ``base``."""
    if path.startswith(base) and path[len(base) : len(base) + 1] == os.sep:
        rel = path[len(base) + 1 :]
    else:
        rel = os.path.relpath(path, base)
    return rel.replace(os.sep, "/") if os.sep != "/" else rel


def _ignored_folders(root: Path) -> set[str]:
    """Plain folder names the root's ``.gitignore`` ignores (``wandb/``, ``/outputs``)."""
    try:
        text = (root / ".gitignore").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return set()
    names = set()
    for line in text.splitlines():
        line = line.strip().strip("/")
        if line and not line.startswith(("#", "!")) and "/" not in line and not any(c in line for c in "*?[]"):
            names.add(line)
    return names


def _display(path: Path, cwd: Path) -> str:
    base = os.path.realpath(cwd) + os.sep
    absolute = os.path.realpath(path)
    return absolute[len(base) :].replace(os.sep, "/") if absolute.startswith(base) else path.as_posix()


def _attach(
    reports: list[CrossReport],
    targets: dict[str, FileResult],
    root: Path,
    cwd: Path,
    settings: Settings,
    file_settings: FileSettings | None = None,
) -> None:
    from ..engine import decode_source
    from ..suppressions import apply_suppressions

    by_module: dict[str, list[CrossReport]] = {}
    for report in reports:
        by_module.setdefault(report.module, []).append(report)
    for rel, group in by_module.items():
        result = targets[rel]
        group = _withdraw(result, group)
        taken = {(f.code, f.location.line) for f in result.findings}
        findings = []
        own = settings
        if file_settings is not None:
            own, enabled = file_settings(result.file_path)
            group = [report for report in group if report.code in enabled]
        for report in group:
            line, column, end_line, end_column = report.at
            if said_by_the_file(report, rel, taken):
                continue  # the file-local rule already says it there
            taken.add((report.code, line))
            related = tuple(
                Related(result.path if module == rel else _display(root / module, cwd), at[0], at[1], message)
                for module, at, message in report.related
            )
            findings.append(
                Finding(
                    report.code,
                    severity_of(report.code),
                    report.message,
                    Location(result.path, line, column, end_line, end_column),
                    help=report.help,
                    extra={"_noqa_lines": [line]},
                    related=related,
                )
            )
        if not findings:
            continue
        source = result.source
        if source is None:
            try:
                source = decode_source(Path(result.file_path).read_bytes())
            except (OSError, ValueError):
                continue
            result.source = source
        ignored = own.ignored_for(Path(result.file_path)) if own.per_file_ignores else ()
        kept, suppressed = apply_suppressions(findings, source, ignored)
        result.findings = sorted([*result.findings, *kept], key=Finding.sort_key)
        result.suppressed += suppressed
        result.parsed = True


def _shown(reports: list[CrossReport]) -> int:
    """How many of ``reports`` add a finding (not withdraw one)."""
    return sum(1 for report in reports if not report.code.startswith("-"))


def _withdraw(result: FileResult, group: list[CrossReport]) -> list[CrossReport]:
    """Drop the file's own findings that the project's reports withdraw, and return the other
    reports."""
    result.findings, others = _withdrawn(result.findings, group)
    return others


def _withdrawn(findings: list[Finding], reports: list[CrossReport]) -> tuple[list[Finding], list[CrossReport]]:
    """``findings`` without those that a report withdraws (``seeds.withdrawn``: a code and a
    line), and the reports that add findings."""
    withdrawn = {(report.code[1:], report.at[0]) for report in reports if report.code.startswith("-")}
    if not withdrawn:
        return findings, reports
    kept = [f for f in findings if (f.code, f.location.line) not in withdrawn]
    return kept, [report for report in reports if not report.code.startswith("-")]


def link_source(
    findings: list[Finding], summary: ModuleSummary, source: str, path: str, codes: frozenset[str]
) -> list[Finding]:
    """``findings`` of one source text (``lint_source``) with what the cross-function rules find
    between its own functions and methods: the text is a project of one module."""
    from ..suppressions import apply_suppressions
    from .tokens import has_class

    rel = "module.py"
    data = source.encode("utf-8", "replace")
    project = Project({rel}, {rel: summary}.get, text={rel: data}.get)
    words = Words()
    callers = Callers(
        [rel],
        lambda _rel, kind: has_class(data, kind),
        lambda _rel, name: name in source,
        lambda _rel, word: words.names(rel, data, word),
    )
    findings, reports = _withdrawn(findings, run_checks(project, [rel], callers, codes))
    taken = {(f.code, f.location.line) for f in findings}
    added = []
    for report in reports:
        line, column, end_line, end_column = report.at
        if said_by_the_file(report, rel, taken):
            continue
        taken.add((report.code, line))
        added.append(
            Finding(
                report.code,
                severity_of(report.code),
                report.message,
                Location(path, line, column, end_line, end_column),
                help=report.help,
                extra={"_noqa_lines": [line]},
                related=tuple(Related(path, at[0], at[1], message) for _module, at, message in report.related),
            )
        )
    if not added:
        return findings
    kept, _suppressed = apply_suppressions(added, source, ())
    return sorted([*findings, *kept], key=Finding.sort_key)


def _tag_folder(folder: Path) -> None:
    """The cache folder is ignored by git and tagged as a cache, as the result cache does."""
    try:
        if folder.is_dir() and not (folder / ".gitignore").exists():
            (folder / ".gitignore").write_text("# Created by ampdoctor\n*\n", encoding="utf-8")
            (folder / "CACHEDIR.TAG").write_text(
                "Signature: 8a477f597d28d172789f06886806bc55\n# ampdoctor result cache\n", encoding="utf-8"
            )
    except OSError:
        pass
