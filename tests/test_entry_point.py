"""The installed ``ampdoctor`` script and ``python -m ampdoctor`` in real subprocesses."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "lint"


def _script() -> str:
    found = shutil.which("ampdoctor", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail("the ampdoctor entry point is not installed next to this interpreter")
    return found


def test_installed_entry_point_lints_and_exits_1():
    result = subprocess.run(
        [_script(), "lint", "--isolated", "--output-format", "concise", str(FIXTURES / "buggy_no_update.py")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1, result.stderr
    assert "AMP202" in result.stdout
    assert result.stderr == ""


def test_installed_entry_point_clean_file_exits_0():
    result = subprocess.run(
        [_script(), "lint", "--isolated", str(FIXTURES / "clean_gan_two_optimizers.py")], capture_output=True, text=True
    )
    assert result.returncode == 0
    assert "All checks passed!" in result.stdout


def test_python_dash_m():
    result = subprocess.run([sys.executable, "-m", "ampdoctor", "--version"], capture_output=True, text=True)
    assert result.returncode == 0
    assert result.stdout.startswith("ampdoctor, version ")


def test_usage_error_has_no_traceback():
    result = subprocess.run([_script(), "lint", "--select", "BOGUS", "."], capture_output=True, text=True)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip() == "ampdoctor: error: --select: unknown rule code or prefix 'BOGUS'"


# ``ampdoctor lint FILE...`` with file names only takes a path that does not import click
# (entry.py); it must behave exactly like the click command with its defaults spelled out.


def _both(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("AMPDOCTOR_OUTPUT_FORMAT", "NO_COLOR")}
    plain = subprocess.run([_script(), "lint", *args], capture_output=True, text=True, cwd=cwd, env=env)
    spelled = subprocess.run(
        [_script(), "lint", "--output-format", "text", *args], capture_output=True, text=True, cwd=cwd, env=env
    )
    return plain, spelled


@pytest.mark.parametrize(
    "names",
    [
        ["buggy_no_update.py"],
        ["clean_gan_two_optimizers.py"],
        ["buggy_no_update.py", "clean_gan_two_optimizers.py"],
        ["missing.py"],
        [],
    ],
)
@pytest.mark.slow
def test_plain_file_names_behave_like_the_click_command(tmp_path, names):
    project = tmp_path / "project"
    project.mkdir()
    for name in ("buggy_no_update.py", "clean_gan_two_optimizers.py"):
        shutil.copy(FIXTURES / name, project / name)
    # A configuration in the project applies on both paths.
    (project / "pyproject.toml").write_text('[tool.ampdoctor]\nignore = ["AMP209"]\n', encoding="utf-8")
    plain, spelled = _both(names, project)
    assert (plain.returncode, plain.stdout, plain.stderr) == (spelled.returncode, spelled.stdout, spelled.stderr)
    assert plain.returncode == {("buggy_no_update.py",): 1, ("clean_gan_two_optimizers.py",): 0}.get(
        tuple(names), plain.returncode
    )


def test_plain_file_names_do_not_import_click(tmp_path):
    target = tmp_path / "train.py"
    shutil.copy(FIXTURES / "buggy_no_update.py", target)
    code = (
        "import sys\nfrom ampdoctor.entry import main\n"
        "try:\n    main(['lint', sys.argv[1]])\n"
        "except SystemExit as exit:\n    code = exit.code\n"
        "print('click' in sys.modules, code, file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, text=True, cwd=tmp_path)
    assert result.stderr.strip().splitlines()[-1] == "False 1", result.stderr
    assert "AMP202" in result.stdout


def test_an_option_goes_through_click(tmp_path):
    result = subprocess.run([_script(), "lint", "--bogus"], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2
    assert "No such option '--bogus'" in result.stderr


# The console command that lints ends without freeing what it holds (entry._end_now).


def test_a_large_file_linted_by_the_console_command_reports_as_the_api_call_does(tmp_path):
    body = (FIXTURES / "buggy_no_update.py").read_text(encoding="utf-8")
    copies = [body.replace("def train(", f"def train_{i}(") for i in range(130)]
    target = tmp_path / "big_train.py"
    target.write_text("\n\n".join(copies), encoding="utf-8")
    assert target.stat().st_size > 100_000  # a tree kept to the end (lint/gc_budget.py)
    args = ["lint", "--isolated", "--no-cache", "--output-format", "json", str(target)]
    console = subprocess.run([_script(), *args], capture_output=True, text=True, cwd=tmp_path)
    code = "import sys\nfrom ampdoctor.entry import main\nmain(sys.argv[1:])\n"  # argv given: not ending
    called = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=tmp_path)
    assert (console.returncode, console.stderr) == (called.returncode, called.stderr) == (1, "")
    assert console.stdout == called.stdout  # every byte written before the process ends
    import json

    assert len(json.loads(console.stdout)) >= 130


class _Ended(Exception):
    pass


def _exit_recorder(monkeypatch) -> list[int]:
    import os

    codes: list[int] = []

    def fake_exit(code: int) -> None:
        codes.append(code)
        raise _Ended

    monkeypatch.setattr(os, "_exit", fake_exit)
    return codes


def test_end_now_flushes_and_ends_with_the_code(monkeypatch):
    import threading

    from ampdoctor import entry

    codes = _exit_recorder(monkeypatch)
    monkeypatch.setattr(threading, "active_count", lambda: 1)  # (the test runner may run others)
    flushed = []

    class Stream:
        def flush(self) -> None:
            flushed.append(1)

    monkeypatch.setattr(sys, "stdout", Stream())
    monkeypatch.setattr(sys, "stderr", Stream())
    for code, expected in ((None, 0), (0, 0), (1, 1), (2, 2)):
        with pytest.raises(_Ended):
            entry._end_now(code)
        assert codes[-1] == expected
        assert len(flushed) == 2  # what the command printed is written before the process ends
        flushed.clear()


def test_end_now_leaves_the_exit_to_the_interpreter_where_it_cannot_end_cleanly(monkeypatch):
    import threading

    from ampdoctor import entry

    codes = _exit_recorder(monkeypatch)
    one_thread = threading.active_count
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    entry._end_now("ampdoctor: a message for the interpreter to print")  # a message, not a code

    class ClosedPipe:
        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

    with monkeypatch.context() as patched:
        patched.setattr(sys, "stdout", ClosedPipe())
        entry._end_now(1)  # its output cannot be flushed: the interpreter says what it says
    monkeypatch.setattr(threading, "active_count", one_thread)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        entry._end_now(1)  # another thread runs: it would be cut off
    finally:
        stop.set()
        other.join()
    assert codes == []
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    with pytest.raises(_Ended):
        entry._end_now(1)  # (and where none of these holds, it ends: the cases above were refused)


@pytest.mark.parametrize("options", [[], ["--isolated"]], ids=["file-names-only", "through-click"])
def test_a_reader_that_stops_early_ends_the_run_quietly_with_1(tmp_path: Path, options: list[str]):
    unit = (FIXTURES / "buggy_classic_mistakes.py").read_text(encoding="utf-8")
    big = tmp_path / "many.py"
    big.write_text("\n".join(unit.replace("def ", f"def copy{i}_") for i in range(200)), encoding="utf-8")
    process = subprocess.Popen(
        [_script(), "lint", *options, str(big)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.read(200)  # (``| head -c 200``) then the reader goes away
    process.stdout.close()
    errors = process.stderr.read().decode()
    assert process.wait(timeout=120) == 1
    assert errors == ""
