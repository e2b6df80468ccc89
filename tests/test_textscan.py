"""The text-level gate (textscan.py): a superset of what gate.summarize sees, without parsing."""

from __future__ import annotations

import importlib.util
import io
import tokenize
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ampdoctor.lint import gate, textscan
from ampdoctor.lint.gate import Anchors, summarize
from ampdoctor.lint.rules import AUTOCAST, FLOAT16, lint_rules
from ampdoctor.lint.textscan import (
    autocast_anchor,
    calls_method,
    float16_anchor,
    float16_cast,
    half_call,
    literal_flags,
    may_keep,
    mentions_word,
    text_gate,
)

ROOT = Path(__file__).resolve().parent.parent


def gate_summary(source: str):
    """gate.summarize, or None where it cannot parse (or fails: an integer literal too large
    for a float makes its ``float(node.value)`` raise OverflowError)."""
    try:
        return summarize(source)
    except OverflowError:
        return None


def facts(source: str):
    summary = gate_summary(source)
    assert summary is not None, "test sources must parse"
    return summary


def assert_superset(source: str) -> None:
    """Everything the gate records about ``source``, the text checks say too."""
    data = source.encode("utf-8")
    summary = gate_summary(source)
    if summary is None:
        return  # the gate keeps what it cannot parse; no fact to cover
    assert summary.literals <= literal_flags(data), source
    assert not summary.has_any(FLOAT16) or float16_anchor(data), source
    assert not summary.has_any(AUTOCAST) or autocast_anchor(data), source
    assert not summary.has_any(AUTOCAST) or mentions_word(data, "autocast"), source
    assert "half" not in summary.methods or half_call(data), source
    assert not (summary.casts & set(FLOAT16.casts)) or float16_cast(data), source
    assert "parameters" not in summary.methods or calls_method(data, "parameters"), source
    assert "half()" not in summary.methods or calls_method(data, "half()"), source
    assert not (summary.method_casts & set(FLOAT16.casts)) or textscan.method_casts_to(data, FLOAT16.casts), source
    anchors = [rule.anchors for rule in lint_rules().values()]
    assert not gate.keeps(source, anchors) or may_keep(data, anchors), source


# ---------------------------------------------------------------------------------------
# Literal flags, both ways
# ---------------------------------------------------------------------------------------

LITERALS = [
    # (source, flags the gate records: the text check must say them, and exactly these here)
    ("y = s.masked_fill(m, -1e9)\n", {"big-fill"}),
    ("y = s.masked_fill(m, value=-1e9)\n", {"big-fill"}),
    ("y = torch.full((2, 3), 1_000_000)\n", {"big-fill"}),
    ("y = torch.where(m, x, 0xFFFFFFFF)\n", {"big-fill"}),
    ("y = x.clamp(min=-(2 ** 20))\n", {"big-fill"}),
    ("y = x.clamp_(\n    max=1e5,  # big\n)\n", {"big-fill"}),
    ("y = x.fill_(((65505)))\n", {"big-fill"}),
    ("y = s.masked_fill(m, -1e9 * x)\n", set()),  # not a literal argument
    ("y = torch.full((2, 1e9))\n", set()),  # inside a tuple
    ("y = s.masked_fill(m, 65504)\n", set()),  # fits in float16
    ("y = s.masked_fill(m, 1e9j)\n", set()),  # complex
    ("def full(x, v=1e9):\n    pass\n", set()),  # a definition, not a call
    ("y = other(m, -1e9)\n", set()),
    ("best = 1e9\n", set()),
    ("y = x - 1e9\n", {"big-arith"}),
    ("y = rand(100) + 1. + 1e6\n", {"big-arith"}),  # 1. ends an operand
    ("y = -1e9 + x\n", {"big-arith"}),
    ("y = x - -1e9\n", {"big-arith"}),
    ("MAX = 2**31 - 1\n", {"big-arith"}),
    ("y = x + (-2) ** 17\n", {"big-arith"}),
    ("y = x + 4 ** 8\n", {"big-arith"}),
    ("y = x + 2 ** (2e1)\n", {"big-arith"}),
    ("y = x + 10. ** 5\n", {"big-arith"}),
    ("y = x + ... ** 5\n", set()),
    ("y = (x\n     - 1e9)\n", {"big-arith"}),
    ("y = x * -1e9 + z\n", set()),  # the left operand of + is a product
    ("y = x - 1e9 * z\n", set()),
    ("y = x + 4 ** 7\n", set()),
    ("y = (1 << 31) - 1\n", set()),
    ("x -= 1e9\n", set()),  # an augmented assignment is no BinOp
    ("y = x + 1e-10\n", {"tiny-arith"}),
    ("y = q / (n + 1e-10)\n", {"tiny-arith"}),
    ("y = x / 2 ** -25\n", {"tiny-arith"}),
    ("y = x / 1e-9 * z\n", {"tiny-arith"}),
    ("y = x / -1e-9\n", {"tiny-arith"}),
    ("y = x / 0.00000001\n", {"tiny-arith"}),
    ("y = x // 1e-9\n", set()),
    ("y = 1e-9 / x\n", set()),
    ("y = x * 1e-9\n", set()),
    ("y = x + 1e-7\n", set()),  # above 2**-24
    ("opt = Adam(p, eps=1e-9)\n", {"tiny-eps"}),
    ("opt = Adam(p,\n           eps=1e-10)\n", {"tiny-eps"}),
    ("def f(eps=1e-9):\n    pass\n", set()),
    ("opt = Adam(p, eps=1e-7)\n", set()),
    ("f = lambda eps=1e-9: eps\n", set()),
    ("# y = s.masked_fill(m, -1e9) + 1e9\n", set()),  # a comment
    ('"""y = s.masked_fill(m, -1e9) + 1e9"""\n', set()),  # a string
    ("s = f'{x:>10} see #issuecomment-1543427086 {y - 1e9}'\n", {"big-arith"}),  # fields are code
]


@pytest.mark.parametrize("source, expected", LITERALS)
def test_literal_flags(source, expected):
    assert facts(source).literals == expected  # the table itself is right
    assert literal_flags(source.encode()) == expected  # and the text check is exact on it


def test_literal_flags_subset_asked_for():
    data = b"y = s.masked_fill(m, -1e9)\nz = x + 1e-10\n"
    assert literal_flags(data, ["big-fill"]) == {"big-fill"}
    assert literal_flags(data, ["tiny-eps"]) == set()
    assert literal_flags(data) == {"big-fill", "tiny-arith"}


def test_in_doubt_literals_count():
    # a quote between the literal and its call: the backward scan gives up and says yes
    source = 'y = torch.where(m, "a,b", -1e9)\n'
    assert "big-fill" in literal_flags(source.encode())
    # a huge integer the gate cannot convert: any fact it may take part in
    assert "big-arith" in literal_flags(b"y = x + " + b"9" * 400 + b"\n")


# ---------------------------------------------------------------------------------------
# Anchors, both ways
# ---------------------------------------------------------------------------------------

FLOAT16_CASES = [
    # (source, float16 anchor)
    ("import torch\nx = y.to(torch.float16)\n", True),
    ("import torch\nx = y.to(device, torch.half)\n", True),
    ("import torch\nx = y.to(\n    # it's half\n    torch.float16,\n)\n", True),
    ("import torch\nx = y.to((torch.half))\n", True),
    ("import torch\nf(x, dtype=torch.float16)\n", True),
    ("import torch as t\nx = t.ones(3, dtype=t.float16)\n", True),
    ("from torch import float16 as f16\nx = torch.ones(3, dtype=f16)\n", True),
    ("from torch import (\n    float16 as f16,\n)\nx = y.to(f16)\n", True),
    ("from torch import float16\nx = y.to(float16)\n", True),
    ("from torch import cuda\nx = y.type(cuda.HalfTensor)\n", True),
    ("x = y.type('torch.HalfTensor')\n", True),  # the type named by a string
    ('x = y.type(dtype="torch.cuda.HalfTensor")\n', True),
    ("import torch.cuda as tc\nx = y.type(tc.HalfTensor)\n", True),
    ("m.half()\n", True),
    ("m = (model\n     .half())\n", True),
    ("with torch.autocast('cuda'):\n    pass\n", True),
    ("from torch.cuda.amp import autocast\n", True),
    ("from torch import (\n    autocast as ac,\n)\n", True),
    ("import torch.cuda.amp as A\nwith A.autocast():\n    pass\n", True),
    ("x = f'{y.to(torch.float16)}'\n", True),  # the field of an f-string is code
    ("import torch\nDTYPES = [torch.float16, torch.bfloat16]\n", False),
    ("import torch\nif x.dtype == torch.float16:\n    pass\n", False),
    ("import torch\ndtype = torch.float16\n", False),
    ("import torch\ndef f(dtype=torch.float16):\n    pass\n", False),
    ("import torch\nx = y.to((torch.half, 1))\n", False),
    ("import torch\nx = torch.half\n", False),
    ("import numpy as np\nx = np.ones(3, dtype=np.float16)\n", False),
    ("from torch import float16 as f16\nx = f16\n", False),
    ("torch._C._autocast_enabled()\n", False),
    ("self.autocast = 1\n", False),
    ("x = is_autocast_enabled() and torch.amp.autocast_mode\n", False),
    ("half = len(x) // 2\nx.halfway()\n", False),
    ("# x.half() and dtype=torch.float16, with torch.autocast()\n", False),
    ('"""\n>>> with torch.autocast("cuda"):\n...     y = x.to(torch.float16)\n"""\n', False),
    ("s = f'{a!r}: x.half() torch.autocast {b[1:]}'\n", False),  # literal parts of an f-string
    ('s = f"""\n# header {x.half()}\n"""\n', True),  # a field after a '#' in an f-string is code
    ('s = f"""\n>>> {y.to(torch.float16)}\n"""\n', True),
]


@pytest.mark.parametrize("source, expected", FLOAT16_CASES)
def test_float16_anchor(source, expected):
    assert facts(source).has_any(FLOAT16) == expected  # the table itself is right
    assert float16_anchor(source.encode()) == expected


@pytest.mark.parametrize(
    "source, on_tree",
    [
        ('name = "torch.HalfTensor"\n', False),  # a string, but no .type() call
        ('x = y.type("torch." "HalfTensor")\n', True),  # implicit concatenation: one string to the parser
    ],
)
def test_a_tensor_type_string_keeps_the_module_on_text(source, on_tree):
    assert float16_anchor(source.encode())  # the text check keeps every such module ...
    assert facts(source).has_any(FLOAT16) == on_tree  # ... the gate only a .type() argument


def test_float16_parts():
    assert half_call(b"m.half()\n") and not float16_cast(b"m.half()\n") and not autocast_anchor(b"m.half()\n")
    source = b"import torch\nx = y.to(torch.float16)\n"
    assert float16_cast(source) and not half_call(source) and not autocast_anchor(source)
    source = b"with torch.autocast('cuda'):\n    pass\n"
    assert autocast_anchor(source) and not float16_cast(source) and not half_call(source)


def test_mentions_word():
    assert mentions_word(b"from torch.amp import autocast\n", "autocast")
    assert mentions_word(b"x = torch.autocast\n", b"autocast")
    assert not mentions_word(b"x = torch._autocast + is_autocast_enabled + autocast_mode\n", "autocast")
    assert not mentions_word(b"# autocast\n", "autocast")
    assert not mentions_word(b"x = 1\n", "autocast")


def test_calls_method():
    assert calls_method(b"opt = SGD(model.parameters(), lr=1)\n", "parameters")
    assert calls_method(b"opt = SGD(model . parameters (), lr=1)\n", "parameters")
    assert not calls_method(b"parameters = []\nopt = SGD(parameters)\n", "parameters")
    assert not calls_method(b"x = model.parameters\n", "parameters")


def test_identifiers_are_compared_after_nfkc():
    # The parser reads ｆｌｏａｔ16 as float16 and ｅｐｓ as eps.
    source = "import torch\nx = y.to(torch.ｆｌｏａｔ16)\n"
    assert facts(source).has_any(FLOAT16)
    assert float16_anchor(source.encode())
    source = "opt = Adam(p, ｅｐｓ=1e-9)\n"
    assert facts(source).literals == {"tiny-eps"}
    assert literal_flags(source.encode()) == {"tiny-eps"}
    source = "with torch.ａｕｔｏｃａｓｔ('cuda'):\n    pass\n"
    assert mentions_word(source.encode(), "autocast") and autocast_anchor(source.encode())
    # A fullwidth quote inside a string stays a letter of the string: the structure holds.
    source = "import torch\nx = y.to('＂)＂', torch.float16)\n"
    assert float16_anchor(source.encode())


def test_undecodable_text_is_kept():
    data = b"x = '\xff'\n"  # not UTF-8 and no declaration: every check says yes
    assert float16_anchor(data) and literal_flags(data) == textscan.LITERAL_FLAGS


def test_text_gate_for_rules():
    rules = lint_rules()
    every = text_gate([rule.anchors for rule in rules.values()])
    assert every.keeps(b"import torch\nscaler = torch.amp.GradScaler()\n")
    assert not every.keeps(b"import torch\nx = torch.ones(3)\n")
    amp301 = text_gate([rules["AMP301"].anchors])
    assert amp301.keeps(b"import torch\nx = x.half()\ny = s.masked_fill(m, -1e9)\n")
    assert not amp301.keeps(b"import torch\nx = x.float()\ny = s.masked_fill(m, -1e9)\n")
    assert not amp301.keeps(b"import torch\nx = x.half()\ny = s.masked_fill(m, -1e4)\n")
    assert text_gate([None]).keeps(b"")
    assert may_keep(b"x = 1\n", [Anchors(names=("x",)), None])


# ---------------------------------------------------------------------------------------
# Comments and strings: the lexer leaves out only what tokenize calls a comment or string
# ---------------------------------------------------------------------------------------


def _string_and_comment_spans(data: bytes) -> list[tuple[int, int]]:
    lines = data.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    spans = []
    for token in tokenize.tokenize(io.BytesIO(data).readline):
        if (
            token.type in (tokenize.STRING, tokenize.COMMENT)
            or token.type not in tokenize.tok_name
            or tokenize.tok_name[token.type] in ("FSTRING_MIDDLE",)
        ):
            (r1, c1), (r2, c2) = token.start, token.end
            spans.append((offsets[r1 - 1] + c1, offsets[r2 - 1] + c2))
    return spans


def _check_lexer(data: bytes) -> None:
    strings = textscan.strings._Strings(data)
    strings.excluded(len(data))
    allowed = _string_and_comment_spans(data)
    for start, end in zip(strings.starts, strings.ends):
        if data[end - 1 : end] == b"\r":
            end -= 1  # tokenize leaves the carriage return of a CRLF line out of a comment
        assert any(a <= start and end <= b for a, b in allowed), (start, end, data[start:end][:80])


def test_lexer_against_tokenize():
    source = (
        'x = f"{a[\'k\']} torch.float16 {b:>{w}}" + rf"""{c!r:{d}} "q" \\d """  # c\n'
        "y = 'it\\'s' + \"#\" + '''a\n# b\n'''\n"
        'if"x" in y: pass\n'
        "z = b'\\x00' # done\n"
    )
    _check_lexer(source.encode())
    strings = textscan.strings._Strings(source.encode())
    data = source.encode()
    assert not strings.excluded(data.index(b"a['k']"))
    assert strings.excluded(data.index(b"torch.float16"))
    assert not strings.excluded(data.index(b"b:>"))
    assert strings.excluded(data.index(b"# c"))
    assert strings.excluded(data.index(b"# b"))
    assert not strings.excluded(data.index(b"in y"))


def _fixture_files() -> list[Path]:
    return sorted((ROOT / "fixtures").rglob("*.py"))


def _torch_sample(step: int) -> list[Path]:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return []
    root = Path(list(spec.submodule_search_locations)[0])
    return sorted(root.rglob("*.py"))[::step]


@pytest.mark.parametrize("path", _fixture_files(), ids=lambda p: p.name)
def test_sound_on_fixtures(path):
    assert_superset(path.read_text(encoding="utf-8"))
    if path.read_bytes().isascii():
        _check_lexer(path.read_bytes())


@pytest.mark.slow
def test_sound_on_installed_torch():
    files = _torch_sample(20)
    if not files:
        pytest.skip("torch is not installed")
    for path in files:
        try:
            source = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        assert_superset(source)
    for path in files[::5]:
        data = path.read_bytes()
        if data.isascii():
            _check_lexer(data)


# ---------------------------------------------------------------------------------------
# Generated sources: literals and casts in many contexts
# ---------------------------------------------------------------------------------------

NUMBERS = st.sampled_from(
    [
        "1",
        "2",
        "16",
        "65504",
        "65505",
        "1e9",
        "1E+9",
        "1e-9",
        "1e-7",
        "5e-8",
        "6e-8",
        "0.00000001",
        "1_000_000",
        "0xFFFF",
        "0x10000",
        "0o177777",
        "0b" + "1" * 17,
        "1e400",
        "9" * 320,
        "1.",
        ".5e-30",
        "3j",
        "1e5",
        "7e4",
        "0",
        "0.0",
        "1e-10",
        "3.5e38",
        "1e-45",
    ]
)
EXPONENTS = st.sampled_from(
    ["2", "8", "16", "17", "24", "25", "30", "-25", "-24", "-30", "0.5", "1024", "-(25)", "(2e1)", "-2.5e1", "1_6"]
)


@st.composite
def literal_texts(draw, depth=0):
    kind = draw(st.integers(0, 9 if depth < 2 else 5))
    if kind <= 5:
        return draw(NUMBERS)
    inner = draw(literal_texts(depth=depth + 1))
    if kind == 6:
        return draw(st.sampled_from(["-", "+", "- ", "--"])) + inner
    if kind == 7:
        return f"({inner})"
    base = draw(st.sampled_from(["2", "4", "10", "10.", "(-2)", "0.5", "1e-3", "3j", inner]))
    space = draw(st.sampled_from(["", " "]))
    return f"{base}{space}**{space}{draw(EXPONENTS)}"


CONTEXTS = [
    "y = {L}\n",
    "y = a + {L}\n",
    "y = a - {L}\n",
    "y = a + 1. + {L}\n",
    "y = ... - {L}\n",
    "y = x.masked_fill(m, 2. - {L})\n",
    "y = 'a' - {L} + b'c'\n",
    "y = x[0] - {L} + f(a)[1] - {L}\n",
    "y = {L} + a\n",
    "y = {L} - a\n",
    "y = a / {L}\n",
    "y = a * {L}\n",
    "y = a // {L}\n",
    "y = a * {L} + b\n",
    "y = a + {L} * b\n",
    "y = a / {L} * b\n",
    "y = (a\n     + {L})\n",
    "y = a if c else {L} + b\n",
    "y = f(a, {L})\n",
    "y = x.masked_fill(m, {L})\n",
    "y = x.masked_fill(m, {L} * a)\n",
    "y = torch.full((2, 3), {L}, dtype=torch.float16)\n",
    "y = torch.where(m,\n                x,  # keep\n                {L})\n",
    "y = x.clamp(min={L}, max=3)\n",
    "y = x.clamp(min=({L}))\n",
    "y = x.fill_({L}) + a\n",
    "opt = Adam(p, lr=1, eps={L})\n",
    "opt = Adam(p, eps=\n    {L})\n",
    "norm = LayerNorm(4, eps = {L}, elementwise_affine=False)\n",
    "y = F.normalize(x, dim=1, eps=({L}))\n",
    "y = g(eps={L} + a)\n",
    "def full(x, v={L}):\n    pass\n",
    "def f(eps={L}):\n    pass\n",
    "g = lambda eps={L}: 0\n",
    "s = x.where(m, '{L}', {L})\n",
    "# x.masked_fill(m, {L}) + {L}\n",
    "s = '''x.masked_fill(m, {L}) + {L}'''\n",
    "s = f'{{x.masked_fill(m, {L}) - {L}}} - {L}'\n",
    "s = f'{x.masked_fill(m, {L}) - {L}} - {L}'\n",
    's = f"""\n# {a - {L}}\n>>> {x.masked_fill(m, {L})}\n"""\n',
    's = f"""text # {\na - {L}} {b}"""\n',
    's = """\n# {a - {L}}\n"""\n',
    "y = [a, {L}]\n",
    "y = d[{L}] - {L}\n",
    "y = -{L}\n",
    "y = a ** {L} + b\n",
    "x -= {L}\n",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CONTEXTS), literal_texts(), literal_texts())
def test_generated_literals_are_covered(context, first, second):
    source = context.replace("{L}", first, 1).replace("{L}", second)
    summary = gate_summary(source)
    if summary is None:
        return
    assert summary.literals <= literal_flags(source.encode()), source


IMPORTS = [
    "import torch",
    "import torch as t",
    "import numpy as np",
    "from torch import float16 as f16",
    "from torch import half, cuda",
    "from torch.cuda import HalfTensor as H",
    "import torch.cuda as tc",
    "from torch import autocast",
    "from torch.cuda import amp",
    "import torch.amp as A",
]
TARGETS = [
    "torch.float16",
    "t.float16",
    "np.float16",
    "f16",
    "half",
    "torch.half",
    "cuda.HalfTensor",
    "H",
    "tc.HalfTensor",
    "torch.cuda.HalfTensor",
    "torch.bfloat16",
    "float16",
    "x.float16",
    "(torch.half)",
]
USES = [
    "y = x.to({T})\n",
    "y = x.to(dev, {T})\n",
    "y = x.to({T}, non_blocking=True)\n",
    "y = x.type({T})\n",
    "y = torch.ones(3, dtype={T})\n",
    "y = torch.ones(3,\n               dtype={T},  # it's\n               )\n",
    "y = f(dtype={T} if a else b)\n",
    "y = [{T}, x]\n",
    "y = x.dtype == {T}\n",
    "dtype = {T}\n",
    "def f(dtype={T}):\n    pass\n",
    "y = x.to(({T}, 1))\n",
    "y = x.half()\n",
    "y = half(x)\n",
    "with autocast('cuda'):\n    pass\n",
    "with amp.autocast():\n    pass\n",
    "with A.autocast():\n    pass\n",
    "# y = x.to({T})\n",
    "s = 'x.to({T})'\n",
    "s = f'{{x.to({T})}}'\n",
    "s = f'{x.to({T})}'\n",
    's = f"""\n# {x.to({T})}\n>>> {y.half()}\n"""\n',
    's = f"""text # {\nx.to({T})}"""\n',
    's = """\n# {x.to({T})}\n"""\n',
    "s = f'{d[\"k\"]}' if 0 else x.to({T})\n",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(IMPORTS), max_size=3),
    st.lists(st.tuples(st.sampled_from(USES), st.sampled_from(TARGETS)), min_size=1, max_size=3),
)
@pytest.mark.slow
def test_generated_casts_are_covered(imports, uses):
    source = "".join(line + "\n" for line in imports) + "".join(use.replace("{T}", t) for use, t in uses)
    assert_superset(source)


def test_conversions_to_float16_are_told_from_factory_dtypes():
    casts = FLOAT16.casts
    assert textscan.method_casts_to(b"import torch\ny = x.to(torch.float16)\n", casts)
    assert textscan.method_casts_to(b"import torch\ny = x.to(device, dtype=torch.half)\n", casts)
    assert not textscan.method_casts_to(b"import torch\ny = torch.zeros(3, dtype=torch.float16)\n", casts)
    assert textscan.casts_to(b"import torch\ny = torch.zeros(3, dtype=torch.float16)\n", casts)
    for source in (
        "import torch\ny = x.to(torch.float16)\n",
        "import torch\ny = torch.zeros(3, dtype=torch.half)\n",
        "import torch\ny = x.type(dtype=torch.float16)\n",
    ):
        assert_superset(source)


def test_half_without_arguments_is_a_conversion():
    assert calls_method(b"y = x.half()\n", "half()")
    assert calls_method(b"y = x.half( # why\n)\n", "half()")
    assert not calls_method(b"y = x.half(*args)\n", "half()")
    assert calls_method(b"y = x.half(*args)\n", "half")
    for source in ("y = x.half()\n", "y = x.half(*a)\n", "y = x.half(\n)\n"):
        assert_superset(source)


def test_amp302_arithmetic_needs_a_conversion_not_a_dtype_table():
    amp302 = text_gate([lint_rules()["AMP302"].anchors])
    table = b"import torch\nx = torch.zeros(3, dtype=torch.half)\ny = z + 1e-30\nf = lambda t: t.half(*a)\n"
    assert not amp302.keeps(table)
    assert amp302.keeps(b"import torch\nx = w.half()\ny = x + 1e-30\n")
    assert amp302.keeps(b"import torch\nx = w.to(torch.float16)\ny = x + 1e-30\n")


def test_a_module_with_more_mentions_than_the_budget_is_kept_for_parsing():
    # One mention per line, 40,000 lines: looking at each would cost more than parsing.
    dense = b"import torch\nT = [\n" + b"    (torch.float16, 1e-30),\n" * 40000 + b"]\n"
    assert textscan.lexer._MENTION_BUDGET < 40000
    assert float16_anchor(dense)
    assert literal_flags(dense) == textscan.LITERAL_FLAGS
    sparse = b"import torch\nT = [\n" + b"    (torch.float16, 1e-3),\n" * 100 + b"]\n"
    assert not float16_anchor(sparse)


def test_a_very_long_line_is_not_lexed_again_for_every_mention(monkeypatch):
    mentions = 100000
    line = b"import torch\nT = f(" + b"torch.float16, " * mentions + b")\n"
    lexed: list[int] = []
    lex = textscan.lexer._lex

    def counted(data: bytes, start: int, end: int):
        lexed.append(end - start)
        return lex(data, start, end)

    monkeypatch.setattr(textscan.lexer, "_lex", counted)
    assert float16_anchor(line)  # conservative: the mentions are kept for parsing
    # Lexed in a bounded number of stretches, a few times the line's length in all: not once
    # per mention (that was 100,000 lexes of ever longer stretches).
    assert len(lexed) < mentions // 50
    assert sum(lexed) < 8 * len(line)


def test_a_non_ascii_module_is_scanned_once_for_all_rules(monkeypatch):
    # Fullwidth punctuation in a comment is not in NFKC form: the normalised view of the module
    # is computed, but it must not make every check start over (each used to rebuild the
    # string table and the import table of the module it alternated with).
    source = (
        "import torch  # 导入，模型（示例）\n"
        "DTYPES = [torch.float16, torch.bfloat16]  # 不是转换，只是表格\n"
        "def f(x, m, scale):\n"
        "    # autocast 与 .half() 只出现在注释里\n"
        "    return m.masked_fill(x > 0, -1e9) * scale\n"
    ).encode()
    built = {"strings": 0, "imports": 0}

    class Strings(textscan.strings._Strings):
        def __init__(self, d):
            built["strings"] += 1
            super().__init__(d)

    class Imports(textscan.names._Imports):
        def __init__(self, d):
            built["imports"] += 1
            super().__init__(d)

    monkeypatch.setattr(textscan.strings, "_Strings", Strings)
    monkeypatch.setattr(textscan.names, "_Imports", Imports)
    gate = text_gate(rule.anchors for rule in lint_rules().values())
    assert not gate.keeps(bytes(source))  # no rule can fire: a table of dtypes is no conversion
    # Once for the module's text, at most once more for its normalised view.
    assert built["strings"] <= 2 and built["imports"] <= 2, built
