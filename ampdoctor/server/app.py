"""The language server: pygls wiring of the lint, the diagnostics, the code actions and hovers.

``ampdoctor server`` runs ``create_server().start_io()``: JSON-RPC over stdin and stdout (nothing
else may write to stdout). The editor's unsaved text is what is linted (``documents.py`` says how,
``scheduler.py`` when); the last result of each document is kept for its code actions and hovers,
which answer only while the text is the one that was linted.
"""

from __future__ import annotations

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from .._version import __version__
from ..findings import Finding
from .convert import Document, code_actions, diagnostic, finding_range, hover
from .documents import UNTITLED, Configurations, Outcome, is_python, lint_text
from .noqa import code_at
from .positions import UTF16, Converter, char_index
from .scheduler import CHANGE_DELAY, Request, Scheduler


class AmpdoctorServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            name="ampdoctor", version=__version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental
        )
        self.configurations = Configurations()
        self.scheduler = Scheduler(self._lint, self._publish, self._failed)
        # uri -> the request last published for it and its findings.
        self.results: dict[str, tuple[Request, list[Finding]]] = {}
        self.linted: set[str] = set()
        self._config_problems: set[str] = set()

    # -- linting ----------------------------------------------------------------------------

    @property
    def encoding(self) -> str:
        chosen = self.server_capabilities.position_encoding if self.protocol.server_capabilities else None
        return str(getattr(chosen, "value", chosen) or UTF16)

    def request_for(self, uri: str) -> Request:
        document = self.workspace.get_text_document(uri)
        return Request(uri, document.version, document.source, to_fs_path(uri))

    def _lint(self, request: Request) -> Outcome:  # in the worker thread
        return lint_text(request.text, request.path, self.configurations)

    def document(self, request: Request) -> Document:
        return Document(request.uri, request.path, request.text, self.encoding, UNTITLED)

    def _publish(self, request: Request, outcome: object) -> None:
        assert isinstance(outcome, Outcome)
        if outcome.config_error and outcome.config_error not in self._config_problems:
            self._config_problems.add(outcome.config_error)
            self.window_show_message(
                types.ShowMessageParams(
                    type=types.MessageType.Warning,
                    message=f"ampdoctor: {outcome.config_error} (linting with the default configuration)",
                )
            )
        document = self.document(request)
        self.results[request.uri] = (request, outcome.findings)
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(
                uri=request.uri,
                version=request.version,
                diagnostics=[diagnostic(document, finding) for finding in outcome.findings],
            )
        )

    def _failed(self, request: Request, error: BaseException) -> None:
        self.window_log_message(
            types.LogMessageParams(
                type=types.MessageType.Error,
                message=f"ampdoctor: linting {request.uri} failed: {type(error).__name__}: {error}",
            )
        )

    def current(self, uri: str) -> tuple[Request, list[Finding]] | None:
        """The last result of a document, while its text is still the one linted."""
        result = self.results.get(uri)
        if result is None:
            return None
        if self.workspace.get_text_document(uri).source != result[0].text:
            return None
        return result

    @property
    def document_changes(self) -> bool:
        workspace = self.client_capabilities.workspace
        edit = workspace.workspace_edit if workspace is not None else None
        return bool(edit is not None and edit.document_changes)


def create_server() -> AmpdoctorServer:
    server = AmpdoctorServer()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: AmpdoctorServer, params: types.DidOpenTextDocumentParams) -> None:
        item = params.text_document
        if is_python(item.uri, item.language_id):
            ls.linted.add(item.uri)
            ls.scheduler.submit(ls.request_for(item.uri))

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: AmpdoctorServer, params: types.DidChangeTextDocumentParams) -> None:
        if params.text_document.uri in ls.linted:
            ls.scheduler.submit(ls.request_for(params.text_document.uri), CHANGE_DELAY)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: AmpdoctorServer, params: types.DidSaveTextDocumentParams) -> None:
        if params.text_document.uri in ls.linted:  # the configuration may have changed meanwhile
            ls.scheduler.submit(ls.request_for(params.text_document.uri))

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: AmpdoctorServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.scheduler.forget(uri)
        ls.results.pop(uri, None)
        if uri in ls.linted:
            ls.linted.discard(uri)
            ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]),
    )
    def code_action(ls: AmpdoctorServer, params: types.CodeActionParams) -> list[types.CodeAction] | None:
        only = params.context.only
        if only and not any(str(kind).startswith(types.CodeActionKind.QuickFix) for kind in only):
            return None
        result = ls.current(params.text_document.uri)
        if result is None:
            return None
        request, findings = result
        actions = code_actions(ls.document(request), request.version, findings, params.range, ls.document_changes)
        return actions or None

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def on_hover(ls: AmpdoctorServer, params: types.HoverParams) -> types.Hover | None:
        uri, position = params.text_document.uri, params.position
        if uri not in ls.linted:
            return None
        text = ls.workspace.get_text_document(uri).source
        line_text = Converter(text, ls.encoding).line_text(position.line + 1)
        code = code_at(line_text, char_index(line_text, position.character, ls.encoding))
        if code is not None:
            return hover([code])
        result = ls.current(uri)
        if result is None:
            return None
        document = ls.document(result[0])
        at = (position.line, position.character)
        codes, span = [], None
        for finding in result[1]:
            shown = finding_range(document, finding)
            start, end = (shown.start.line, shown.start.character), (shown.end.line, shown.end.character)
            if start <= at < end or start == at:
                codes.append(finding.code)
                span = span or shown
        return hover(codes, span) if codes else None

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: AmpdoctorServer, params: None) -> None:
        ls.scheduler.close()

    return server
