"""No input makes lint raise, and every fix leaves code that parses and a second run changes
nothing: generated programs (hypothesmith), byte-level mutations of the fixtures and of real
files from the installed torch package, and every fixable finding on them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import all_options
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from ampdoctor.lint import known_codes
from ampdoctor.lint.engine import LintOptions, check_source, fix_source, lint_file, prefilter_spec
from ampdoctor.lint.fixes import apply_edits
from ampdoctor.lint.report import FORMATS

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted((ROOT / "fixtures" / "lint").rglob("*.py"))
NOTEBOOKS = sorted((ROOT / "fixtures" / "lint").rglob("*.ipynb"))


def _torch_sample() -> list[Path]:
    """Files of the installed torch package that speak of mixed precision (found by their text,
    without importing torch): every one that uses the deprecated ``torch.cuda.amp`` (where the
    fixes are) and every fourth of the others below 150 kB, to keep the run short."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return []
    deprecated, others = [], []
    for folder, dirs, files in os.walk(Path(spec.origin).parent):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                path = Path(folder, name)
                data = path.read_bytes()
                if b"torch.cuda.amp" in data:
                    deprecated.append(path)
                elif (b"autocast" in data or b"GradScaler" in data) and len(data) < 150_000:
                    others.append(path)
    return deprecated + others[::4]


TORCH_SAMPLE = _torch_sample()
SMALL_TORCH_FILES = [p for p in TORCH_SAMPLE if p.stat().st_size < 60_000]  # mutants: many small ones
CORPUS = FIXTURES + TORCH_SAMPLE
CODES = frozenset(known_codes())
SPEC = prefilter_spec(CODES)


def _id(path: Path) -> str:
    return path.name if path.is_relative_to(ROOT) else "torch/" + path.name


def _parses(text: str) -> bool:
    from ampdoctor.lint.engine import parse_source

    try:
        parse_source(text)
    except (SyntaxError, ValueError):
        return False
    return True


# ---------------------------------------------------------------------------------------
# Every fixable finding on the fixtures and the torch sample
# ---------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("path", CORPUS, ids=[_id(p) for p in CORPUS])
def test_every_fix_parses_and_a_second_run_changes_nothing(path):
    source = path.read_text(encoding="utf-8")
    findings, _, parsed = check_source(source, "x.py", all_options())
    assert parsed
    fixes = [f.fix for f in findings if f.fix is not None]
    for fix in fixes:  # each fix alone
        assert _parses(apply_edits(source, fix.edits)), fix.description
    # All of them together, safe ones only and then unsafe ones too (when there are any).
    for unsafe in sorted({False, any(not fix.is_safe for fix in fixes)}):
        options = all_options(fix=True, unsafe_fixes=unsafe)
        fixed, count, _, _, parsed = fix_source(source, "x.py", options)
        assert parsed and _parses(fixed)
        assert count >= (1 if any(fix.is_safe or unsafe for fix in fixes) else 0)
        again, count_again, _, _, _ = fix_source(fixed, "x.py", options)
        assert (again, count_again) == (fixed, 0)


def test_the_corpus_has_fixes_to_check():
    fixable = [
        f.code
        for path in FIXTURES
        for f in check_source(path.read_text(encoding="utf-8"), "x.py", all_options())[0]
        if f.fix
    ]
    assert len(fixable) >= 20 and len(set(fixable)) >= 5
    assert TORCH_SAMPLE, "torch is installed in the test environment"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_fixing_a_notebook_twice_changes_nothing_the_second_time(tmp_path, path):
    from ampdoctor.lint.writing import write_result

    target = tmp_path / path.name
    target.write_bytes(path.read_bytes())
    options = LintOptions(CODES, fix=True, unsafe_fixes=True)
    for round_ in (1, 2):
        result = lint_file(target, target.name, options, SPEC)
        assert result.error is None
        if round_ == 2:
            assert not result.changed and result.fixed == 0
        write_result(target, result)


# ---------------------------------------------------------------------------------------
# Generated programs and mutated files
# ---------------------------------------------------------------------------------------


def _lint_bytes(folder: Path, data: bytes, suffix: str = ".py"):
    """The whole file pipeline (prefilter, text gate, decoding, parse, rules, fixes) on ``data``:
    it must return, never raise; a fix must parse and be stable."""
    path = folder / f"mutant{suffix}"
    path.write_bytes(data)
    result = lint_file(path, path.name, LintOptions(CODES, fix=True, unsafe_fixes=True), SPEC)
    if result.changed and suffix == ".py":
        assert _parses(result.source)
        again, count, _, _, _ = fix_source(result.source, "x.py", LintOptions(CODES, fix=True, unsafe_fixes=True))
        assert (again, count) == (result.source, 0)
    return result


HEADERS = [
    "",
    "import torch\n",
    "import torch\nscaler = torch.cuda.amp.GradScaler()\n",
    "import torch\nfrom torch.cuda.amp import autocast, GradScaler\nscaler = GradScaler()\n",
    "import torch\nwith torch.autocast('cuda', dtype=torch.float16):\n    y = x.half()\n",
]


def _hypothesmith_programs():
    hypothesmith = pytest.importorskip("hypothesmith")
    return hypothesmith.from_grammar()


# hypothesmith compiles what it generates: the interpreter's warnings about that code are noise.
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::SyntaxWarning")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(program=_hypothesmith_programs(), header=st.sampled_from(HEADERS))
def test_generated_programs_never_make_lint_raise(program, header):
    source = header + program
    for options in (all_options(), all_options(fix=True, unsafe_fixes=True)):
        findings, _, parsed = check_source(source, "x.py", options)
        assert all(f.location.line >= 1 for f in findings)
    fixed, _, _, _, parsed = fix_source(source, "x.py", all_options(fix=True, unsafe_fixes=True))
    if parsed:
        assert _parses(fixed) or not _parses(source)


# Pieces a mutation inserts: AMP vocabulary, brackets, odd whitespace and odd bytes.
PIECES = [
    b"scaler.",
    b"scaler.scale(loss).backward()",
    b"with torch.autocast('cuda'):",
    b"optimizer.step()",
    b".half()",
    b"-1e9",
    b"torch.float16",
    b"(",
    b")",
    b"[",
    b"]",
    b":",
    b",",
    b"\\",
    b"'",
    b'"',
    b'"""',
    b"#",
    b"# noqa",
    b"\n",
    b"\r\n",
    b"\r",
    b"\t",
    b"    ",
    b"\x0c",
    b"\0",
    b"\xff",
    b"\xef\xbb\xbf",
    b"\xe9",
    b"# -*- coding: latin-1 -*-\n",
    b"lambda:",
    b"async ",
    b"await ",
    b"yield",
    b"@",
    b"*",
    b"**",
]


@st.composite
def mutation(draw, corpus: list[Path]):
    data = draw(st.sampled_from(corpus)).read_bytes()
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["insert", "delete", "duplicate", "truncate", "swap-lines"]))
        if kind == "insert":
            data = data[:at] + draw(st.sampled_from(PIECES)) + data[at:]
        elif kind == "delete":
            data = data[:at] + data[at + draw(st.integers(1, 200)) :]
        elif kind == "duplicate":
            data = data[:at] + data[at : at + draw(st.integers(1, 400))] + data[at:]
        elif kind == "truncate":
            data = data[:at]
        else:
            lines = data.split(b"\n")
            i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            data = b"\n".join(lines)
    return data


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@pytest.mark.slow
@given(data=mutation(FIXTURES))
@example(data=b"import torch\n" + b"x = " + b"-" * 1500 + b"1e9\n")
def test_mutated_fixtures_never_make_lint_raise(tmp_path, data):
    _lint_bytes(tmp_path, data)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_mutated_torch_files_never_make_lint_raise(tmp_path, data):
    assume(SMALL_TORCH_FILES)
    _lint_bytes(tmp_path, data.draw(mutation(SMALL_TORCH_FILES)))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(data=mutation(NOTEBOOKS))
def test_mutated_notebooks_never_make_lint_raise(tmp_path, data):
    _lint_bytes(tmp_path, data, suffix=".ipynb")


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(data=mutation(FIXTURES), output_format=st.sampled_from(FORMATS))
def test_mutated_files_through_the_command_and_every_report(tmp_path, data, output_format):
    """The reporters too: snippets of odd lines (CR, form feeds, NUL, tabs) never raise."""
    from click.testing import CliRunner

    from ampdoctor.cli import main

    (tmp_path / "mutant.py").write_bytes(data)
    result = CliRunner().invoke(
        main,
        [
            "lint",
            "--isolated",
            "--no-cache",
            "--jobs",
            "1",
            "--output-format",
            output_format,
            str(tmp_path / "mutant.py"),
        ],
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 1, 2)
    assert "Traceback" not in result.output
