"""The semantic gate: keeps exactly the modules some rule could fire on (checked against the rules)."""

from __future__ import annotations

from pathlib import Path

from helpers import all_options

from ampdoctor.lint.gate import Anchors, keeps, summarize

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_names_resolve_through_imports():
    summary = summarize("from torch.cuda import amp as a\nwith a.autocast():\n    pass\n")
    assert "torch.cuda.amp.autocast" in summary.names
    assert summary.has_any(Anchors(names=("torch.cuda.amp",)))
    assert not summary.has_any(Anchors(names=("torch.cuda.amp.GradScaler",)))


def test_methods_casts_and_literals():
    summary = summarize(
        "import torch as t\nx = y.to(t.float16)\nz = s.masked_fill(m, -1e9)\nw = q / (n + 1e-10)\nl.scale(v)\n"
    )
    assert "scale" in summary.methods
    assert "torch.float16" in summary.casts
    assert {"big-fill", "tiny-arith"} <= summary.literals
    assert "big-arith" not in summary.literals


def test_dtype_tables_are_not_casts_and_plain_numbers_are_not_fill_values():
    summary = summarize("import torch\nDTYPES = [torch.float16, torch.bfloat16]\nbest = 1e9\n")
    assert not summary.casts
    assert not summary.literals


def test_required_parts_must_all_hold():
    anchors = Anchors(names=("torch.amp.GradScaler",), requires_names=("torch.distributed.fsdp",))
    assert not keeps("import torch\ns = torch.amp.GradScaler()\n", [anchors])
    assert keeps(
        "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as F\ns = torch.amp.GradScaler()\n",
        [anchors],
    )


def test_in_doubt_the_module_is_kept():
    assert keeps("def broken(:\n", [Anchors(names=("x",))])  # the full parser reports the error
    assert keeps("x = 1\n", [None])  # a rule without anchors


def test_alternative_anchor_sets():
    fill = Anchors(names=("torch.float16",), requires=("big-fill",))
    arith = Anchors(names=("torch.autocast",), requires=("big-arith",))
    assert keeps("import torch\nwith torch.autocast('cuda'):\n    y = x - 1e9\n", [(fill, arith)])
    assert not keeps("import torch\nref = lambda x: x + 1e30\nt = torch.float16\n", [(fill, arith)])


def test_an_integer_beyond_float_range_does_not_crash_the_gate():
    huge = "9" * 320
    summary = summarize(
        f"import torch\nwith torch.autocast('cuda'):\n    y = a + {huge}\n    m.masked_fill(k, {huge})\n"
    )
    assert summary is not None and "big-arith" not in summary.literals


def test_lint_survives_an_integer_beyond_float_range():
    from ampdoctor import lint_source

    huge = "9" * 320
    source = f"import torch\nx = torch.zeros(2).half()\nwith torch.autocast('cuda'):\n    y = x + {huge}\n    x.masked_fill(x > 0, -{huge})\n"
    # No OverflowError from float(10**320): a fill beyond float range is left unjudged (the rules
    # judge finite literals), while the same fill at -1e9 is reported by the same path.
    assert lint_source(source) == []
    assert [(f.code, f.location.line) for f in lint_source(source.replace(f"-{huge}", "-1e9"))] == [("AMP301", 5)]


# --- the engine skips, in a large module, the rules that need a literal it does not have -----

_FILL = """
def step_{i}(model, x, mask, optimizer, scaler):
    with torch.autocast("cuda", dtype=torch.float16):
        scores = model(x).masked_fill(mask, {value})
        loss = scores.mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""


def _large_module(value: str) -> str:
    # about 40,000 characters: past the size from which the engine scans literals
    return "import torch\n" + "".join(_FILL.format(i=i, value=value) for i in range(160))


def _lint_with_spy(monkeypatch, source: str) -> tuple[list[str], int]:
    from ampdoctor.lint import engine
    from ampdoctor.lint.rules import lint_rules

    rule = lint_rules()["AMP301"]
    runs = []
    real = type(rule).check

    def counted(self, facts):
        runs.append(1)
        return real(self, facts)

    monkeypatch.setattr(type(rule), "check", counted)
    findings, _suppressed, _parsed = engine.check_source(source, "big.py", all_options())
    return [f.code for f in findings], len(runs)


def test_a_large_module_without_a_large_literal_does_not_run_the_overflow_rules(monkeypatch):
    from ampdoctor.lint import engine

    source = _large_module("0.0")
    assert len(source) >= engine._LITERAL_SCAN_FROM
    codes, runs = _lint_with_spy(monkeypatch, source)
    assert runs == 0 and "AMP301" not in codes


def test_a_large_module_with_a_large_fill_still_reports_it(monkeypatch):
    codes, runs = _lint_with_spy(monkeypatch, _large_module("-1e9"))
    assert runs == 1 and codes.count("AMP301") == 160


def test_a_small_module_runs_every_rule(monkeypatch):
    codes, runs = _lint_with_spy(monkeypatch, "import torch\n" + _FILL.format(i=0, value="0.0"))
    assert runs == 1 and codes == []


def test_skipping_by_literals_changes_no_finding_of_the_fixtures(monkeypatch):
    from ampdoctor.lint import engine

    sources = [(p.name, p.read_text(encoding="utf-8")) for p in sorted(FIXTURES.rglob("*.py"))]
    assert len(sources) > 50

    def findings(scan_from: int) -> list[tuple[str, int, str]]:
        monkeypatch.setattr(engine, "_LITERAL_SCAN_FROM", scan_from)
        found = []
        for name, source in sources:
            for f in engine.check_source(source, name, all_options())[0]:
                found.append((name, f.location.line, f.code))
        return found

    assert findings(0) == findings(10**9)
