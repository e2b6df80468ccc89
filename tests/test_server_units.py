"""The language server's parts that need no client: positions in code units, the ``# noqa`` edit,
the rule code under the cursor, the lint of a document under its configuration, the scheduling of
lints, and the command's answer when pygls is missing."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner
from samples import CLIP_BEFORE_UNSCALE as BAD
from samples import UNSCALE_THEN_CLIP as GOOD

from ampdoctor.cli import main
from ampdoctor.server.documents import Configurations, lint_text
from ampdoctor.server.noqa import code_at, noqa_edit
from ampdoctor.server.positions import UTF8, UTF16, UTF32, Converter, char_index, split_lines, units_before
from ampdoctor.server.scheduler import Request, Scheduler

# -- positions ---------------------------------------------------------------------------------


def test_split_lines_breaks_where_python_and_the_protocol_do():
    assert split_lines("a\r\nb\rc\nd\x0ce\n") == ["a", "b", "c", "d\x0ce", ""]


@pytest.mark.parametrize(
    "encoding,expected",
    [(UTF16, [0, 1, 2, 4, 5]), (UTF8, [0, 1, 3, 7, 8]), (UTF32, [0, 1, 2, 3, 4])],
)
def test_units_before_counts_code_units_of_the_encoding(encoding, expected):
    line = "aé𝄞b"  # é: 1 UTF-16 unit, 2 UTF-8 bytes; 𝄞: 2 UTF-16 units, 4 UTF-8 bytes
    assert [units_before(line, index, encoding) for index in range(5)] == expected
    assert [char_index(line, units, encoding) for units in expected] == [0, 1, 2, 3, 4]


def test_char_index_inside_a_surrogate_pair_moves_to_the_characters_end():
    assert char_index("𝄞x", 1, UTF16) == 1
    assert char_index("ab", 5, UTF16) == 5  # past the end stays past it


def test_converter_maps_one_based_columns_and_clamps_lines_past_the_end():
    text = 's = "é𝄞"; x = 1\nlast'
    positions = Converter(text, UTF16)
    column = text.index("x") + 1  # 1-based character column
    assert positions.to_client(1, column) == (0, column - 1 + 1)  # 𝄞 takes two UTF-16 units
    assert positions.to_ampdoctor(0, column) == (1, column)
    assert positions.to_client(9, 1) == (1, 4)  # after the last line: the end of the text


# -- noqa --------------------------------------------------------------------------------------


def _suppress(source: str, line: int, code: str) -> str | None:
    lines = source.split("\n")
    edit = noqa_edit(source, line, code, lines[line - 1])
    if edit is None:
        return None
    text = lines[line - 1]
    lines[line - 1] = text[: edit.index] + edit.text + text[edit.end :]
    return "\n".join(lines)


def test_noqa_is_appended_after_code_and_after_a_comment():
    assert _suppress("x = f()   \n", 1, "AMP201") == "x = f()  # noqa: AMP201\n"
    assert _suppress("x = f()  # why\n", 1, "AMP201") == "x = f()  # why  # noqa: AMP201\n"


def test_an_existing_noqa_list_is_extended():
    assert (
        _suppress("x = f()  # noqa: AMP101 -- reason\n", 1, "AMP201") == "x = f()  # noqa: AMP101, AMP201 -- reason\n"
    )
    assert _suppress("x = f()  # noqa: AMP201\n", 1, "AMP201") is None


def test_noqa_text_in_a_string_is_not_a_comment_to_extend():
    assert _suppress('x = f("# noqa: AMP101")\n', 1, "AMP201") == 'x = f("# noqa: AMP101")  # noqa: AMP201\n'


def test_no_noqa_where_the_line_ends_inside_a_string_or_a_continuation():
    assert _suppress('x = f("""a\nb""")\n', 1, "AMP201") is None
    assert _suppress("x = f() + \\\n    g()\n", 1, "AMP201") is None


def test_code_at_finds_the_code_under_the_cursor_in_suppression_comments():
    line = "x = f()  # noqa: AMP101, amp201"
    assert code_at(line, line.index("AMP101") + 2) == "AMP101"
    assert code_at(line, line.index("amp201")) == "AMP201"
    assert code_at(line, 2) is None
    assert code_at("y()  # ampdoctor: ignore[AMP204]", 27) == "AMP204"


# -- the lint of a document --------------------------------------------------------------------


def test_lint_text_finds_the_bad_example_and_not_the_good_one(tmp_path):
    configurations = Configurations()
    path = str(tmp_path / "train.py")
    assert [f.code for f in lint_text(BAD, path, configurations).findings] == ["AMP201"]
    assert lint_text(GOOD, path, configurations).findings == []
    assert [f.code for f in lint_text(BAD, None, configurations).findings] == ["AMP201"]  # never saved


def test_lint_text_applies_the_folders_configuration(tmp_path):
    configurations = Configurations()
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    config = project / "pyproject.toml"
    config.write_text('[tool.ampdoctor]\nper-file-ignores = { "tests/*" = ["AMP2"] }\n', encoding="utf-8")
    assert [f.code for f in lint_text(BAD, str(project / "train.py"), configurations).findings] == ["AMP201"]
    assert lint_text(BAD, str(project / "tests" / "t.py"), configurations).findings == []
    config.write_text('[tool.ampdoctor]\nignore = ["AMP201"]\n', encoding="utf-8")
    stat = config.stat()
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a new stamp: read again
    assert lint_text(BAD, str(project / "train.py"), configurations).findings == []


def test_a_broken_configuration_is_reported_and_the_defaults_apply(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.ampdoctor]\nselect = ["NOPE"]\n', encoding="utf-8")
    outcome = lint_text(BAD, str(tmp_path / "train.py"), Configurations())
    assert outcome.config_error and "select" in outcome.config_error
    assert [f.code for f in outcome.findings] == ["AMP201"]


# -- scheduling --------------------------------------------------------------------------------


def test_a_newer_request_supersedes_a_lint_in_flight_and_a_pending_one():
    started, release = threading.Event(), threading.Event()
    published: list[int | None] = []

    def lint(request: Request) -> object:
        if request.version == 1:
            started.set()
            release.wait(5)  # the first lint is still running when the others come
        return request.version

    async def scenario() -> None:
        scheduler = Scheduler(lint, lambda request, result: published.append(result), lambda r, e: None)
        first = scheduler.submit(Request("file:///a.py", 1, "one", None))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
        scheduler.submit(Request("file:///a.py", 2, "two", None), delay=0.05)
        third = scheduler.submit(Request("file:///a.py", 3, "three", None), delay=0.05)
        release.set()
        await asyncio.gather(first, third, return_exceptions=True)
        other = scheduler.submit(Request("file:///b.py", 7, "b", None))
        await other
        scheduler.close()

    asyncio.run(scenario())
    assert published == [3, 7]


def test_a_lint_that_raises_is_reported_not_published():
    failures, published = [], []

    def lint(request: Request) -> object:
        raise RuntimeError("boom")

    async def scenario() -> None:
        scheduler = Scheduler(lint, lambda r, result: published.append(result), lambda r, e: failures.append(str(e)))
        await scheduler.submit(Request("file:///a.py", 1, "x", None))
        scheduler.close()

    asyncio.run(scenario())
    assert (failures, published) == (["boom"], [])


def test_a_closed_document_gets_nothing_from_a_lint_in_flight():
    published = []

    def lint(request: Request) -> object:
        time.sleep(0.1)
        return request.version

    async def scenario() -> None:
        scheduler = Scheduler(lint, lambda r, result: published.append(result), lambda r, e: None)
        task = scheduler.submit(Request("file:///a.py", 1, "x", None))
        await asyncio.sleep(0.02)
        scheduler.forget("file:///a.py")
        await asyncio.gather(task, return_exceptions=True)
        scheduler.close()

    asyncio.run(scenario())
    assert published == []


# -- the command -------------------------------------------------------------------------------


def test_server_without_pygls_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pygls", None)  # ``import pygls`` raises ImportError
    monkeypatch.setitem(sys.modules, "pygls.lsp", None)
    monkeypatch.setitem(sys.modules, "pygls.lsp.server", None)
    result = CliRunner().invoke(main, ["server"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("ampdoctor: error: ") and "install ampdoctor[server]" in lines[0]


@pytest.mark.slow
def test_the_server_lints_without_importing_torch(tmp_path):
    pytest.importorskip("pygls")
    target = tmp_path / "train.py"
    script = (
        "import asyncio, json, sys\n"
        "from ampdoctor.server.app import create_server\n"
        "server = create_server()\n"
        f"outcome = server._lint(__import__('ampdoctor.server.scheduler', fromlist=['Request']).Request('uri', 1, {BAD!r}, {str(target)!r}))\n"
        "assert [f.code for f in outcome.findings] == ['AMP201'], outcome.findings\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    modules = set(json.loads(out.splitlines()[-1]))
    assert "ampdoctor.lint.facts" in modules and "pygls" in modules  # it did lint, in the server
    assert not {m for m in modules if m.split(".")[0] in ("torch", "libcst")}


def test_importing_the_cli_does_not_import_the_server():
    out = subprocess.run(
        [sys.executable, "-c", "import json, sys, ampdoctor.cli; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    modules = set(json.loads(out.splitlines()[-1]))
    assert not {m for m in modules if m.split(".")[0] in ("pygls", "lsprotocol") or m.startswith("ampdoctor.server")}
