"""Serving the run pages of one ledger on the loopback interface (standard library HTTP).

``GET /`` lists the runs; ``GET /run/<run id>`` is that run's page (`render_run_page`). The
server listens on 127.0.0.1 only, serves each connection on its own thread under one deadline
for the whole connection (a client trickling its request a byte at a time holds nobody else
up, and is cut off when the deadline passes), renders one page at a time, and refuses any
``Host`` other than the loopback name and port it serves, so a web page the user
visits cannot reach it through DNS rebinding. Pages carry the same Content-Security-Policy as
a header as they do in their ``<meta>`` tag.
"""

from __future__ import annotations

import contextlib
import html
import re
import socket
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

from markupsafe import escape

from clearance._core.errors import ClearanceError, ConfigError, StoreError
from clearance._state.ledger import RunLedger
from clearance._view.model import load_run_view
from clearance._view.page import render_index, render_run_page

__all__ = ["HOST", "RunServer", "make_server"]

HOST = "127.0.0.1"
"""The only interface the server listens on."""

REQUEST_TIMEOUT_S = 10.0
"""Deadline of one connection, from its start to its last byte (each socket operation too)."""

MAX_RUNS_LISTED = 500
"""Most runs the list shows (newest first)."""

_CSP = re.compile(r'http-equiv="Content-Security-Policy" content="([^"]*)"')


class RunServer(ThreadingHTTPServer):
    """An HTTP server holding the ledger it serves pages from; one thread per connection."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, ledger: RunLedger, port: int) -> None:
        self.ledger = ledger
        self.lock = threading.Lock()  # one page rendered from the ledger at a time
        super().__init__((HOST, port), _Handler)

    @property
    def port(self) -> int:
        """The port it listens on (the one chosen by the system when asked for 0)."""
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        """The home page's address."""
        return f"http://{HOST}:{self.port}/"


def make_server(ledger: RunLedger, port: int = 0) -> RunServer:
    """A server of the ledger's run pages on ``127.0.0.1:port`` (not started yet).

    Args:
        ledger: The open ledger to read runs from; the caller closes it.
        port: The TCP port, or 0 for any free port (see `RunServer.port`).

    Returns:
        The server; call ``serve_forever()`` and, to stop, ``shutdown()`` then
        ``server_close()``.

    Raises:
        ConfigError: ``port`` is not in 0-65535.
        OSError: The port cannot be bound (for example, it is in use).
    """
    if not 0 <= port <= 65535:
        raise ConfigError(f"must be in 0-65535, got {port}", field="--port")
    return RunServer(ledger, port)


class _Handler(BaseHTTPRequestHandler):
    server: RunServer
    timeout = REQUEST_TIMEOUT_S
    server_version = "clearance"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        self._deadline = threading.Timer(REQUEST_TIMEOUT_S, self._cut_off)
        self._deadline.daemon = True
        self._deadline.start()

    def finish(self) -> None:
        self._deadline.cancel()
        super().finish()

    def _cut_off(self) -> None:
        """The connection's deadline passed: end it, whatever it is waiting for."""
        with contextlib.suppress(OSError):  # already closed
            self.connection.shutdown(socket.SHUT_RDWR)

    def do_GET(self) -> None:
        allowed = {f"{HOST}:{self.server.port}", f"localhost:{self.server.port}"}
        if self.headers.get("Host", "") not in allowed:
            self._send(HTTPStatus.MISDIRECTED_REQUEST, _message_page("unknown host"))
            return
        path = self.path.split("?", 1)[0].split("#", 1)[0]
        with self.server.lock:  # sent after the lock is released: a slow reader holds no one
            status, page = self._page(path)
        self._send(status, page)

    def _page(self, path: str) -> tuple[HTTPStatus, str]:
        ledger = self.server.ledger
        try:
            if path == "/":
                return HTTPStatus.OK, render_index(ledger.list_runs(limit=MAX_RUNS_LISTED))
            if path.startswith("/run/") and len(path) > len("/run/"):
                run_id = unquote(path.removeprefix("/run/"))
                return HTTPStatus.OK, render_run_page(load_run_view(ledger, run_id), runs_link="/")
            return HTTPStatus.NOT_FOUND, _message_page("no such page")
        except StoreError as exc:
            return HTTPStatus.NOT_FOUND, _message_page(str(exc))
        except ClearanceError as exc:
            return HTTPStatus.INTERNAL_SERVER_ERROR, _message_page(str(exc))

    def _send(self, status: HTTPStatus, page: str) -> None:
        body = page.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        match = _CSP.search(page)
        policy = html.unescape(match[1]) if match else "default-src 'none'"
        self.send_header("Content-Security-Policy", f"{policy}; frame-ancestors 'none'")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the command prints its own address, not a line per request."""


def _message_page(message: str) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'">'
        f"<title>clearance</title></head><body><p>{escape(message)}</p>"
        '<p><a href="/">all runs</a></p></body></html>'
    )
