"""Lint on bad and odd input: every file gets a defined outcome, one line when it cannot be
checked, exit code 2 when any file could not be, and the other files are still checked."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import lint_text

from ampdoctor.cli import main
from ampdoctor.lint.rules import lint_rules

# Enough for every file to pass the token prefilter and be parsed: one AMP401 finding on line 2.
HEADER = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"


def lint(*args: str):
    result = CliRunner().invoke(
        main, ["lint", "--isolated", "--no-cache", "--jobs", "1", "--output-format", "concise", *args]
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def finding_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if ": AMP" in line]


@pytest.fixture
def folder(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(folder: Path, name: str, data: bytes | str) -> Path:
    path = folder / name
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def test_syntax_error_is_amp000_at_the_parsers_line(folder):
    write(folder, "bad.py", HEADER + "x = 1\nif x\n    pass\n")
    result = lint("bad.py")
    assert result.exit_code == 2
    assert finding_lines(result.output) == ["bad.py:4:5: AMP000 [error] cannot parse: expected ':'"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (HEADER.encode() + b"name = '\xe9t\xe9'\n", "AMP000 [error] cannot decode as utf-8"),
        (HEADER.encode("utf-16"), "AMP000 [error] cannot decode: UTF-16 source"),
        (HEADER.encode("utf-16-be").join([b"\xfe\xff", b""]), "AMP000 [error] cannot decode: UTF-16 source"),
        (HEADER.encode() + b"x = 1\0\n", "AMP000 [error] cannot parse: source code string cannot contain null bytes"),
        (HEADER.encode() + b"if x:\n\ty = 1\n        z = 2\n", "AMP000 [error] cannot parse: inconsistent use of tabs"),
    ],
    ids=["non-utf8", "utf16-le-bom", "utf16-be-bom", "nul", "mixed-tabs"],
)
def test_undecodable_or_unparsable_bytes_are_one_amp000_line(folder, data, message):
    write(folder, "odd.py", data)
    write(folder, "ok.py", HEADER)
    result = lint("odd.py", "ok.py")
    assert result.exit_code == 2
    lines = finding_lines(result.output)
    assert len(lines) == 2 and lines[0].startswith("odd.py:") and message in lines[0], result.output
    assert lines[1].startswith("ok.py:2:10: AMP401")


@pytest.mark.parametrize(
    "data",
    [
        HEADER.encode() + b"name = '\xe9t\xe9'\n",
        HEADER.encode("utf-16"),
        HEADER.encode() + b"x = 1\0\n",
    ],
    ids=["non-utf8", "utf16-le-bom", "nul"],
)
def test_the_result_cache_reports_odd_bytes_as_an_uncached_run_does(folder, data):
    """With the cache on (the default), a first run and a cached second run say what ``--no-cache``
    says: a UTF-16 file is not passed over because no token matches its bytes."""
    write(folder, "odd.py", data)
    write(folder, "ok.py", HEADER)
    expected = finding_lines(lint("odd.py", "ok.py").output)
    for _ in range(2):  # the first run fills the cache, the second is served from it
        result = CliRunner().invoke(main, ["lint", "--isolated", "--jobs", "1", "--output-format", "concise", "."])
        assert result.exit_code == 2, result.output
        assert finding_lines(result.output) == expected
    assert (folder / ".ampdoctor_cache").is_dir()


@pytest.mark.parametrize(
    "data",
    [
        b"# -*- coding: latin-1 -*-\n" + HEADER.encode() + b"name = '\xe9t\xe9'\n",
        b"\xef\xbb\xbf" + HEADER.encode(),
        HEADER.replace("\n", "\r\n").encode(),
        HEADER.encode() + b"if True:\n\tx = 1\n\tif x:\n\t\ty = 2\n",
    ],
    ids=["latin-1-cookie", "utf8-bom", "crlf", "tabs"],
)
def test_decodable_variants_are_checked_like_plain_utf8(folder, data):
    write(folder, "odd.py", data)
    result = lint("odd.py")
    assert result.exit_code == 1, result.output
    line = 3 if data.startswith(b"#") else 2
    assert finding_lines(result.output) == [
        f"odd.py:{line}:10: AMP401 [warning] `torch.cuda.amp.GradScaler` is deprecated"
        + finding_lines(result.output)[0].split("is deprecated", 1)[1]
    ]


def test_empty_file_and_a_folder_named_like_a_module(folder):
    write(folder, "empty.py", b"")
    (folder / "x.py").mkdir()
    write(folder / "x.py", "inner.py", HEADER)
    result = lint(".")
    assert result.exit_code == 1
    assert [line.split(":")[0] for line in finding_lines(result.output)] == ["x.py/inner.py"]
    assert lint("empty.py").exit_code == 0


@pytest.mark.slow
def test_a_five_megabyte_file_is_checked(folder):
    body = "".join(f"y{i} = model(x{i}) * {i}.5  # step {i}\n" for i in range(120_000))
    path = write(folder, "big.py", HEADER + body + "z = x.masked_fill(mask, -1e9)\n")
    assert path.stat().st_size > 5_000_000
    result = lint("big.py")
    assert result.exit_code == 1
    assert [line.split(":")[1] for line in finding_lines(result.output)] == ["2"]


@pytest.mark.slow
def test_a_hundred_thousand_element_literal(folder):
    write(folder, "table.py", HEADER + "TABLE = [" + ", ".join(str(i) for i in range(100_000)) + "]\n")
    result = lint("table.py")
    assert result.exit_code == 1 and len(finding_lines(result.output)) == 1


# Nesting the parser accepts but a recursive walk cannot follow, and nesting the parser refuses.
DEEP = {
    "conditional-expression": "ctx = " + " if a else ".join(["torch.autocast('cuda')"] * 1500),
    "unary-minus-in-fill": "y = x.masked_fill(m, " + "-" * 1500 + "1e9)",
    "binary-chain": "x = " + " + ".join(["a"] * 20_000),
    "attribute-chain": "x = torch" + ".a" * 20_000,
    "call-chain": "x = scaler" + ".a()" * 3000,
    "parentheses": "x = " + "(" * 500 + "a" + ")" * 500,
    "not-chain": "x = " + "not " * 20_000 + "a",
}


@pytest.mark.parametrize("line", DEEP.values(), ids=DEEP.keys())
def test_deep_nesting_is_one_amp000_line_never_a_recursion_error(folder, line):
    # Float16 work inside an autocast region: every rule family has something to look at.
    write(folder, "deep.py", HEADER + "with torch.autocast('cuda'):\n    y = x.half()\n" + line + "\n")
    write(folder, "ok.py", HEADER)
    result = lint("deep.py", "ok.py")
    assert result.exit_code == 2, result.output
    lines = finding_lines(result.output)
    deep = [line for line in lines if line.startswith("deep.py:")]
    assert len(deep) == 1 and "AMP000" in deep[0], lines
    assert "nested" in deep[0] or "parenthes" in deep[0] or "recursion" in deep[0]
    assert lines[-1].startswith("ok.py:2:10: AMP401")


def _too_deep(*args, **kwargs):
    raise RecursionError("maximum recursion depth exceeded")


@pytest.mark.parametrize("stage", ["text gate", "fact model", "rule", "fix"])
def test_a_recursion_error_in_any_walk_is_one_amp000_line(folder, monkeypatch, stage):
    """Whichever walk runs out of stack, the file gets one line and no traceback."""
    from ampdoctor.lint import facts, fix_loop, textscan

    if stage == "text gate":
        monkeypatch.setattr(textscan.TextGate, "keeps", _too_deep)
    elif stage == "fact model":
        monkeypatch.setattr(facts, "build_facts", _too_deep)
    elif stage == "rule":
        monkeypatch.setattr(lint_rules()["AMP401"], "check", _too_deep)
    else:
        monkeypatch.setattr(fix_loop, "apply_edits", _too_deep)
    write(folder, "deep.py", HEADER)
    result = lint("--fix", "deep.py") if stage == "fix" else lint("deep.py")
    assert result.exit_code == 2, result.output
    assert finding_lines(result.output) == [
        "deep.py:1:1: AMP000 [error] cannot analyse: an expression is nested too deeply"
    ]
    assert "Traceback" not in result.output
    assert (folder / "deep.py").read_text() == HEADER


def test_broken_symlink_and_symlink_loop_inside_a_folder(folder):
    (folder / "dangling.py").symlink_to(folder / "nowhere.py")
    (folder / "loop.py").symlink_to(folder / "loop.py")
    write(folder, "ok.py", HEADER)
    result = lint(".")
    assert result.exit_code == 2
    lines = finding_lines(result.output)
    assert "dangling.py:1:1: AMP000 [error] cannot read: No such file or directory" in lines
    assert "loop.py:1:1: AMP000 [error] cannot read: Too many levels of symbolic links" in lines
    assert any(line.startswith("ok.py:2:10: AMP401") for line in lines)


@pytest.mark.parametrize("name", ["nowhere.py", "dangling.py"])
def test_a_path_that_does_not_exist_is_one_line_exit_2(folder, name):
    (folder / "dangling.py").symlink_to(folder / "gone.py")
    result = lint(name)
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [f"ampdoctor: error: no such file or folder: {name}"]


@pytest.mark.parametrize("name", ["nowhere.py", "dangling.py"])
def test_a_path_that_does_not_exist_is_one_line_and_the_others_are_still_checked(folder, name):
    (folder / "dangling.py").symlink_to(folder / "gone.py")
    write(folder, "ok.py", HEADER)
    result = lint(name, "ok.py")
    assert result.exit_code == 2
    assert f"ampdoctor: error: no such file or folder: {name}" in result.output.splitlines()
    assert any(line.startswith("ok.py:2:10: AMP401") for line in finding_lines(result.output))


@pytest.mark.skipif(
    os.geteuid() == 0,
    reason="root reads a file whatever its mode; test_a_file_that_cannot_be_read_is_one_line checks the same path",
)
def test_a_file_without_read_permission(folder):
    write(folder, "secret.py", HEADER).chmod(0)
    write(folder, "ok.py", HEADER)
    result = lint(".")
    assert result.exit_code == 2
    assert "secret.py:1:1: AMP000 [error] cannot read: Permission denied" in finding_lines(result.output)


def _unprivileged_interpreter() -> str | None:
    """An interpreter that the user ``nobody`` may run (a virtual environment under /root, say,
    is out of its reach)."""
    import shutil
    import subprocess

    for candidate in dict.fromkeys([sys.executable, shutil.which("python3"), "/usr/bin/python3"]):
        if candidate is None:
            continue
        try:
            done = subprocess.run(
                [candidate, "-c", "import sys; assert sys.version_info >= (3, 11)"],
                user=65534,
                group=65534,
                capture_output=True,
                cwd="/",
            )
        except OSError:
            continue
        if done.returncode == 0:
            return candidate
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="drops root's privileges; other users: the test above")
def test_a_file_without_read_permission_for_an_unprivileged_user(tmp_path_factory):
    """Root reads any file, so lint runs as ``nobody``: the mode stops it for real."""
    import shutil
    import subprocess
    import tempfile

    interpreter = _unprivileged_interpreter()
    root = Path(__file__).resolve().parent.parent
    if interpreter is None:
        pytest.skip("no interpreter the user nobody may run")
    folder = Path(tempfile.mkdtemp())  # pytest's own folders are closed to other users
    try:
        folder.chmod(0o755)  # and not writable by nobody: the result cache cannot be written either
        write(folder, "secret.py", HEADER).chmod(0)
        write(folder, "ok.py", HEADER)
        code = "from ampdoctor.entry import main; main(['lint', 'secret.py', 'ok.py'])"
        done = subprocess.run(
            [interpreter, "-c", code],
            user=65534,
            group=65534,
            cwd=folder,
            capture_output=True,
            text=True,
            env={"PYTHONPATH": str(root), "PATH": os.environ.get("PATH", "")},
        )
    finally:
        shutil.rmtree(folder)
    if "No module named 'ampdoctor'" in done.stderr:
        pytest.skip(f"the user nobody cannot import ampdoctor from {root}")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "secret.py:1:1: AMP000 cannot read: Permission denied" in done.stdout
    assert "ok.py:2:10: AMP401" in done.stdout


def test_a_file_that_cannot_be_read_is_one_line(folder, monkeypatch):
    """Reading fails as it does for a file without read permission (even as root, where no mode
    stops a read)."""
    write(folder, "secret.py", HEADER)
    write(folder, "ok.py", HEADER)
    real = os.open

    def refuse(path, *args, **kwargs):
        if os.path.basename(path) == "secret.py":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    result = lint(".")
    assert result.exit_code == 2
    lines = finding_lines(result.output)
    assert lines[0] == "ok.py:2:10: AMP401 " + lines[0].split("AMP401 ", 1)[1]
    assert lines[1] == "secret.py:1:1: AMP000 [error] cannot read: Permission denied"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/mem is Linux's")
def test_a_file_whose_read_fails_on_disk(folder):
    """A real read error, no mocking: /proc/self/mem cannot be read from its start."""
    (folder / "mem.py").symlink_to("/proc/self/mem")
    result = lint("mem.py")
    assert result.exit_code == 2
    assert finding_lines(result.output) == ["mem.py:1:1: AMP000 [error] cannot read: Input/output error"]


NOTEBOOK_CELL = '{"cell_type": "code", "metadata": {}, "outputs": [], "source": "scaler = torch.cuda.amp.GradScaler()"}'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{not json, torch.cuda.amp.GradScaler()", "AMP000 [error] cannot read notebook: not valid notebook JSON"),
        (
            '{"nbformat": 4, "metadata": {"x": "torch.cuda.amp.GradScaler"}}',
            "AMP000 [error] cannot read notebook: not a Jupyter notebook: no 'cells' list",
        ),
        ('[1, 2, "torch.cuda.amp.GradScaler"]', "AMP000 [error] cannot read notebook"),
    ],
    ids=["not-json", "no-cells", "not-an-object"],
)
def test_broken_notebooks_are_one_amp000_line(folder, text, expected):
    write(folder, "nb.ipynb", text)
    write(folder, "ok.py", HEADER)
    result = lint(".")
    assert result.exit_code == 2
    lines = finding_lines(result.output)
    assert lines[0].startswith("nb.ipynb:1:1: " + expected)
    assert lines[1].startswith("ok.py:2:10: AMP401")


def test_a_notebook_with_non_python_cells_is_not_parsed_as_python(folder):
    r_kernel = '{"kernelspec": {"language": "R", "name": "ir"}}'
    write(folder, "r.ipynb", f'{{"nbformat": 4, "metadata": {r_kernel}, "cells": [{NOTEBOOK_CELL}]}}')
    markdown = NOTEBOOK_CELL.replace('"code"', '"markdown"')
    write(folder, "md.ipynb", f'{{"nbformat": 4, "metadata": {{}}, "cells": [{markdown}]}}')
    assert lint("r.ipynb", "md.ipynb").exit_code == 0


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_an_internal_error_is_one_line_naming_the_file_and_the_run_goes_on(folder, monkeypatch, jobs):
    if jobs != "1":  # worker processes, forked with the broken rule in place
        import multiprocessing

        if multiprocessing.get_start_method() != "fork":
            pytest.skip("the broken rule reaches worker processes only when they are forked")
        monkeypatch.setattr("ampdoctor.lint.PARALLEL_THRESHOLD", 2)
    write(folder, "a.py", HEADER)
    write(folder, "boom.py", HEADER + "# BOOM\n")
    write(folder, "z.py", HEADER)
    rule = lint_rules()["AMP401"]
    real = rule.check

    def broken(facts):
        if "BOOM" in facts.lines.source:
            raise KeyError("a defect in a rule")
        return real(facts)

    monkeypatch.setattr(rule, "check", broken)
    result = lint("--jobs", jobs, ".")
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("ampdoctor: error:")]
    assert errors == [
        "ampdoctor: error: boom.py: internal error while checking this file (KeyError: 'a defect in a rule')"
    ]
    assert [line.split(":")[0] for line in finding_lines(result.output)] == ["a.py", "z.py"]
    assert "Traceback" not in result.output


def test_an_internal_error_is_not_cached(folder, monkeypatch):
    write(folder, "boom.py", HEADER)
    rule = lint_rules()["AMP401"]
    real = rule.check
    monkeypatch.setattr(rule, "check", lambda facts: 1 / 0)
    run = CliRunner().invoke(main, ["lint", "--isolated", "--jobs", "1", "boom.py"])
    assert run.exit_code == 2 and "ZeroDivisionError" in run.output
    monkeypatch.setattr(rule, "check", real)
    assert CliRunner().invoke(main, ["lint", "--isolated", "--jobs", "1", "boom.py"]).exit_code == 1


def test_lint_source_survives_deep_nesting():
    source = HEADER + "with torch.autocast('cuda'):\n    y = x.half()\n" + DEEP["unary-minus-in-fill"] + "\n"
    assert [(f.code, f.message) for f in lint_text(source)] == [
        ("AMP000", "cannot analyse: an expression is nested too deeply")
    ]


def test_a_folder_that_cannot_be_listed_is_one_line(folder, monkeypatch):
    """As a folder without read permission does (simulated: root lists any folder)."""
    write(folder, "ok.py", HEADER)
    (folder / "locked").mkdir()
    write(folder / "locked", "hidden.py", HEADER)
    real = os.scandir

    def refuse(path="."):
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", refuse)
    result = lint(".")
    assert result.exit_code == 2
    lines = finding_lines(result.output)
    assert lines[0] == "locked:1:1: AMP000 [error] cannot list folder: Permission denied"
    assert lines[1].startswith("ok.py:2:10: AMP401") and len(lines) == 2


def test_pipes_and_devices_are_not_read(folder):
    """Reading a named pipe would wait for a writer, and a device may never end; a socket (and a
    device) is not even opened."""
    import socket

    os.mkfifo(folder / "pipe.py")
    (folder / "zeros.py").symlink_to("/dev/zero")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / "sock.py"))
    write(folder, "ok.py", HEADER)
    try:
        for args in ([".", "--no-cache"], ["."], ["pipe.py", "sock.py", "zeros.py", "ok.py"]):
            command = ["lint", "--isolated", "--jobs", "1", "--output-format", "concise", *args]
            result = CliRunner().invoke(main, command)
            assert result.exit_code == 2, result.output
            assert finding_lines(result.output) == [
                finding_lines(result.output)[0],
                "pipe.py:1:1: AMP000 [error] cannot read: not a regular file",
                "sock.py:1:1: AMP000 [error] cannot read: not a regular file",
                "zeros.py:1:1: AMP000 [error] cannot read: not a regular file",
            ]
            assert finding_lines(result.output)[0].startswith("ok.py:2:10: AMP401")
    finally:
        server.close()
