"""Source decoding: the fast UTF-8 path must agree with the interpreter's rules (tokenize)."""

from __future__ import annotations

import tokenize
from io import BytesIO

import pytest

from ampdoctor.lint.engine import decode_source


def _reference(data: bytes) -> str:
    """What the interpreter reads: BOM, PEP 263 declaration, else UTF-8."""
    encoding, _ = tokenize.detect_encoding(BytesIO(data).readline)
    text = data.decode(encoding)
    return text[1:] if text.startswith("\ufeff") else text


DECODABLE = [
    b"x = 1\n",
    b"",
    b"\xef\xbb\xbfx = 'caf\xc3\xa9'\n",  # BOM
    b"# -*- coding: latin-1 -*-\nname = '\xe9t\xe9'\n",  # declaration on line 1
    b"#!/usr/bin/env python\n# vim: set fileencoding=cp1252 :\nq = '\x93'\n",  # on line 2
    b"s = 'no coding: here'\nt = '\xc3\xa9'\n",  # the word in code is no declaration
    b"x = 1\r\ny = '\xe2\x82\xac'\r\n",
    b"x = 1\ry = 2\r",
    b"a = 1\nb = 2\n# coding: latin-1\nc = '\xc3\xa9'\n",  # line 3 is too late to declare
]


@pytest.mark.parametrize("data", DECODABLE)
def test_decoding_agrees_with_the_interpreter(data):
    assert decode_source(data) == _reference(data)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"# autocast\nx = 1\nname = '\xe9t\xe9'\n", "cannot decode as utf-8"),
        (b"name = '\xe9t\xe9'\n", "not valid UTF-8 and no encoding declaration"),
        (b"# coding: klingon\nx = 1\n", "unknown encoding"),
    ],
)
def test_undecodable_sources_raise_one_line_errors(data, message):
    with pytest.raises(ValueError, match=message) as caught:
        decode_source(data)
    assert "\n" not in str(caught.value)
