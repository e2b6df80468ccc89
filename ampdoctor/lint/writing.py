"""Writing fixed files back: atomically, only when the new text parses and the file on disk
still holds what was checked, in the file's own encoding; and the diff ``--diff`` shows."""

from __future__ import annotations

import os
from pathlib import Path

from .engine import FileResult, _notebook_text, decode_source, parse_source


class WriteError(Exception):
    """A fixed file left as it is: changed on disk since it was read, or the fix cannot be kept."""


def write_result(path: Path, result: FileResult) -> None:
    """Write fixed text atomically: a temporary file beside the original, then a rename.

    Nothing is written unless the new text parses and the file still holds what was read;
    the file keeps its mode, encoding (declared or UTF-8), byte-order mark and line endings.
    A file with several hard links is written in place instead: a rename would give this name
    a new inode and leave the other links with the old text.
    """
    if not result.changed:
        return
    path = Path(os.path.realpath(path))  # through a symbolic link: replace the file, not the link
    notebook = path.suffix == ".ipynb"
    read_text = result.notebook[0] if notebook and result.notebook else result.original
    text = _notebook_text(result) if notebook else result.source or ""
    _check_parses(text, notebook)
    current = path.read_bytes()
    if not _holds(current, read_text, notebook):
        raise WriteError("changed on disk since it was read; not overwritten")
    data = text.encode("utf-8") if notebook else _encode_like(text, current)
    if os.stat(path).st_nlink > 1:
        _write_in_place(path, data, current)
        return
    import tempfile

    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".ampdoctor", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, os.stat(path).st_mode & 0o7777)
        if path.read_bytes() != current:  # a last look just before the rename
            raise WriteError("changed on disk since it was read; not overwritten")
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def _write_in_place(path: Path, data: bytes, current: bytes) -> None:
    """Overwrite the file's own inode (its hard links see the new text), after a last look."""
    fd = os.open(path, os.O_RDWR | getattr(os, "O_BINARY", 0))
    try:
        if os.read(fd, len(current) + 1) != current:
            raise WriteError("changed on disk since it was read; not overwritten")
        os.lseek(fd, 0, os.SEEK_SET)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.ftruncate(fd, len(data))
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_parses(text: str, notebook: bool) -> None:
    from .notebooks import NotebookError, read_notebook

    try:
        parse_source(read_notebook(text).source if notebook else text)
    except (SyntaxError, ValueError, RecursionError, MemoryError, NotebookError):
        raise WriteError("the fixed text does not parse; not written") from None


def _holds(data: bytes, text: str | None, notebook: bool) -> bool:
    """Whether ``data`` decodes to the ``text`` that was checked."""
    try:
        return (data.decode("utf-8") if notebook else decode_source(data)) == text
    except (UnicodeDecodeError, ValueError):
        return False


def _encode_like(text: str, current: bytes) -> bytes:
    """Encode as the file on disk is: its declared encoding, or UTF-8; with its BOM if it has one."""
    import tokenize
    from io import BytesIO

    encoding, _ = tokenize.detect_encoding(BytesIO(current).readline)  # "utf-8-sig" with a BOM
    try:
        return text.encode(encoding)
    except (LookupError, UnicodeEncodeError):
        raise WriteError(f"the fixed text cannot be written as {encoding}; not written") from None


def unified_diff(result: FileResult) -> str:
    if not result.changed:
        return ""
    before = (result.original or "").splitlines(keepends=True)
    after = (result.source or "").splitlines(keepends=True)
    import difflib

    return "".join(
        difflib.unified_diff(
            before, after, fromfile=f"a/{result.path.lstrip('/')}", tofile=f"b/{result.path.lstrip('/')}"
        )
    )
