"""The lint pipeline: files → prefilter → parse → AmpFacts → rules → findings → suppressions.

Cheap steps first. A file that contains none of the tokens of any selected rule, or whose text
shows that none of their anchors can hold (textscan/: a text-level superset of the anchors
in gate.py), is never decoded or parsed. Parsing is the interpreter's own ``ast``: it is fast,
needs no import, and its nodes carry the positions that findings and fixes need.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import stat
import warnings
from collections.abc import Iterable
from pathlib import Path

from ..catalog import severity_of
from ..findings import PARSE_ERROR, Edit, Finding, Location
from ..records import Record
from .fixes import (
    FixError,
    ModuleRewrite,
    SourceLines,
    resolve_fix,
)
from .suppressions import apply_suppressions

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from .model import AmpFacts
    from .notebooks import NotebookSource
    from .project.shapes import ModuleSummary
    from .project.tokens import FileTokens
    from .rules import LintRule, Report
    from .textscan import TextGate


class LintOptions(Record):
    """What to check and how: resolved from config and command line."""

    __slots__ = ("codes", "fix", "unsafe_fixes", "per_file_ignored", "summaries", "spare_core")

    def __init__(
        self,
        codes: frozenset[str],
        fix: bool = False,
        unsafe_fixes: bool = False,
        per_file_ignored: tuple[str, ...] = (),
        summaries: bool = False,
        spare_core: bool = False,
    ) -> None:
        self.codes = codes
        self.fix = fix
        self.unsafe_fixes = unsafe_fixes
        self.per_file_ignored = per_file_ignored
        # Also summarize the module for the project analysis (lint/project), from the same facts.
        self.summaries = summaries
        # A core is free beside this process (it lints alone, where the run may use several):
        # a large module's summary may be made partly in a forked child (``start_summary``).
        self.spare_core = spare_core


class FileResult(Record):
    """One file's outcome.

    ``path``: as shown to the user; ``file_path``: where the file is on disk. ``source``: the
    checked text (after fixes), when it was read and has findings or the run fixes
    (``lint._lint_each`` lets go of the others' text); ``original``: the text before fixes,
    when fixes changed it; ``cells``: for notebooks, cell number → text; ``error``: why the file
    could not be read, decoded or parsed; ``notebook``: (original JSON text, NotebookSource)
    when fixes changed a notebook; ``summary``: the module's project summary, when the run asked
    for it and the file was parsed; ``half_risk``: see ``project.tokens.float16_risk``; ``key``:
    the cache's key for its bytes, when the run asked for it (``lint_file(keyed=True)``);
    ``screened``: the token prefilter passed it over (no selected rule can fire on it, and the
    project pass needs no summary of it), which the cache records as such.
    """

    __slots__ = (
        "path",
        "findings",
        "suppressed",
        "fixed",
        "source",
        "original",
        "cells",
        "parsed",
        "error",
        "notebook",
        "file_path",
        "summary",
        "half_risk",
        "tokens",
        "key",
        "screened",
        "seen",
        "unfixed",
    )

    def __init__(
        self,
        path: str,
        findings: list[Finding] | None = None,
        suppressed: int = 0,
        fixed: int = 0,
        source: str | None = None,
        original: str | None = None,
        cells: dict[int, str] | None = None,
        parsed: bool = False,
        error: str | None = None,
        notebook: tuple[str, NotebookSource] | None = None,
        file_path: str = "",
        summary: ModuleSummary | None = None,
    ) -> None:
        self.path = path
        self.findings = [] if findings is None else findings
        self.suppressed = suppressed
        self.fixed = fixed
        self.source = source
        self.original = original
        self.cells = {} if cells is None else cells
        self.parsed = parsed
        self.error = error
        self.notebook = notebook
        self.file_path = file_path
        self.summary = summary
        # For a file read but not parsed in a run that links the project: whether its text holds
        # what float16 autocast set up elsewhere breaks (None: not looked at).
        self.half_risk: bool | None = None
        # For a file the lint pass read in a run that links the project: what the project pass
        # asks of its bytes (``project.tokens.FileTokens``), so that it need not read it again.
        self.tokens: FileTokens | None = None
        self.key: str | None = None
        self.screened = False
        # (size, modification time in ns) of the file as the cached run looked at it: the project
        # pass's reuse key reads it instead of looking again (``project.reuse.state_key``).
        self.seen: tuple[int, int] | None = None
        # When fixes changed the text: (findings, suppressed, cells) of the text as it was read,
        # what the report shows if the fixed text cannot be written.
        self.unfixed: tuple[list[Finding], int, dict[int, str]] | None = None

    @property
    def changed(self) -> bool:
        return self.original is not None and self.original != self.source

    @property
    def unreported_error(self) -> str | None:
        """The error, when no AMP000 finding shows it (an internal error, a fix that could not
        be applied or written): the caller prints it as one line."""
        if self.error is None or any(f.code == PARSE_ERROR for f in self.findings):
            return None
        return self.error


def internal_error(path: Path, display: str, exc: BaseException) -> FileResult:
    """The result for a file whose check failed on a defect of ours: the run goes on."""
    detail = str(exc).splitlines()[0] if str(exc) else ""
    reason = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    return FileResult(display, file_path=str(path), error=f"internal error while checking this file ({reason})")


# ---------------------------------------------------------------------------------------
# One source text
# ---------------------------------------------------------------------------------------


# One (tokens, patterns) pair per selected rule: a file passes when, for some rule, it contains
# one of the tokens and matches all of the patterns.
PrefilterSpec = tuple[tuple[tuple[bytes, ...], tuple[bytes, ...]], ...]


def prefilter_spec(codes: Iterable[str]) -> PrefilterSpec:
    from .rules import lint_rules

    rules = lint_rules()
    spec = set()
    for code in codes:
        rule = rules.get(code)
        if rule is not None:
            spec.add((tuple(sorted(t.encode() for t in rule.tokens)), tuple(rule.needs)))
    return tuple(sorted(spec, key=repr))


def passes_prefilter(data: bytes, spec: PrefilterSpec, seen: dict[bytes, bool] | None = None) -> bool:
    """Whether some rule of ``spec`` can fire on ``data``. ``seen``: the tokens searched for so far
    and whether each was found (rules share tokens: each is searched for once), filled in."""
    if seen is None:
        seen = {}
    for tokens, patterns in spec:
        for token in tokens:
            found = seen.get(token)
            if found is None:
                found = seen[token] = token in data
            if found:
                break
        else:
            continue
        if all(_compiled(p).search(data) for p in patterns):
            return True
    return False


_PATTERNS: dict[bytes, re.Pattern[bytes]] = {}


def _compiled(pattern: bytes) -> re.Pattern[bytes]:
    compiled = _PATTERNS.get(pattern)
    if compiled is None:
        compiled = _PATTERNS[pattern] = re.compile(pattern)
    return compiled


def decode_source(data: bytes) -> str:
    """Decode like the interpreter: BOM, PEP 263 cookie, else UTF-8. Raises ValueError."""
    if not data.startswith(b"\xef\xbb\xbf") and b"coding" not in data[: _two_lines_end(data)]:
        try:
            return data.decode("utf-8")  # the common case, without the tokenizer
        except UnicodeDecodeError:
            pass  # let the tokenizer say what is wrong, as below
    import tokenize
    from io import BytesIO

    try:
        encoding, _ = tokenize.detect_encoding(BytesIO(data).readline)
    except SyntaxError as exc:
        reason = str(exc)
        if "invalid or missing encoding" in reason:
            reason = "cannot decode: not valid UTF-8 and no encoding declaration"
        raise ValueError(reason) from None
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        raise ValueError(f"cannot decode as {encoding}: {exc.reason if hasattr(exc, 'reason') else exc}") from None
    return text[1:] if text.startswith("\ufeff") else text


def _two_lines_end(data: bytes) -> int:
    """Where the first two lines end: an encoding declaration can only be there."""
    end = data.find(b"\n")
    if end >= 0:
        end = data.find(b"\n", end + 1)
    return len(data) if end < 0 else end


def parse_source(source: str) -> ast.Module:
    """The interpreter's own parse (warnings about the checked code are not ours to show)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(source)


def check_source(
    source: str, path: str, options: LintOptions, summary: list[ModuleSummary] | None = None
) -> tuple[list[Finding], int, bool]:
    """Findings (suppressions applied), the number suppressed, and whether it parsed. With
    ``options.summaries``, the module's project summary is appended to ``summary``."""
    from .facts import build_facts
    from .gc_budget import let_go, outlive

    let_go()
    try:
        tree = parse_source(source)
    except Exception as exc:  # SyntaxError, null bytes (ValueError), too deep (RecursionError)
        return [_parse_error(path, exc)], 0, False
    facts = None
    try:
        facts = build_facts(tree, source)
        facts.path = path
        if options.summaries and summary is not None:
            from .project.summary import start_summary

            # Finished after the rules: with a core to spare, a large module's value flows
            # are made meanwhile in a forked child.
            finish = start_summary(facts, options.spare_core)
            try:
                reports = _reports(facts, options.codes)
            finally:
                summary.append(finish())
        else:
            reports = _reports(facts, options.codes)
        if not reports:
            return [], 0, True
        findings = _position(reports, facts.lines, path)
    except RecursionError:  # an expression the parser took but the model's walks cannot descend
        message = "cannot analyse: an expression is nested too deeply"
        return [Finding(PARSE_ERROR, severity_of(PARSE_ERROR), message, Location(path, 1, 1))], 0, False
    finally:
        if facts is not None:
            facts.release()
            outlive(len(source), tree, facts)
    kept, suppressed = apply_suppressions(findings, source, options.per_file_ignored)
    return kept, suppressed, True


def _reports(facts: AmpFacts, codes: frozenset[str]) -> list[Report]:
    """What the rules of ``codes`` report on the module."""
    from .rules import lint_rules

    rules = lint_rules()
    reports: list[Report] = []
    flags: frozenset[str] | None = None  # the module's literal facts, found when a rule needs them
    for code in sorted(codes):
        rule = rules.get(code)
        if rule is None:
            continue
        needs = _NEEDS[code] if code in _NEEDS else _NEEDS.setdefault(code, literal_needs(rule))
        if needs is not None and len(facts.source) >= _LITERAL_SCAN_FROM:
            if flags is None:
                from .textscan.literals import literal_flags

                flags = literal_flags(facts.source.encode("utf-8", "surrogatepass"))
            if not any(need <= flags for need in needs):
                continue  # no literal it could report on (a superset of the exact facts)
        reports.extend(rule.check(facts))
    return reports


_NEEDS: dict[str, tuple[frozenset[str], ...] | None] = {}  # literal_needs of each rule, by code
# Characters from which a module's literals are scanned to skip the rules that need one. On the
# 136 files with autocast of the 31-repository tree, AMP301 and AMP302 took 0.25 ms per file and
# the scan 0.05 ms; on a file of 4,200 training functions (50,000 lines) the two rules took 0.75 s
# of a 3.75 s run and the scan 4 ms. A small file (a pre-commit run) saves less than the scanner's
# import (0.7 ms), so it runs the rules as they are.
_LITERAL_SCAN_FROM = 32_000


def literal_needs(rule: LintRule) -> tuple[frozenset[str], ...] | None:
    """The literal facts each of the rule's anchor sets requires (``Anchors.requires``), when
    every one requires some: a module with none of them gives the rule nothing to report (a
    float16 overflow rule in a file without a large number), so it is not run. None when the
    rule can fire without a literal."""
    anchors = rule.anchors
    alternatives = anchors if isinstance(anchors, tuple) else (anchors,) if anchors is not None else ()
    if not alternatives or any(not a.requires for a in alternatives):
        return None
    return tuple(frozenset(a.requires) for a in alternatives)


def _parse_error(path: str, exc: Exception) -> Finding:
    if isinstance(exc, SyntaxError):
        line, column, message = exc.lineno or 1, exc.offset or 1, exc.msg
    elif isinstance(exc, (RecursionError, MemoryError)):
        line, column, message = 1, 1, "file too deeply nested"
    else:  # ValueError: null bytes in the source
        line, column, message = 1, 1, str(exc) or "source cannot be compiled"
    return Finding(PARSE_ERROR, severity_of(PARSE_ERROR), f"cannot parse: {message}", Location(path, line, column))


def _position(reports: list[Report], lines: SourceLines, path: str) -> list[Finding]:
    findings = []
    for report in reports:
        span = lines.span(report.node)
        if span is None:  # pragma: no cover - rules report nodes that have positions
            continue
        line, column, end_line, end_column = span
        statement = lines.span(report.statement) if report.statement is not None else None
        fix = resolve_fix(report.fix, lines) if report.fix is not None else None
        extra = dict(report.extra)
        extra["_noqa_lines"] = sorted({line, statement[0] if statement else line})
        findings.append(
            Finding(
                code=report.code,
                severity=severity_of(report.code),
                message=report.message,
                location=Location(path, line, column, end_line, end_column),
                fix=fix,
                help=report.help,
                extra=extra,
            )
        )
    return sorted(findings, key=Finding.sort_key)


def fix_source(source: str, path: str, options: LintOptions) -> tuple[str, int, list[Finding], int, bool]:
    """Apply fixes until none applies: (new source, fixes applied, findings, suppressed, parsed).
    Each pass is checked by linting its result (fix_loop.py)."""
    from .fix_loop import fix_until_stable

    return fix_until_stable(source, path, lambda text: check_source(text, path, options), options.unsafe_fixes)


# ---------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------


def lint_file(
    path: Path,
    display: str,
    options: LintOptions,
    spec: PrefilterSpec | None,
    keyed: bool = False,
) -> FileResult:
    """Lint one file. With ``spec``, a file no selected rule could fire on is not parsed. With
    ``keyed``, the result carries the cache's key for the file's bytes (``result.key``)."""
    result = FileResult(display, file_path=str(path))
    try:
        data = read_regular(path)
        if data is None:  # a pipe or a device: reading could block or never end
            return _unreadable(result, "cannot read: not a regular file")
    except OSError as exc:
        return _unreadable(result, f"cannot read: {exc.strerror or exc}")
    if keyed:
        from .cache import content_key

        result.key = content_key(data, options.per_file_ignored)
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        # Checked before the prefilter, whose tokens cannot match UTF-16 bytes.
        return _unreadable(result, "cannot decode: UTF-16 source (Python reads UTF-8 or a declared 8-bit encoding)")
    try:
        return _lint_data(path, display, data, options, spec, result)
    except RecursionError:  # a walk in the text gate, the model or a fix went too deep
        return _unreadable(
            FileResult(display, file_path=str(path)), "cannot analyse: an expression is nested too deeply"
        )


def unreadable(display: str, path: str, error: str) -> FileResult:
    """The result for a file or folder that could not be read: one AMP000 line."""
    return _unreadable(FileResult(display, file_path=path), error)


_READ_FLAGS = os.O_RDONLY | getattr(os, "O_BINARY", 0)


def read_regular(path: Path | str) -> bytes | None:
    """The bytes of ``path`` (through links), or None when it is not a regular file (a pipe, a
    socket or a device is never opened: that could block, or act on the device); raises OSError
    as ``open`` does. Read with plain system calls: a buffered file object per file cost twice
    as much over a tree."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        return None
    fd = os.open(path, _READ_FLAGS)
    try:
        size = os.fstat(fd).st_size + 1  # one more: a file that grew since is read whole all the same
        chunks = []
        while True:
            chunk = os.read(fd, max(size, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    finally:
        os.close(fd)


def _unreadable(result: FileResult, error: str) -> FileResult:
    result.error = error
    result.findings = [Finding(PARSE_ERROR, severity_of(PARSE_ERROR), error, Location(result.path))]
    return result


def _lint_data(
    path: Path,
    display: str,
    data: bytes,
    options: LintOptions,
    spec: PrefilterSpec | None,
    result: FileResult,
) -> FileResult:
    if path.suffix == ".ipynb":
        return _lint_notebook(path, display, data, options, spec, result)
    seen: dict[bytes, bool] = {}  # the prefilter's searches serve the token classes too
    passes = spec is None or passes_prefilter(data, spec, seen)
    if options.summaries and path.suffix == ".py":
        from .project.tokens import file_tokens

        # What the project pass asks of every file's bytes, taken while they are in hand.
        result.tokens = file_tokens(data, seen)
    if passes and spec is not None and seen:
        from .textscan.memo import seed

        seed(data, seen)  # the text gate searches for some of the same tokens
    if spec is not None and not (passes and _text_gate(options.codes).keeps(data)):
        if options.summaries:
            from .project.tokens import float16_risk, wanted_without_rules

            result.half_risk = float16_risk(data, seen)
            if wanted_without_rules(data, seen):
                # No rule of its own can fire, but the project pass judges an update helper's
                # clip from its callers: summarize it here, in the worker that has its bytes.
                result.summary = _summary_only(data)
                return result
        result.screened = not passes
        return result
    try:
        source = decode_source(data)
    except ValueError as exc:
        return _unreadable(result, str(exc))
    return _check_text(path, display, source, options, result)


def _summary_only(data: bytes) -> ModuleSummary | None:
    """The project summary of a module no selected rule needs to check (None: it does not parse)."""
    from .facts import build_facts
    from .project.summary import summarize_released

    try:
        source = decode_source(data)
        return summarize_released(build_facts(parse_source(source), source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


@functools.lru_cache(maxsize=8)
def _text_gate(codes: frozenset[str]) -> TextGate:
    """The gate's anchors checked on the bytes (textscan/): most files are never parsed.
    Made once per rule selection, not per file."""
    from .rules import lint_rules
    from .textscan import text_gate

    rules = lint_rules()
    return text_gate(rules[c].anchors for c in sorted(codes) if c in rules)


def result_from_cache(path: Path, display: str, data: bytes, findings: list[Finding], suppressed: int) -> FileResult:
    """A FileResult for cached findings, with the source text the reporters show."""
    result = FileResult(display, findings=findings, suppressed=suppressed, file_path=str(path), parsed=True)
    errors = [f for f in findings if f.code == PARSE_ERROR]
    if errors:
        result.error, result.parsed = errors[0].message, False
    if not findings:
        return result
    try:
        if path.suffix == ".ipynb":
            from .notebooks import read_notebook

            notebook = read_notebook(data.decode("utf-8"))
            result.cells = {cell.number: notebook.cell_text(cell.number) for cell in notebook.cells}
        else:
            result.source = decode_source(data)
    except Exception:  # the findings stand; only the snippets are missing
        pass
    return result


def _check_text(path: Path, display: str, source: str, options: LintOptions, result: FileResult) -> FileResult:
    result.source = source
    if options.fix:
        from .fix_loop import fix_until_stable

        first: list[tuple[list[Finding], int, bool]] = []

        def check(text: str) -> tuple[list[Finding], int, bool]:
            outcome = check_source(text, display, options)
            if not first:
                first.append(outcome)  # the text as it was read
            return outcome

        try:
            new_source, fixed, findings, suppressed, parsed = fix_until_stable(
                source, display, check, options.unsafe_fixes
            )
        except FixError as exc:
            result.error = str(exc)
            findings, suppressed, parsed = first[0] if first else check_source(source, display, options)
            new_source, fixed = source, 0
        if new_source != source:
            result.original = source
            result.source = new_source
            result.unfixed = (first[0][0], first[0][1], {})
        result.fixed = fixed
    else:
        summary: list[ModuleSummary] = []
        findings, suppressed, parsed = check_source(source, display, options, summary)
        if summary and path.suffix == ".py":
            result.summary = summary[0]
    result.findings, result.suppressed, result.parsed = findings, suppressed, parsed
    if not parsed:
        result.error = findings[0].message
    return result


def _lint_notebook(
    path: Path, display: str, data: bytes, options: LintOptions, spec: PrefilterSpec | None, result: FileResult
) -> FileResult:
    from .notebooks import NotebookError, read_notebook

    if spec is not None and not passes_prefilter(data, spec):
        result.screened = True
        return result
    try:
        text = data.decode("utf-8")
        notebook = read_notebook(text)
    except (UnicodeDecodeError, NotebookError) as exc:
        message = "not UTF-8" if isinstance(exc, UnicodeDecodeError) else str(exc)
        result.error = f"cannot read notebook: {message}"
        result.findings = [Finding(PARSE_ERROR, severity_of(PARSE_ERROR), result.error, Location(display))]
        return result
    if spec is not None and not _text_gate(options.codes).keeps(notebook.source.encode("utf-8")):
        return result
    _check_text(path, display, notebook.source, options, result)
    final = notebook
    if result.changed:
        result.notebook = (text, notebook)
        try:
            final = read_notebook(_notebook_text(result))
        except NotebookError:
            # A fix would have touched an IPython magic line: leave the notebook as it is.
            unfixed = LintOptions(options.codes, False, options.unsafe_fixes, options.per_file_ignored)
            result = _check_text(path, display, notebook.source, unfixed, FileResult(display, file_path=str(path)))
    result.findings = [_to_cell(f, notebook if not result.changed else final) for f in result.findings]
    result.cells = {cell.number: final.cell_text(cell.number) for cell in final.cells}
    if result.unfixed is not None:
        findings, suppressed, _ = result.unfixed
        cells = {cell.number: notebook.cell_text(cell.number) for cell in notebook.cells}
        result.unfixed = ([_to_cell(f, notebook) for f in findings], suppressed, cells)
    return result


def _notebook_text(result: FileResult) -> str:
    from .notebooks import write_notebook

    assert result.notebook is not None
    original_text, notebook = result.notebook
    return write_notebook(original_text, notebook, result.source or "")


def _to_cell(finding: Finding, notebook: NotebookSource) -> Finding:
    loc = finding.location
    cell, line = notebook.locate(loc.line)
    end_line = loc.end_line
    if end_line is not None:
        end_cell, end_in_cell = notebook.locate(end_line)
        end_line = end_in_cell if end_cell == cell else line
    fix = finding.fix
    if isinstance(fix, ModuleRewrite):
        fix = None  # a rewrite of the whole module cannot be mapped onto cells
    if fix is not None:
        # Edits are shown relative to the finding's cell, like its location.
        edits: list[Edit] = []
        in_cell = True
        for edit in fix.edits:
            start_cell, start = notebook.locate(edit.line)
            end_cell, end = notebook.locate(edit.end_line)
            if start_cell != cell or end_cell != cell:
                in_cell = False
                break
            edits.append(edit.replace(line=start, end_line=end))
        fix = fix.replace(edits=tuple(edits)) if in_cell else None
    location = loc.replace(line=line, end_line=end_line, cell=cell)
    return finding.replace(location=location, fix=fix)
