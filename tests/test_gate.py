"""The semantic gate: keeps exactly the modules some rule could fire on (checked against the rules)."""

from __future__ import annotations

from ampdoctor.lint.gate import Anchors, keeps, summarize


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
