"""# noqa and # ampdoctor: ignore[...] on the finding's line or its statement's first line."""

from __future__ import annotations

import pytest
from helpers import assert_kept_on_the_command_line

from ampdoctor.lint import known_codes
from ampdoctor.lint.engine import LintOptions, check_source

TEMPLATE = """\
import torch
scaler = torch.amp.GradScaler("cuda")
for x in data:
    with torch.autocast("cuda"):
        loss = model(x)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0){comment}
    scaler.step(opt)
    scaler.update()
"""


def check(source):
    findings, suppressed, _ = check_source(source, "t.py", LintOptions(frozenset(known_codes())))
    assert_kept_on_the_command_line(source, {f.code for f in findings})
    return [f.code for f in findings], suppressed


@pytest.mark.parametrize(
    "comment, codes, suppressed",
    [
        ("", ["AMP201"], 0),
        ("  # noqa", [], 1),
        ("  # noqa: AMP201", [], 1),
        ("  # NOQA:AMP201", [], 1),
        ("  # noqa: E501, AMP201", [], 1),
        ("  # noqa: E501", ["AMP201"], 0),
        ("  # noqa: AMP202", ["AMP201"], 0),
        ("  # ampdoctor: ignore[AMP201]", [], 1),
        ("  # ampdoctor: ignore[AMP101, AMP201]", [], 1),
        ("  # ampdoctor: ignore", [], 1),
        ("  # ampdoctor: ignore[AMP101]", ["AMP201"], 0),
        ("  # a comment that mentions noqa-less text", ["AMP201"], 0),
    ],
)
def test_suppression_comments(comment, codes, suppressed):
    assert check(TEMPLATE.format(comment=comment)) == (codes, suppressed)


def test_first_line_of_a_multiline_statement():
    source = TEMPLATE.format(comment="").replace(
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
        "    norm = (  # noqa: AMP201\n        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n    )",
    )
    assert check(source) == ([], 1)


def test_noqa_inside_a_string_on_another_line_does_not_count():
    source = TEMPLATE.format(comment="") + 'message = "# noqa"\n'
    assert check(source) == (["AMP201"], 0)


@pytest.mark.parametrize(
    "comment, codes, suppressed",
    [
        # a suppression's text inside a string on the finding's own line is no comment
        ('; text = "# noqa"', ["AMP201"], 0),
        ("; text = '# noqa: AMP201'", ["AMP201"], 0),
        ('; text = "# ampdoctor: ignore[AMP201]"', ["AMP201"], 0),
        # a real comment after a string that holds a '#' still counts
        ('; text = "#"  # noqa: AMP201', [], 1),
        ("; text = 'a # b'  # noqa", [], 1),
    ],
)
def test_only_a_comment_suppresses(comment, codes, suppressed):
    assert check(TEMPLATE.format(comment=comment)) == (codes, suppressed)
