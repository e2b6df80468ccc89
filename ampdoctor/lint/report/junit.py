"""The ``junit`` format: a JUnit XML test report, as CI servers (GitLab, Jenkins, Azure) read it.

A ``<testsuites>`` root holds one ``<testsuite>`` per file with findings (``name``: the path),
and each suite one failed ``<testcase>`` per finding::

    <testcase name="org.ampdoctor.AMP201" classname="train.py">
      <failure message="line 9, col 5, Gradients are clipped ..." type="AMP201">train.py:9:5: AMP201 ...

The failure's text is the finding in full: location, code and message, then its ``help:`` and
``note:`` lines. A notebook finding's message names the cell (``cell 4, line 3, col 2, ...``).
A run without findings still makes a valid report: one suite with one passing test case, so
that a CI server does not read an empty report as a broken one.

The XML is built with ``xml.etree.ElementTree`` and written in ASCII (anything else as a
character reference) under a UTF-8 declaration, so it stays valid whatever the stream's
encoding. Characters XML 1.0 cannot hold at all (most control characters, lone surrogates) are
written as ``\\xNN`` or ``\\uNNNN`` text.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any, TextIO

from ...findings import Finding
from . import ReportContext, location_label, one_line

DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>\n'
PACKAGE = "org.ampdoctor"
# Everything outside XML 1.0's Char production.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def render(ctx: ReportContext, stream: TextIO, *, color: bool) -> None:
    root = report(ctx.findings)
    ET.indent(root)
    stream.write(DECLARATION)
    stream.write(ET.tostring(root, encoding="us-ascii").decode("ascii"))
    stream.write("\n")


def report(findings: list[Finding]) -> ET.Element:
    """The ``<testsuites>`` element for ``findings``."""
    by_path: dict[str, list[Finding]] = {}
    for finding in findings:
        by_path.setdefault(finding.location.path, []).append(finding)
    count = str(len(findings))
    root = ET.Element("testsuites", name="ampdoctor", tests=count, failures=count, errors="0")
    if not findings:
        root.set("tests", "1")
        suite = _suite(root, "ampdoctor", tests=1, failures=0)
        ET.SubElement(suite, "testcase", name="All checks passed", classname="ampdoctor")
        return root
    for path, group in by_path.items():
        suite = _suite(root, path, tests=len(group), failures=len(group))
        for finding in group:
            _testcase(suite, finding)
    return root


def _suite(root: ET.Element, name: str, *, tests: int, failures: int) -> ET.Element:
    attributes = {"name": xml_text(name), "tests": str(tests), "failures": str(failures), "errors": "0"}
    return ET.SubElement(root, "testsuite", attributes, skipped="0", package=PACKAGE)


def _testcase(suite: ET.Element, finding: Finding) -> None:
    path = xml_text(finding.location.path)
    case = ET.SubElement(suite, "testcase", name=f"{PACKAGE}.{xml_text(finding.code)}", classname=path)
    failure = ET.SubElement(case, "failure", message=xml_text(failure_message(finding)), type=xml_text(finding.code))
    failure.text = xml_text(failure_text(finding))


def failure_message(finding: Finding) -> str:
    """``line 9, col 5, message``; in a notebook ``cell 4, line 3, col 2, message``."""
    loc = finding.location
    cell = f"cell {loc.cell}, " if loc.cell is not None else ""
    return f"{cell}line {loc.line}, col {loc.column}, {one_line(finding.message)}"


def failure_text(finding: Finding) -> str:
    """The finding in full, as the ``text`` format heads it, with its help and notes."""
    lines = [f"{location_label(finding.location)}: {finding.code} {one_line(finding.message)}"]
    for related in finding.related:
        note: dict[str, Any] = related.to_dict()
        lines.append(f"note: {one_line(note['message'])}")
        lines.append(f"  --> {note['path']}:{note['line']}:{note['column']}")
    help_text = finding.help_text
    if help_text:
        lines.append(f"help: {one_line(help_text)}")
    return "\n".join(lines)


def xml_text(text: str) -> str:
    """``text`` with each character XML 1.0 cannot hold written as a Python-style escape."""
    return _NOT_XML.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
