"""Jupyter notebooks as Python modules, and fixed code back into the notebook.

``read_notebook`` joins the code cells of an nbformat 4 notebook into one module: each cell
starts on a new line at column 0 (a cell that does not end with a line break gets one), so a
cell boundary never merges two statements. Lines keep their place, so a module line maps back
to a cell and a line within it (``NotebookSource.locate``).

Cells are numbered from 1 in notebook order, counting every cell (code, Markdown and raw), as
a user counts them scrolling through the notebook; Markdown and raw cells add no lines.

IPython syntax does not parse as Python, so it is neutralised line for line:

* a line magic, shell escape or help request at the start of a statement (``%matplotlib
  inline``, ``!pip install x``, ``files = !ls``, ``model?``) becomes ``pass`` at the same
  indentation; lines that continue it with a trailing backslash become empty;
* a cell that starts with a cell magic (``%%time``, ``%%bash``) is skipped: all its lines
  become empty.

``write_notebook`` puts fixed code back: only the ``source`` of changed cells is rewritten, in
the cell's own style (a list of lines or one string); outputs, metadata, the JSON layout and the
trailing newline stay byte for byte. Neutralised lines are always written back as they were, and
a fix that changes, removes or inserts lines inside a neutralised region is refused.

A notebook whose kernel language is not Python has no code to lint.
"""

from __future__ import annotations

import bisect
import difflib
import json
import re

from ..records import Record, Value
from .fixes import split_lines

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any


class NotebookError(Exception):
    """The notebook cannot be read or written back; the message is one line."""


class CellSpan(Value):
    """One code cell's place in the joined module.

    * ``number``: 1-based position among all cells of the notebook;
    * ``index``: 0-based index into the notebook's "cells" list;
    * ``first_line``: 1-based line in NotebookSource.source where the cell starts;
    * ``line_count``;
    * ``text``: the cell's source as the user sees it;
    * ``magic_regions``: 1-based lines within the cell that were neutralised, grouped into
      contiguous regions;
    * ``cell_magic``: the whole cell is a cell magic.
    """

    __slots__ = ("number", "index", "first_line", "line_count", "text", "magic_regions", "cell_magic")
    number: int
    index: int
    first_line: int
    line_count: int
    text: str
    magic_regions: tuple[tuple[int, int], ...]
    cell_magic: bool

    def __init__(
        self,
        number: int,
        index: int,
        first_line: int,
        line_count: int,
        text: str,
        magic_regions: tuple[tuple[int, int], ...] = (),
        cell_magic: bool = False,
    ) -> None:
        self._set(number, index, first_line, line_count, text, magic_regions, cell_magic)

    def is_magic(self, line: int) -> bool:
        return any(first <= line <= last for first, last in self.magic_regions)


class NotebookSource(Record):
    __slots__ = ("source", "cells")

    def __init__(self, source: str, cells: list[CellSpan] | None = None) -> None:
        self.source = source  # code cells joined into one Python module
        self.cells = [] if cells is None else cells  # the code cells, in order

    def locate(self, line: int) -> tuple[int, int]:
        """Module line -> (cell number, line within the cell). Past the end: the last cell."""
        spans = [c for c in self.cells if c.line_count]
        if not spans:
            raise ValueError("the notebook has no code")
        starts = [c.first_line for c in spans]
        span = spans[max(bisect.bisect_right(starts, line) - 1, 0)]
        return span.number, line - span.first_line + 1

    def cell_text(self, cell: int) -> str:
        """The source of cell number ``cell`` as the user sees it (magics included)."""
        for span in self.cells:
            if span.number == cell:
                return span.text
        raise KeyError(f"no code cell {cell}")


# Reading


def read_notebook(text: str) -> NotebookSource:
    notebook = _load(text)
    cells = notebook["cells"]
    code_cells = []
    for position, cell in enumerate(cells):
        if not isinstance(cell, dict):
            raise NotebookError(f"cell {position + 1} is not a JSON object")
        if cell.get("cell_type") == "code":
            code_cells.append((position, _cell_source(cell, position + 1)))
    if not _is_python(notebook.get("metadata")):
        code_cells = []

    module_lines: list[str] = []
    spans = []
    for position, cell_text in code_cells:
        lines = split_lines(cell_text)
        if lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += "\n"
        neutral, regions, cell_magic = _neutralise(lines)
        spans.append(
            CellSpan(
                number=position + 1,
                index=position,
                first_line=len(module_lines) + 1,
                line_count=len(lines),
                text=cell_text,
                magic_regions=regions,
                cell_magic=cell_magic,
            )
        )
        module_lines.extend(neutral)
    return NotebookSource("".join(module_lines), spans)


def _load(text: str) -> dict[str, Any]:
    try:
        notebook = json.loads(text.lstrip("\ufeff"))
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise NotebookError(f"not valid notebook JSON: {exc.msg} ({where})") from None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise NotebookError("not a Jupyter notebook: no 'cells' list")
    version = notebook.get("nbformat", 4)
    if version != 4:
        raise NotebookError(f"unsupported notebook format {version!r} (nbformat 4 is supported)")
    return notebook


def _cell_source(cell: dict[str, object], number: int) -> str:
    source = cell.get("source", "")
    if isinstance(source, str):
        return source
    if isinstance(source, list) and all(isinstance(part, str) for part in source):
        return "".join(source)
    raise NotebookError(f"cell {number}: 'source' must be a string or a list of strings")


def _is_python(metadata: object) -> bool:
    if not isinstance(metadata, dict):
        return True
    for key, name_key in (("language_info", "name"), ("kernelspec", "language")):
        info = metadata.get(key)
        if isinstance(info, dict) and isinstance(info.get(name_key), str):
            if info[name_key].lower() != "python":
                return False
    return True


# IPython syntax

_LINE_MAGIC = re.compile(
    r"""\s*(?:
        [%!?]                               # %magic, !shell, ?help
      | [\w.]+\s*=\s*[%!]                   # files = !ls, t = %timeit f()
      | [\w.]+\?{1,2}\s*$                   # obj? and obj??
    )""",
    re.VERBOSE,
)


def _neutralise(lines: list[str]) -> tuple[list[str], tuple[tuple[int, int], ...], bool]:
    """Python-parsable lines of the same count, the neutralised regions, and cell-magic-ness."""
    first_code = next((line for line in lines if line.strip()), "")
    if first_code.lstrip().startswith("%%"):
        return [_ending(line) for line in lines], ((1, len(lines)),) if lines else (), True

    out: list[str] = []
    regions: list[tuple[int, int]] = []
    scanner = _Scanner()
    continues_magic = False
    for number, line in enumerate(lines, start=1):
        body = line.rstrip("\r\n")
        if continues_magic:
            out.append(_ending(line))
            regions[-1] = (regions[-1][0], number)
        elif scanner.at_statement_start and _LINE_MAGIC.match(body):
            indent = body[: len(body) - len(body.lstrip())]
            out.append(indent + "pass" + _ending(line))
            regions.append((number, number))
        else:
            scanner.feed(body)
            out.append(line)
            continue
        continues_magic = body.endswith("\\")
    return out, tuple(regions), False


def _ending(line: str) -> str:
    return line[len(line.rstrip("\r\n")) :]


class _Scanner:
    """Just enough of Python's tokenizer to know whether a line starts a statement."""

    def __init__(self) -> None:
        self.quote: str | None = None  # the delimiter of an open string
        self.depth = 0  # open brackets
        self.backslash = False  # the previous line ended with a continuation backslash

    @property
    def at_statement_start(self) -> bool:
        return self.quote is None and self.depth == 0 and not self.backslash

    def feed(self, line: str) -> None:
        i, n = 0, len(line)
        while i < n:
            ch = line[i]
            if self.quote:
                if ch == "\\":
                    i += 2
                    continue
                if line.startswith(self.quote, i):
                    i += len(self.quote)
                    self.quote = None
                    continue
                i += 1
            elif ch == "#":
                break
            elif ch in "'\"":
                self.quote = ch * 3 if line.startswith(ch * 3, i) else ch
                i += len(self.quote)
            else:
                if ch in "([{":
                    self.depth += 1
                elif ch in ")]}":
                    self.depth = max(self.depth - 1, 0)
                i += 1
        ends_with_backslash = line.endswith("\\") and i >= n
        if self.quote in ("'", '"') and not ends_with_backslash:
            self.quote = None  # an unterminated one-line string ends with its line
        self.backslash = ends_with_backslash and self.quote is None


# Writing back


def write_notebook(original_text: str, nb: NotebookSource, new_source: str) -> str:
    """``original_text`` with the code cells changed to match ``new_source``."""
    if new_source == nb.source:
        return original_text
    new_cells = _split_into_cells(nb, split_lines(new_source))
    spans = _source_value_spans(original_text)
    replacements = []
    for cell in nb.cells:
        lines = new_cells[cell.index]
        text = "".join(lines)
        if not cell.text.endswith(("\n", "\r")) and text.endswith("\n"):
            text = text[:-2] if text.endswith("\r\n") else text[:-1]
        if text != cell.text:
            start, end = spans[cell.index]
            value = _encode_source(original_text[start:end], text, original_text.isascii())
            replacements.append((start, end, value))
    out = original_text
    for start, end, value in sorted(replacements, reverse=True):
        out = out[:start] + value + out[end:]
    return out


def _split_into_cells(nb: NotebookSource, new_lines: list[str]) -> dict[int, list[str]]:
    """Assign every line of the fixed module to a cell, restoring the neutralised lines."""
    old_lines = split_lines(nb.source)
    owner: list[tuple[CellSpan, int]] = []  # module line -> (cell, line within the cell)
    originals: list[str] = []  # module line -> the user's text of that line
    for cell in nb.cells:
        cell_lines = split_lines(cell.text)
        if cell_lines and not cell_lines[-1].endswith(("\n", "\r")):
            cell_lines[-1] += "\n"
        owner.extend((cell, k) for k in range(1, cell.line_count + 1))
        originals.extend(cell_lines)
    out: dict[int, list[str]] = {cell.index: [] for cell in nb.cells}

    for tag, i1, i2, j1, j2 in _anchored_opcodes(old_lines, new_lines):
        if tag == "equal":
            for i in range(i1, i2):
                out[owner[i][0].index].append(originals[i])
            continue
        for i in range(i1, i2):
            cell, line = owner[i]
            if cell.is_magic(line):
                raise NotebookError(f"a fix would change IPython syntax in cell {cell.number}, line {line}")
        added = new_lines[j1:j2]
        if tag == "insert":
            out[_insertion_cell(owner, i1, added).index].extend(added)
            continue
        # replace or delete: pair the new lines with the old ones; the rest go to the last cell
        for k, i in enumerate(range(i1, i2)):
            if k < len(added):
                out[owner[i][0].index].append(added[k])
        out[owner[i2 - 1][0].index].extend(added[i2 - i1 :])
    return out


def _anchored_opcodes(old: list[str], new: list[str]) -> list[tuple[str, int, int, int, int]]:
    """difflib opcodes, with the common head and tail matched first.

    Repeated identical lines (``import torch`` in two cells) make difflib's alignment ambiguous;
    taking the unchanged head and tail as equal pins a fix's edit to where it really is.
    """
    limit = min(len(old), len(new))
    head = 0
    while head < limit and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < limit - head and old[len(old) - 1 - tail] == new[len(new) - 1 - tail]:
        tail += 1
    codes: list[tuple[str, int, int, int, int]] = []
    if head:
        codes.append(("equal", 0, head, 0, head))
    middle = difflib.SequenceMatcher(None, old[head : len(old) - tail], new[head : len(new) - tail], autojunk=False)
    for tag, i1, i2, j1, j2 in middle.get_opcodes():
        codes.append((tag, i1 + head, i2 + head, j1 + head, j2 + head))
    if tail:
        codes.append(("equal", len(old) - tail, len(old), len(new) - tail, len(new)))
    return codes


def _insertion_cell(owner: list[tuple[CellSpan, int]], at: int, added: list[str]) -> CellSpan:
    """The cell that receives lines inserted before module line index ``at`` (0-based)."""
    before = owner[at - 1] if at > 0 else None
    after = owner[at] if at < len(owner) else None
    if before and after and before[0] is after[0]:
        cell = before[0]
        if cell.cell_magic or (
            cell.is_magic(before[1]) and cell.is_magic(after[1]) and _same_region(cell, before[1], after[1])
        ):
            raise NotebookError(f"a fix would insert lines inside IPython syntax in cell {cell.number}")
        return cell
    # At a cell boundary an indented line continues the block above; anything else opens
    # the next cell.
    indented = bool(added) and added[0][:1] in (" ", "\t")
    order = [before, after] if indented else [after, before]
    for candidate in order:
        if candidate is not None and not candidate[0].cell_magic:
            return candidate[0]
    if before is None and after is None:
        raise NotebookError("a fix would insert lines into a notebook without code")
    raise NotebookError("a fix would insert lines into a cell magic")


def _same_region(cell: CellSpan, first: int, second: int) -> bool:
    return any(lo <= first and second <= hi for lo, hi in cell.magic_regions)


def _source_value_spans(text: str) -> dict[int, tuple[int, int]]:
    """Character spans of each cell's ``source`` value in the notebook JSON, by cell index."""
    decoder = json.JSONDecoder()
    spans: dict[int, tuple[int, int]] = {}

    def members(pos: int) -> Iterator[tuple[Any, int, int]]:
        """Yield (key, value start, value end) of the object at ``pos``; end after the '}'."""
        pos = _expect(text, _skip_ws(text, pos), "{")
        pos = _skip_ws(text, pos)
        if text[pos] == "}":
            return
        while True:
            key, pos = decoder.raw_decode(text, pos)
            pos = _skip_ws(text, _expect(text, _skip_ws(text, pos), ":"))
            _, end = decoder.raw_decode(text, pos)
            yield key, pos, end
            pos = _skip_ws(text, end)
            if text[pos] == "}":
                return
            pos = _skip_ws(text, _expect(text, pos, ","))

    try:
        start = 1 if text.startswith("\ufeff") else 0
        for key, value_start, _ in members(start):
            if key != "cells":
                continue
            pos = _skip_ws(text, _expect(text, value_start, "["))
            index = 0
            while text[pos] != "]":
                for cell_key, s, e in members(pos):
                    if cell_key == "source":
                        spans[index] = (s, e)
                _, pos = decoder.raw_decode(text, pos)
                pos = _skip_ws(text, pos)
                if text[pos] == ",":
                    pos = _skip_ws(text, pos + 1)
                index += 1
    except (ValueError, IndexError) as exc:
        raise NotebookError(f"cannot write the notebook back: {exc}") from None
    return spans


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _expect(text: str, pos: int, char: str) -> int:
    if text[pos] != char:
        raise ValueError(f"expected {char!r} at character {pos}")
    return pos + 1


def _encode_source(old_value: str, text: str, ascii_only: bool) -> str:
    """``text`` as a JSON value in the style of ``old_value`` (a list of lines or a string)."""
    if not old_value.startswith("["):
        return json.dumps(text, ensure_ascii=ascii_only)
    items = [json.dumps(line, ensure_ascii=ascii_only) for line in split_lines(text)]
    inner = old_value[1:-1]
    opening = inner[: len(inner) - len(inner.lstrip())]
    closing = inner[len(inner.rstrip()) :] if inner.strip() else ""
    separator = _list_separator(inner, opening)
    return "[" + opening + separator.join(items) + closing + "]" if items else "[]"


def _list_separator(inner: str, opening: str) -> str:
    """The text between two items of the old list, or a guess from its opening whitespace."""
    decoder = json.JSONDecoder()
    stripped = inner.strip()
    if stripped:
        _, end = decoder.raw_decode(inner, len(opening))
        rest = inner[end:]
        if rest.strip().startswith(","):
            after_comma = rest[rest.index(",") + 1 :]
            return "," + after_comma[: len(after_comma) - len(after_comma.lstrip())]
    return "," + opening if "\n" in opening else ", "
