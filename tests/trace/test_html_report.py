"""``ampdoctor trace --html``: a self-contained page, escaped, and loaded in headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ampdoctor.trace.trace_cli import trace_command

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "trace"

# Each test traces a script and writes its page, or renders one in a browser.
pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)

HOSTILE_SCRIPT = """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(4, 4)

    def forward(self, x):
        return self.inner(x)


model = nn.Sequential()
model.add_module("<script>alert(1)</script>", Block())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
for _ in range(3):
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(torch.randn(8, 4)).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""


def _trace_html(tmp_path: Path, script: Path, *extra: str) -> str:
    page = tmp_path / "report.html"
    result = CliRunner().invoke(
        trace_command,
        [str(script), "--html", str(page), "--fail-on", "never", "--no-progress", *extra],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.stderr
    return page.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def hostile_page(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("hostile")
    script = folder / "train.py"
    script.write_text(HOSTILE_SCRIPT)
    return _trace_html(folder, script, "--what-if", "float16")


def test_names_from_the_program_are_escaped(hostile_page):
    assert "<script" not in hostile_page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in hostile_page


def test_the_page_is_self_contained(hostile_page):
    # No reference to anything outside the page: no links, sources, imports or URLs to fetch
    # (the SVG charts refer only to their own elements, by fragment: href="#id", url(#id)).
    assert not re.search(r"<(link|script|img|iframe|object|embed)\b", hostile_page, re.I)
    assert not re.search(r"\b(src|href)\s*=\s*[\"'](?!#)", hostile_page, re.I)
    assert "@import" not in hostile_page and not re.search(r"url\((?!#)", hostile_page)
    assert not re.search(r"https?://(?!www\.w3\.org/)", hostile_page)  # SVG namespaces only


def test_the_page_has_the_sections_and_charts(hostile_page):
    for section in ('id="verdict"', 'id="what-if"', 'id="findings"', 'id="timeline"', 'id="gradients"', 'id="census"'):
        assert section in hostile_page
    assert hostile_page.count("<svg") == 2
    assert "What if float16?" in hostile_page
    # The census rows are coloured by dtype: float16 autocast ops in the module with the odd name.
    census = hostile_page[hostile_page.index('id="census"') :]
    row = census[census.index("&lt;script&gt;alert(1)&lt;/script&gt;.inner") :].split("</tr>")[0]
    assert "background:#fef3c7" in row and "float16" in row


def test_without_what_if_the_page_has_no_what_if_section(tmp_path):
    page = _trace_html(tmp_path, FIXTURES / "healthy_bf16.py", "--steps", "3")
    assert 'id="what-if"' not in page and "<svg" in page
    assert "bfloat16" in page  # the census table


def test_a_missing_folder_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(
        trace_command, [str(FIXTURES / "healthy_bf16.py"), "--html", str(tmp_path / "nope" / "r.html")]
    )
    assert result.exit_code == 2
    assert "--html" in result.stderr


@pytest.mark.slow
def test_matplotlib_is_not_imported_without_html(tmp_path):
    code = (
        "import sys; from click.testing import CliRunner; from ampdoctor.trace.trace_cli import trace_command;"
        f"CliRunner().invoke(trace_command, [{str(FIXTURES / 'healthy_bf16.py')!r}, '--steps', '2', '--no-progress']);"
        "print('matplotlib' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.stdout.strip().splitlines()[-1] == "False"


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def _console_messages(run: subprocess.CompletedProcess) -> list[str]:
    """What the page wrote to the console, uncaught errors included (the page has no script, so
    it should write nothing)."""
    return [line for line in run.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed")
def test_the_console_check_sees_a_script_error(tmp_path):
    page = tmp_path / "bad.html"
    page.write_text("<html><body><script>missingFunction();</script></body></html>")
    messages = _console_messages(_chromium(tmp_path, "--dump-dom", page.as_uri()))
    assert any("Uncaught ReferenceError" in line for line in messages)


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed")
def test_chromium_renders_the_page_with_its_charts_and_no_script_errors(tmp_path, hostile_page):
    page = tmp_path / "report.html"
    page.write_text(hostile_page, encoding="utf-8")
    dom = _chromium(tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    # The DOM as the browser built it: the charts are <svg> elements inside the chart sections,
    # and the hostile module name stayed text.
    assert len(re.findall(r'<div class="chart"><svg\b', dom.stdout)) == 2
    assert "<script" not in dom.stdout.lower()
    assert _console_messages(dom) == []
    shot = tmp_path / "page.png"
    taken = _chromium(tmp_path, "--window-size=1100,1600", f"--screenshot={shot}", page.as_uri())
    assert taken.returncode == 0, taken.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_paths_inside_the_current_folder_are_shown_relative(tmp_path, monkeypatch):
    # A page made in a project shows the project's paths as lint does, not the author's folders.
    project = tmp_path / "project"
    project.mkdir()
    script = project / "train.py"
    script.write_text(
        (Path(__file__).resolve().parents[2] / "fixtures" / "trace" / "underflow_gradients.py").read_text()
    )
    monkeypatch.chdir(project)
    page = _trace_html(tmp_path, Path("train.py"), "--steps", "3")
    assert "<code>train.py</code>" in page and "train.py:23" in page
    assert str(project) not in page


ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "example-report.html"


def _words(page: str) -> str:
    """The page's text and markup without its charts (matplotlib's SVG ids change every run) and
    with every number masked: what the tool says, not the float16 arithmetic of the CPU."""
    page = re.sub(r"<svg\b.*?</svg>", "<svg/>", page, flags=re.S)
    return re.sub(r"\d+(\.\d+)?(e[+-]?\d+)?", "#", page)


def test_the_example_page_is_what_the_tool_writes_today(tmp_path, monkeypatch):
    """docs/example-report.html, linked from the README and docs/trace.md, is regenerated by its
    command there: its findings, rule explanations and what-if wording are the current ones."""
    monkeypatch.chdir(ROOT)
    page = _trace_html(tmp_path, Path("fixtures/trace/underflow_gradients.py"), "--steps", "40", "--what-if", "float16")
    for doc in ("README.md", "docs/trace.md"):
        assert "fixtures/trace/underflow_gradients.py --steps 40 --what-if float16 --html" in (ROOT / doc).read_text()
    assert _words(EXAMPLE.read_text(encoding="utf-8")) == _words(page)


LONG_NAMES_SCRIPT = """
import sys

import torch
from torch import nn

dtype = torch.float16 if sys.argv[1] == "float16" else torch.bfloat16
model = nn.Sequential()
model.add_module("encoder_stack_with_a_rather_long_name", nn.ModuleDict({
    "cross_attention_projection_for_the_decoder_layers": nn.Linear(8, 8),
    "feed_forward_expansion_block_number_one": nn.Linear(8, 8),
}))
layers = model.encoder_stack_with_a_rather_long_name
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", enabled=dtype == torch.float16)
for step in range(6):
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=dtype):
        x = torch.randn(16, 8)
        out = layers["feed_forward_expansion_block_number_one"](layers["cross_attention_projection_for_the_decoder_layers"](x))
        loss = out.float().pow(2).mean() * 1e-10
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""

# Reports, into the page, every pair of text elements in one chart whose boxes intersect.
OVERLAP_PROBE = """
<script>
const found = [];
document.querySelectorAll("svg").forEach((svg, chart) => {
  const boxes = [...svg.querySelectorAll("text")].filter(t => t.textContent.trim())
    .map(t => [t.textContent.trim(), t.getBoundingClientRect()]);
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const [a, p] = boxes[i], [b, q] = boxes[j];
    const w = Math.min(p.right, q.right) - Math.max(p.left, q.left);
    const h = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
    if (w > 1 && h > 1) found.push(chart + ": " + a + " / " + b);
  }
});
const out = document.createElement("pre");
out.id = "overlaps";
out.textContent = JSON.stringify({charts: document.querySelectorAll("svg").length, overlaps: found});
document.body.appendChild(out);
</script>
"""


def _boxes_in_chromium(tmp_path: Path, html_text: str) -> dict:
    import json

    probe = tmp_path / "probe.html"
    probe.write_text(html_text.replace("</body>", OVERLAP_PROBE + "</body>"), encoding="utf-8")
    dom = _chromium(tmp_path, "--window-size=1100,1600", "--dump-dom", probe.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="overlaps">(.*?)</pre>', dom.stdout, flags=re.S)
    assert found, dom.stdout[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_chart_titles_labels_and_long_names_do_not_overlap_in_chromium(tmp_path, dtype):
    script = tmp_path / "long_names.py"
    script.write_text(LONG_NAMES_SCRIPT)
    page = _trace_html(tmp_path, script, "--", dtype)
    if dtype == "float16":
        assert "Gradient underflow" in page and "feed_forward_expansion_block_number_one" in page
    else:  # bfloat16 without a scaler: float16's range does not apply, as in the terminal
        assert "Gradient underflow" not in page and 'id="gradients"' not in page
    assert "10^" not in page and "10<sup>" not in page  # plain numbers on the loss axis
    boxes = _boxes_in_chromium(tmp_path, page)
    assert boxes["charts"] == (2 if dtype == "float16" else 1)
    assert boxes["overlaps"] == []


def test_the_page_of_a_run_that_never_stepped_concludes_nothing(tmp_path):
    page = tmp_path / "report.html"
    script = Path(__file__).resolve().parent / "scripts" / "dies_before_stepping.py"
    result = CliRunner().invoke(
        trace_command, [str(script), "--html", str(page), "--no-progress"], catch_exceptions=False
    )
    assert result.exit_code == 1
    text = page.read_text(encoding="utf-8")
    assert "before its first optimizer step" in text and "No mixed-precision problems" not in text


TWENTY_STEPS = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(8, 8)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(20):
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(torch.randn(4, 8)).float().pow(2).mean()
    loss.backward()
    optimizer.step()
"""


def test_a_bfloat16_run_without_a_scaler_draws_the_loss_alone_with_whole_iterations(tmp_path):
    script = tmp_path / "twenty.py"
    script.write_text(TWENTY_STEPS)
    page = _trace_html(tmp_path, script)
    timeline = page.split('<section id="timeline">')[1].split("</section>")[0]
    assert "<h2>Loss</h2>" in timeline and "Loss scale" not in timeline and "no GradScaler" not in timeline
    # Tick labels are whole iterations (matplotlib writes each label as text in the SVG).
    labels = [re.search(r"<text[^>]*>([^<]*)</text>", part).group(1) for part in timeline.split('id="xtick_')[1:]]
    assert labels and all(re.fullmatch(r"\d+", label) for label in labels), labels
    legend = page.split('<p class="legend">')[1].split("</p>")[0]
    assert ">bfloat16<" in legend and ">float16<" not in legend  # chips for the dtypes shown only
