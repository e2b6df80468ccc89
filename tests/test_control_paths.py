"""control_paths.py: the paths of one pass through a loop or function body, and what they know about
their conditions."""

from __future__ import annotations

import ast
import textwrap

import pytest

from ampdoctor.lint import control_paths as paths_module
from ampdoctor.lint.control_paths import BREAK, CONTINUE, NEXT, RAISE, RETURN, paths_of
from ampdoctor.lint.facts import build_facts

HEADER = "import torch\nscaler = torch.amp.GradScaler('cuda')\n"


def loop_paths(body: str) -> list[tuple[tuple[str, ...], str]]:
    """(event spellings, end) of every path through one pass of a module-level loop around ``body``."""
    source = HEADER + "for i, batch in enumerate(loader):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    facts = build_facts(ast.parse(source), source)
    loop = next(node for node in facts.module.body if isinstance(node, ast.For))
    found = paths_of(facts, facts.frames[0], loop)
    assert found is not None
    return sorted({(tuple(facts.text(e.call.node) for e in p.events), p.end) for p in found})


def function_paths(source: str):
    source = HEADER + textwrap.dedent(source)
    facts = build_facts(ast.parse(source), source)
    frame = next(f for f in facts.frames if f.name == "step")
    return facts, paths_of(facts, frame, frame.node)


def test_branches_make_paths_and_a_plain_body_one():
    assert loop_paths("scaler.step(opt)\nscaler.update()\n") == [(("scaler.step(opt)", "scaler.update()"), NEXT)]
    assert loop_paths("if clip:\n    scaler.unscale_(opt)\nscaler.step(opt)\n") == [
        (("scaler.step(opt)",), NEXT),
        (("scaler.unscale_(opt)", "scaler.step(opt)"), NEXT),
    ]


def test_two_ifs_with_one_test_run_together():
    body = """
    if (i + 1) % accum == 0:
        scaler.step(opt)
    log(i)
    if (i + 1) % accum == 0:
        scaler.update()
    """
    assert loop_paths(body) == [((), NEXT), (("scaler.step(opt)", "scaler.update()"), NEXT)]


def test_a_negated_test_takes_the_other_arm():
    body = """
    if scaler is not None:
        scaler.step(opt)
    if scaler is None:
        opt.step()
    """
    assert loop_paths(body) == [(("opt.step()",), NEXT), (("scaler.step(opt)",), NEXT)]


def test_one_name_compared_with_two_constants_takes_at_most_one_arm():
    body = """
    if phase == "d":
        scaler.step(d_opt)
    if phase == "g":
        scaler.step(g_opt)
    """
    assert loop_paths(body) == [((), NEXT), (("scaler.step(d_opt)",), NEXT), (("scaler.step(g_opt)",), NEXT)]


def test_a_name_bound_to_a_test_is_decided_like_the_test():
    body = """
    do_step = (i + 1) % accum == 0
    if do_step and clip:
        scaler.unscale_(opt)
    if (i + 1) % accum == 0:
        scaler.step(opt)
    """
    assert (("scaler.unscale_(opt)",), NEXT) not in loop_paths(body)


def test_and_or_follow_what_is_known():
    body = """
    if ready:
        scaler.unscale_(opt)
    if ready or last:
        scaler.step(opt)
    """
    assert (("scaler.unscale_(opt)",), NEXT) not in loop_paths(body)


def test_a_flag_set_to_a_constant_decides_a_later_test():
    body = """
    skip = False
    if norm > 10:
        skip = True
    if not skip:
        scaler.step(opt)
    scaler.update()
    """
    assert set(loop_paths(body)) == {(("scaler.update()",), NEXT), (("scaler.step(opt)", "scaler.update()"), NEXT)}


def test_assigning_a_name_forgets_what_was_known_about_it():
    body = """
    if ok:
        scaler.step(opt)
    ok = check(batch)
    if ok:
        scaler.update()
    """
    assert (("scaler.update()",), NEXT) in loop_paths(body)


def test_jumps_end_paths():
    body = """
    scaler.unscale_(opt)
    if bad:
        continue
    if done:
        break
    if fatal:
        raise RuntimeError("stop")
    scaler.step(opt)
    """
    found = loop_paths(body)
    assert (("scaler.unscale_(opt)",), CONTINUE) in found
    assert (("scaler.unscale_(opt)",), BREAK) in found
    assert (("scaler.unscale_(opt)",), RAISE) in found
    assert (("scaler.unscale_(opt)", "scaler.step(opt)"), NEXT) in found


def test_a_nested_loop_keeps_its_own_continue_and_break():
    body = """
    for micro in batch:
        if micro is None:
            continue
        scaler.scale(loss).backward()
        if stop:
            break
    scaler.step(opt)
    """
    ends = {end for _, end in loop_paths(body)}
    assert ends == {NEXT}


def test_exception_handlers_are_not_followed():
    body = """
    try:
        scaler.step(opt)
    except RuntimeError:
        continue
    scaler.update()
    """
    assert loop_paths(body) == [(("scaler.step(opt)", "scaler.update()"), NEXT)]


def test_a_jump_out_of_a_try_runs_its_finally_block():
    body = """
    try:
        scaler.unscale_(opt)
        if bad:
            continue
        scaler.step(opt)
    finally:
        scaler.update()
    """
    assert set(loop_paths(body)) == {
        (("scaler.unscale_(opt)", "scaler.update()"), CONTINUE),
        (("scaler.unscale_(opt)", "scaler.step(opt)", "scaler.update()"), NEXT),
    }


def test_function_bodies_end_with_return():
    _, found = function_paths(
        """
        def step(opt, norm):
            scaler.unscale_(opt)
            if not norm.isfinite():
                return None
            scaler.step(opt)
            scaler.update()
        """
    )
    assert sorted((len(p.events), p.end) for p in found) == [(1, RETURN), (3, NEXT)]


def test_decisions_record_the_arm_taken_after_each_event():
    source = """
    def step(opt, i, accum):
        scaler.unscale_(opt)
        if (i + 1) % accum == 0:
            scaler.step(opt)
    """
    _facts, found = function_paths(source)
    skipped = next(p for p in found if len(p.events) == 1)
    (decision,) = skipped.decisions
    assert decision.truth is False and decision.position == 1
    assert paths_module.arm_taken(skipped, decision.node) is False


def test_ifs_without_events_or_jumps_do_not_multiply_paths():
    body = "".join(f"if verbose_{n}:\n    print({n})\n" for n in range(40)) + "scaler.step(opt)\n"
    assert loop_paths(body) == [(("scaler.step(opt)",), NEXT)]


def test_too_many_paths_has_no_answer(monkeypatch):
    monkeypatch.setattr(paths_module, "MAX_PATHS", 8)
    source = HEADER + "for x in loader:\n" + "".join(f"    if c{n}:\n        opt.zero_grad()\n" for n in range(6))
    facts = build_facts(ast.parse(source), source)
    loop = next(node for node in facts.module.body if isinstance(node, ast.For))
    assert paths_of(facts, facts.frames[0], loop) is None
    assert paths_module.some(None, lambda p: True) is False
    assert paths_module.every(None, lambda p: True) is None


@pytest.mark.parametrize(
    "predicate, some, every", [(lambda p: p.end == NEXT, True, True), (lambda p: p.events, True, False)]
)
def test_some_and_every(predicate, some, every):
    source = HEADER + "for x in loader:\n    if c:\n        opt.zero_grad()\n"
    facts = build_facts(ast.parse(source), source)
    loop = next(node for node in facts.module.body if isinstance(node, ast.For))
    found = paths_of(facts, facts.frames[0], loop)
    assert paths_module.some(found, predicate) is some
    assert paths_module.every(found, lambda p: bool(predicate(p))) is every


def test_paths_are_computed_once_per_body():
    source = HEADER + "for x in loader:\n    scaler.step(opt)\n"
    facts = build_facts(ast.parse(source), source)
    loop = next(node for node in facts.module.body if isinstance(node, ast.For))
    assert paths_of(facts, facts.frames[0], loop) is paths_of(facts, facts.frames[0], loop)
