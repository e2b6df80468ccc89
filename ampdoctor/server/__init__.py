"""``ampdoctor server``: a Language Server over stdio that lints the editor's text as it changes.

It publishes ampdoctor's findings as diagnostics, offers each safe fix and a ``# noqa`` comment
as quick fixes, and shows a rule's summary on hover. It needs pygls (the ``server`` extra); the
rest of ampdoctor never imports it.
"""

from __future__ import annotations

INSTALL_HINT = "the language server needs pygls, which is not installed: install ampdoctor[server]"


class ServerUnavailable(Exception):
    """pygls (or lsprotocol) cannot be imported; the message says what to install."""


def serve() -> None:
    """Run the language server on stdin and stdout until the client ends it."""
    try:
        import lsprotocol.types  # noqa: F401
        import pygls.lsp.server  # noqa: F401
    except ImportError:
        raise ServerUnavailable(INSTALL_HINT) from None
    from .app import create_server

    create_server().start_io()
