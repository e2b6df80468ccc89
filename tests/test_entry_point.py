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
