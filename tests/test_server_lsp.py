"""``ampdoctor server`` end to end: a real client (pytest-lsp) starts it as a subprocess and talks
the Language Server Protocol to it over stdio."""

from __future__ import annotations

import asyncio
import sys

import pytest

pytest.importorskip("pygls")
pytest_lsp = pytest.importorskip("pytest_lsp")

from lsprotocol import types  # noqa: E402
from pygls.protocol import default_converter  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient  # noqa: E402
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features  # noqa: E402
from samples import CLIP_BEFORE_UNSCALE as BAD  # noqa: E402
from samples import UNSCALE_THEN_CLIP as GOOD  # noqa: E402

from ampdoctor.api import lint_source  # noqa: E402

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

PUBLISH = types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS

# A call made inside autocast to a function that runs the backward: AMP101 at the call, with the
# backward and the autocast region as related locations.
CROSS_FUNCTION = """\
import torch


def run_backward(loss, scaler):
    scaler.scale(loss).backward()


def train(model, x, scaler):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x)
        run_backward(loss, scaler)
"""


def recording_client() -> LanguageClient:
    """pytest-lsp's client, also keeping every publishDiagnostics in order (``client.published``)."""
    client = LanguageClient(converter_factory=default_converter)
    published: list[types.PublishDiagnosticsParams] = []

    def publish(client: LanguageClient, params: types.PublishDiagnosticsParams) -> None:
        published.append(params)
        client.diagnostics[params.uri] = params.diagnostics

    register_lsp_features(client, {**DEFAULT_CLIENT_FEATURES, PUBLISH: publish})
    client.published = published  # type: ignore[attr-defined]
    return client


CAPABILITIES = types.ClientCapabilities(
    workspace=types.WorkspaceClientCapabilities(
        workspace_edit=types.WorkspaceEditClientCapabilities(document_changes=True)
    ),
    text_document=types.TextDocumentClientCapabilities(
        hover=types.HoverClientCapabilities(content_format=[types.MarkupKind.Markdown]),
    ),
)


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=[sys.executable, "-m", "ampdoctor", "server"], client_factory=recording_client
    )
)
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(types.InitializeParams(capabilities=CAPABILITIES))
    yield
    await lsp_client.shutdown_session()


async def published(
    client: LanguageClient, uri: str, version: int | None, timeout: float = 20.0
) -> list[types.Diagnostic]:
    """The diagnostics published for ``uri`` at ``version`` (waiting for them)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        for params in reversed(client.published):  # type: ignore[attr-defined]
            if params.uri == uri and params.version == version:
                return list(params.diagnostics)
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"no diagnostics for {uri} version {version}: {client.published}")  # type: ignore[attr-defined]
        await asyncio.sleep(0.02)


def open_document(client: LanguageClient, uri: str, text: str, version: int = 1) -> None:
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)
        )
    )


def change_document(client: LanguageClient, uri: str, version: int, text: str) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


def apply_edits(text: str, edits: list[types.TextEdit]) -> str:
    """Apply text edits whose columns count UTF-16 code units, as an editor does."""
    lines = text.splitlines(keepends=True) + [""]

    def offset(position: types.Position) -> int:
        line = lines[position.line]
        units = line.encode("utf-16-le")[: 2 * position.character].decode("utf-16-le")
        return sum(len(previous) for previous in lines[: position.line]) + len(units)

    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[: offset(edit.range.start)] + edit.new_text + text[offset(edit.range.end) :]
    return text


def only_edits(action: types.CodeAction, uri: str, version: int) -> list[types.TextEdit]:
    assert action.edit is not None and action.edit.document_changes is not None
    (change,) = action.edit.document_changes
    assert isinstance(change, types.TextDocumentEdit)
    assert (change.text_document.uri, change.text_document.version) == (uri, version)
    return [edit for edit in change.edits if isinstance(edit, types.TextEdit)]


async def test_diagnostics_after_open(client: LanguageClient, tmp_path):
    uri = (tmp_path / "train.py").as_uri()
    open_document(client, uri, BAD)
    (found,) = await published(client, uri, 1)
    line = BAD.splitlines().index("    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)")
    assert found.code == "AMP201"
    assert found.source == "ampdoctor"
    assert found.severity == types.DiagnosticSeverity.Error
    assert found.code_description is None  # the rules have no web pages
    assert (found.range.start.line, found.range.start.character) == (line, 4)
    assert (found.range.end.line, found.range.end.character) == (line, len(BAD.splitlines()[line]))
    assert "loss scale" in found.message


async def test_no_diagnostics_for_the_good_example(client: LanguageClient, tmp_path):
    uri = (tmp_path / "train.py").as_uri()
    open_document(client, uri, GOOD)
    assert await published(client, uri, 1) == []


async def test_the_finding_goes_when_the_text_is_fixed(client: LanguageClient, tmp_path):
    uri = (tmp_path / "train.py").as_uri()
    open_document(client, uri, BAD)
    assert [d.code for d in await published(client, uri, 1)] == ["AMP201"]
    change_document(client, uri, 2, GOOD)
    assert await published(client, uri, 2) == []
    change_document(client, uri, 3, BAD)  # and comes back when the mistake does
    assert [d.code for d in await published(client, uri, 3)] == ["AMP201"]


async def test_rapid_changes_publish_only_the_latest_version(client: LanguageClient, tmp_path):
    uri = (tmp_path / "train.py").as_uri()
    open_document(client, uri, GOOD)
    await published(client, uri, 1)
    for version in range(2, 12):  # faster than the server's wait after a change
        change_document(client, uri, version, BAD if version % 2 else GOOD)
    assert [d.code for d in await published(client, uri, 11)] == ["AMP201"]
    versions = [p.version for p in client.published if p.uri == uri]  # type: ignore[attr-defined]
    assert versions == sorted(versions)  # never an older version after a newer one
    assert len(versions) < 11  # the burst was linted once, not once per keystroke


async def test_safe_fix_and_noqa_code_actions(client: LanguageClient, tmp_path):
    uri = (tmp_path / "train.py").as_uri()
    open_document(client, uri, BAD)
    (found,) = await published(client, uri, 1)
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=found.range,
            context=types.CodeActionContext(diagnostics=[found]),
        )
    )
    assert actions is not None
    fix, noqa = (a for a in actions if isinstance(a, types.CodeAction))
    assert fix.kind == noqa.kind == types.CodeActionKind.QuickFix
    assert "unscale_" in fix.title and fix.is_preferred
    assert apply_edits(BAD, only_edits(fix, uri, 1)) == GOOD
    assert noqa.title == "Suppress AMP201 with `# noqa: AMP201`"
    suppressed = apply_edits(BAD, only_edits(noqa, uri, 1))
    assert "clip_grad_norm_(model.parameters(), 1.0)  # noqa: AMP201\n" in suppressed
    assert lint_source(BAD) and not lint_source(suppressed)
    change_document(client, uri, 2, suppressed)
    assert await published(client, uri, 2) == []


async def test_hover_on_a_diagnostic_and_on_a_noqa_code(client: LanguageClient, tmp_path):
    uri = (tmp_path / "train.py").as_uri()
    text = BAD + "x = 1  # noqa: AMP101\n"
    open_document(client, uri, text)
    (found,) = await published(client, uri, 1)
    answer = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=found.range.start)
    )
    assert answer is not None and isinstance(answer.contents, types.MarkupContent)
    assert "**AMP201** `clip-before-unscale` (error, fixable)" in answer.contents.value
    assert "still multiplied by the loss scale" in answer.contents.value  # the catalog's summary
    last = len(text.splitlines()) - 1
    answer = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=last, character=text.splitlines()[last].index("AMP101") + 3),
        )
    )
    assert answer is not None and isinstance(answer.contents, types.MarkupContent)
    assert "**AMP101** `backward-in-autocast`" in answer.contents.value
    nothing = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=0, character=0)
        )
    )
    assert nothing is None


async def test_columns_after_non_ascii_text_are_utf16_units(client: LanguageClient, tmp_path):
    uri = (tmp_path / "train.py").as_uri()
    text = 'import torch\nnote = "é𝄞"; scaler = torch.cuda.amp.GradScaler()\n'
    open_document(client, uri, text)
    (found,) = await published(client, uri, 1)
    line = text.splitlines()[1]
    index = line.index("torch.cuda")  # 21 characters before it, 22 UTF-16 units (𝄞 takes two)
    assert found.code == "AMP401"
    assert (found.range.start.line, found.range.start.character) == (1, index + 1)
    assert found.range.end.character == line.index("(") + 1
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=found.range,
            context=types.CodeActionContext(diagnostics=[found]),
        )
    )
    assert actions is not None
    fix = next(a for a in actions if isinstance(a, types.CodeAction) and a.is_preferred)
    fixed = apply_edits(text, only_edits(fix, uri, 1))
    assert fixed == 'import torch\nnote = "é𝄞"; scaler = torch.amp.GradScaler("cuda")\n'


async def test_related_locations_point_into_the_document(client: LanguageClient, tmp_path):
    uri = (tmp_path / "train.py").as_uri()
    open_document(client, uri, CROSS_FUNCTION)
    (found,) = await published(client, uri, 1)
    assert found.code == "AMP101"
    related = found.related_information or []
    backward = CROSS_FUNCTION.splitlines().index("    scaler.scale(loss).backward()")
    assert any(r.location.uri == uri and r.location.range.start.line == backward for r in related)
    assert all(r.message for r in related)


async def test_closing_clears_the_diagnostics(client: LanguageClient, tmp_path):
    uri = (tmp_path / "train.py").as_uri()
    open_document(client, uri, BAD)
    await published(client, uri, 1)
    client.text_document_did_close(
        types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    assert await published(client, uri, None) == []  # a close has no version
