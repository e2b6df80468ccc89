"""Notebooks: cells joined into a module, IPython syntax neutralised, fixes written back."""

from __future__ import annotations

import ast
import difflib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ampdoctor.lint.notebooks import NotebookError, read_notebook, split_lines, write_notebook

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "lint" / "notebooks"


def code(source, **extra) -> dict:
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
    cell.update(extra)
    return cell


def markdown(source) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": source}


def notebook(*cells, metadata=None, indent=1, ensure_ascii=False) -> str:
    nb = {
        "cells": list(cells),
        "metadata": {"language_info": {"name": "python"}} if metadata is None else metadata,
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(nb, indent=indent, ensure_ascii=ensure_ascii) + "\n"


def lines_of(text: str) -> list[str]:
    return text.split("\n") if text else []


# reading


def test_cells_are_joined_and_numbered_counting_every_cell():
    text = notebook(
        markdown("# Title"),
        code("import torch\nx = 1"),
        markdown(["More\n", "text"]),
        code(["for i in range(3):\n", "    y = i\n"]),
        code("z = 2\n"),
    )
    nb = read_notebook(text)
    assert nb.source == "import torch\nx = 1\nfor i in range(3):\n    y = i\nz = 2\n"
    assert [(c.number, c.index, c.first_line, c.line_count) for c in nb.cells] == [
        (2, 1, 1, 2),
        (4, 3, 3, 2),
        (5, 4, 5, 1),
    ]
    assert [nb.locate(line) for line in range(1, 6)] == [(2, 1), (2, 2), (4, 1), (4, 2), (5, 1)]
    assert nb.cell_text(4) == "for i in range(3):\n    y = i\n"
    with pytest.raises(KeyError):
        nb.cell_text(1)


def test_a_cell_boundary_never_merges_statements():
    nb = read_notebook(notebook(code("if x:\n    y = 1"), code("z = 2")))
    tree = ast.parse(nb.source)
    assert [type(node).__name__ for node in tree.body] == ["If", "Assign"]


def test_list_and_string_sources_read_the_same():
    as_string = read_notebook(notebook(code("a = 1\nb = 2\n"), code("c = 3")))
    as_list = read_notebook(notebook(code(["a = 1\n", "b = 2\n"]), code(["c = 3"])))
    assert as_string.source == as_list.source == "a = 1\nb = 2\nc = 3\n"
    assert as_string.cells == as_list.cells


def test_empty_code_cells_add_no_lines():
    nb = read_notebook(notebook(code(""), code([]), code("x = 1")))
    assert nb.source == "x = 1\n"
    assert nb.locate(1) == (3, 1)


def test_locate_past_the_end_stays_in_the_last_cell():
    nb = read_notebook(notebook(code("a = 1"), code("b = (")))
    assert nb.locate(3) == (2, 2)


def test_line_magics_shell_escapes_and_help_become_pass():
    source = (
        "%matplotlib inline\n"
        "!pip install -q torch\n"
        "files = !ls data\n"
        "elapsed = %timeit -o f()\n"
        "torch.amp.autocast?\n"
        "?torch.amp\n"
        "for step in range(3):\n"
        "    %time train(step)\n"
        "x = 1\n"
    )
    nb = read_notebook(notebook(code(source)))
    assert nb.source == ("pass\npass\npass\npass\npass\npass\nfor step in range(3):\n    pass\nx = 1\n")
    ast.parse(nb.source)
    assert nb.cells[0].magic_regions == ((1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (6, 6), (8, 8))
    assert nb.cell_text(1) == source


def test_magic_lookalikes_inside_strings_brackets_and_comments_stay():
    source = 'doc = """\n%d steps\n!important\n"""\ntotal = (1\n  % 2)\ny = x != 1  # really?\nz = 3 \\\n  % 2\n%who\n'
    nb = read_notebook(notebook(code(source)))
    assert lines_of(nb.source)[:9] == lines_of(source)[:9]
    assert lines_of(nb.source)[9] == "pass"
    ast.parse(nb.source)


def test_backslash_continued_shell_escape_is_one_region():
    source = "!pip install \\\n    torch \\\n    numpy\nimport torch\n"
    nb = read_notebook(notebook(code(source)))
    assert nb.source == "pass\n\n\nimport torch\n"
    assert nb.cells[0].magic_regions == ((1, 3),)


def test_cell_magic_cells_are_skipped_but_keep_their_lines():
    nb = read_notebook(notebook(code("%%time\nfor i in range(3):\n    pass"), code("x = 1")))
    assert nb.source == "\n\n\nx = 1\n"
    assert nb.cells[0].cell_magic
    assert nb.locate(4) == (2, 1)


def test_non_python_notebooks_have_no_code():
    text = notebook(code("x <- 1"), metadata={"kernelspec": {"language": "R", "name": "ir"}})
    nb = read_notebook(text)
    assert nb.source == "" and nb.cells == []
    with pytest.raises(ValueError):
        nb.locate(1)


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"cells": [', "not valid notebook JSON: Expecting value (line 1, column 12)"),
        ("[1, 2]", "not a Jupyter notebook: no 'cells' list"),
        ('{"metadata": {}}', "not a Jupyter notebook: no 'cells' list"),
        ('{"cells": [], "nbformat": 3}', "unsupported notebook format 3 (nbformat 4 is supported)"),
        ('{"cells": [1]}', "cell 1 is not a JSON object"),
        (
            '{"cells": [{"cell_type": "markdown", "source": ""}, {"cell_type": "code", "source": 5}]}',
            "cell 2: 'source' must be a string or a list of strings",
        ),
    ],
)
def test_invalid_notebooks_raise_a_one_line_error(text, message):
    with pytest.raises(NotebookError) as info:
        read_notebook(text)
    assert str(info.value) == message
    assert "\n" not in str(info.value)


# the fixtures


@pytest.mark.parametrize("name", ["buggy_train.ipynb", "clean_train.ipynb"])
def test_fixtures_read_parse_and_round_trip(name):
    text = (FIXTURES / name).read_text(encoding="utf-8")
    nb = read_notebook(text)
    ast.parse(nb.source)
    assert nb.cells[0].number == 2 and nb.cells[0].magic_regions == ((1, 1),)
    assert nb.cell_text(2).startswith("%matplotlib inline\n")
    assert write_notebook(text, nb, nb.source) is text


def test_buggy_fixture_clips_before_unscale_in_a_later_cell():
    nb = read_notebook((FIXTURES / "buggy_train.ipynb").read_text(encoding="utf-8"))
    lines = nb.source.splitlines()
    clip = next(i for i, line in enumerate(lines, 1) if "clip_grad_norm_" in line)
    backward = next(i for i, line in enumerate(lines, 1) if ".backward()" in line)
    step = next(i for i, line in enumerate(lines, 1) if "scaler.step(" in line)
    assert backward < clip < step
    assert "unscale_" not in nb.source
    cell, line = nb.locate(clip)
    assert cell == 5 and cell != nb.cells[0].number
    assert nb.cell_text(cell).split("\n")[line - 1].strip().startswith("torch.nn.utils.clip_grad_norm_(")


def test_clean_fixture_unscales_before_clipping():
    source = read_notebook((FIXTURES / "clean_train.ipynb").read_text(encoding="utf-8")).source
    order = [
        source.index(s)
        for s in (
            ".backward()",
            "scaler.unscale_(optimizer)",
            "clip_grad_norm_",
            "scaler.step(optimizer)",
            "scaler.update()",
        )
    ]
    assert order == sorted(order)


# writing back


def insert_unscale(source: str) -> str:
    return source.replace(
        "        torch.nn.utils.clip_grad_norm_",
        "        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_",
    )


def test_fix_is_written_into_its_cell_and_nothing_else_changes():
    text = (FIXTURES / "buggy_train.ipynb").read_text(encoding="utf-8")
    nb = read_notebook(text)
    fixed = write_notebook(text, nb, insert_unscale(nb.source))
    diff = [
        line
        for line in difflib.unified_diff(text.splitlines(), fixed.splitlines(), lineterm="", n=0)
        if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
    ]
    assert diff == ['+    "        scaler.unscale_(optimizer)\\n",']
    assert fixed.endswith("}\n")
    before, after = json.loads(text), json.loads(fixed)
    for old_cell, new_cell in zip(before["cells"], after["cells"]):
        assert {k: v for k, v in old_cell.items() if k != "source"} == {
            k: v for k, v in new_cell.items() if k != "source"
        }
    assert before["metadata"] == after["metadata"]
    reread = read_notebook(fixed)
    assert reread.source == insert_unscale(nb.source)
    assert "%matplotlib inline" in reread.cell_text(2)


@pytest.mark.parametrize("indent", [None, 1, 2, 4])
def test_write_back_keeps_the_json_layout(indent):
    cells = [
        markdown("intro"),
        code(
            ["%matplotlib inline\n", "import torch\n", "x = torch.ones(2)"],
            outputs=[{"output_type": "stream", "name": "stdout", "text": ["ok\n"]}],
        ),
        code("y = x * 2\nprint(y)"),
        code(["z = 1"]),
    ]
    text = notebook(*cells, indent=indent)
    nb = read_notebook(text)
    new_source = nb.source.replace("y = x * 2\n", "y = x * 2\ny = y.float()\n").replace("z = 1\n", "z = 1\nw = 2\n")
    expected = [dict(c) for c in cells]
    expected[2] = dict(cells[2], source="y = x * 2\ny = y.float()\nprint(y)")
    expected[3] = dict(cells[3], source=["z = 1\n", "w = 2"])
    assert write_notebook(text, nb, new_source) == notebook(*expected, indent=indent)


def test_write_back_keeps_non_ascii_text_and_ascii_escapes():
    for ensure_ascii in (False, True):
        cells = [code(["# Größe der Charge\n", "batch = 32"]), code("x = 'ü'")]
        text = notebook(*cells, ensure_ascii=ensure_ascii)
        nb = read_notebook(text)
        fixed = write_notebook(text, nb, nb.source.replace("Charge\n", "Charge\nsteps = 'ß'\n"))
        expected = [dict(cells[0], source=["# Größe der Charge\n", "steps = 'ß'\n", "batch = 32"]), cells[1]]
        assert fixed.isascii() is ensure_ascii
        assert fixed == notebook(*expected, ensure_ascii=ensure_ascii)


def test_insertion_at_a_cell_boundary_follows_indentation():
    text = notebook(code("for x in xs:\n    step(x)"), code("done()"))
    nb = read_notebook(text)
    indented = write_notebook(text, nb, "for x in xs:\n    step(x)\n    update()\ndone()\n")
    assert [c.get("source") for c in json.loads(indented)["cells"]] == [
        "for x in xs:\n    step(x)\n    update()",
        "done()",
    ]
    top_level = write_notebook(text, nb, "for x in xs:\n    step(x)\nsetup()\ndone()\n")
    assert [c.get("source") for c in json.loads(top_level)["cells"]] == [
        "for x in xs:\n    step(x)",
        "setup()\ndone()",
    ]


def test_magic_lines_are_written_back_unchanged():
    text = notebook(code("!pip install torch\n%load_ext autoreload\nimport torch\nx = torch.cuda.amp.autocast()"))
    nb = read_notebook(text)
    new_source = nb.source.replace("torch.cuda.amp.autocast()", 'torch.amp.autocast("cuda")')
    cell = json.loads(write_notebook(text, nb, new_source))["cells"][0]
    assert cell["source"] == '!pip install torch\n%load_ext autoreload\nimport torch\nx = torch.amp.autocast("cuda")'


def test_a_fix_may_not_touch_neutralised_lines():
    text = notebook(code("%matplotlib inline\nimport torch"), code("%%time\ntrain()\nevaluate()"), code("done()"))
    nb = read_notebook(text)
    assert nb.source == "pass\nimport torch\n\n\n\ndone()\n"
    with pytest.raises(NotebookError, match="cell 1, line 1"):
        write_notebook(text, nb, "pass  # changed\nimport torch\n\n\n\ndone()\n")
    with pytest.raises(NotebookError, match="cell 1, line 1"):
        write_notebook(text, nb, "import torch\n\n\n\ndone()\n")
    with pytest.raises(NotebookError, match="inside IPython syntax in cell 2"):
        write_notebook(text, nb, "pass\nimport torch\n\nx = 1\n\n\ndone()\n")
    # Next to a cell magic, an insertion goes to the neighbouring ordinary cell.
    fixed = write_notebook(text, nb, "pass\nimport torch\n\n\n\nprepare()\ndone()\n")
    assert [c["source"] for c in json.loads(fixed)["cells"]] == [
        "%matplotlib inline\nimport torch",
        "%%time\ntrain()\nevaluate()",
        "prepare()\ndone()",
    ]


def test_a_continued_shell_escape_is_one_region_for_fixes():
    text = notebook(code("!pip install \\\n    torch\nimport torch"))
    nb = read_notebook(text)
    with pytest.raises(NotebookError, match="inside IPython syntax"):
        write_notebook(text, nb, "pass\nx = 1\n\nimport torch\n")
    fixed = write_notebook(text, nb, "pass\n\nimport os\nimport torch\n")
    assert json.loads(fixed)["cells"][0]["source"] == "!pip install \\\n    torch\nimport os\nimport torch"


def test_removing_and_replacing_lines():
    text = notebook(code(["a = 1\n", "b = 2\n", "c = 3\n"]), code("d = 4"))
    nb = read_notebook(text)
    fixed = write_notebook(text, nb, "a = 1\nc = 30\nd = 4\n")
    assert [c["source"] for c in json.loads(fixed)["cells"]] == [["a = 1\n", "c = 30\n"], "d = 4"]


# properties

LINE = st.sampled_from(
    [
        "import torch",
        "x = 1",
        "",
        "for i in range(3):",
        "    y = i",
        "%matplotlib inline",
        "!pip install torch",
        "s = '''",
        "%d'''",
        "t = (1,",
        "  % 2)",
        "# comment?",
        "obj?",
    ]
)
CELL = st.lists(LINE, min_size=0, max_size=6).map("\n".join)
NOTEBOOK_CELLS = st.lists(
    st.tuples(st.sampled_from(["code", "markdown"]), CELL, st.booleans(), st.booleans()),
    max_size=6,
)


def build(cells) -> str:
    out = []
    for kind, source, as_list, newline in cells:
        text = source + ("\n" if newline and source else "")
        value = split_lines(text) if as_list else text
        out.append(code(value) if kind == "code" else markdown(value))
    return notebook(*out)


@settings(max_examples=150, deadline=None)
@given(NOTEBOOK_CELLS)
def test_reading_maps_every_line_and_writing_back_unchanged_is_identity(cells):
    text = build(cells)
    nb = read_notebook(text)
    assert write_notebook(text, nb, nb.source) == text
    module_lines = split_lines(nb.source)
    assert len(module_lines) == sum(c.line_count for c in nb.cells)
    for number, line in enumerate(module_lines, start=1):
        cell, within = nb.locate(number)
        original = split_lines(nb.cell_text(cell))[within - 1]
        span = next(c for c in nb.cells if c.number == cell)
        if not span.is_magic(within):
            assert original.rstrip("\n") == line.rstrip("\n")
        else:
            assert line.strip() in ("pass", "")


@settings(max_examples=100, deadline=None)
@given(NOTEBOOK_CELLS, st.data())
def test_an_inserted_line_lands_in_one_cell_and_everything_else_is_kept(cells, data):
    text = build(cells)
    nb = read_notebook(text)
    plain = [
        n
        for n, line in enumerate(split_lines(nb.source), start=1)
        if not next(c for c in nb.cells if c.number == nb.locate(n)[0]).is_magic(nb.locate(n)[1])
    ]
    if not plain:
        return
    at = data.draw(st.sampled_from(plain))
    lines = split_lines(nb.source)
    new_source = "".join(lines[: at - 1] + ["inserted = True\n"] + lines[at - 1 :])
    try:
        fixed = write_notebook(text, nb, new_source)
    except NotebookError:
        return  # the line before was inside a neutralised region
    reread = read_notebook(fixed)
    assert reread.source.count("inserted = True") == 1
    before = [c["source"] for c in json.loads(text)["cells"]]
    after = [c["source"] for c in json.loads(fixed)["cells"]]
    changed = [i for i, (b, a) in enumerate(zip(before, after)) if b != a]
    assert len(changed) == 1
    assert type(before[changed[0]]) is type(after[changed[0]])


def test_insertion_between_identical_lines_in_two_cells_changes_one_cell():
    cells = [
        {"cell_type": "code", "source": "import torch", "metadata": {}, "outputs": [], "execution_count": None},
        {
            "cell_type": "code",
            "source": "import torch\nimport torch",
            "metadata": {},
            "outputs": [],
            "execution_count": None,
        },
    ]
    text = json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    nb = read_notebook(text)
    lines = split_lines(nb.source)
    fixed = json.loads(write_notebook(text, nb, "".join([lines[0], "inserted = True\n", *lines[1:]])))
    assert [c["source"] for c in fixed["cells"]] == ["import torch", "inserted = True\nimport torch\nimport torch"]
