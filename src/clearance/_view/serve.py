"""Serving the run pages of one ledger on the loopback interface (standard library HTTP).

``GET /`` lists the runs (`render_index`, with verdicts from a `VerdictCache`);
``GET /run/<run id>`` is that run's page (`render_run_page`); ``GET /run/<run id>/state?since=N``
is what the page of a run still going polls about once a second: ``304 Not Modified`` while
the run's last chain position (`RunLedger.chain_heads`) is still ``N``, else
``{"run_id", "seq", "status", "live"}`` as JSON (``status`` as recorded), after which the page
fetches itself again and replaces what changed. A run recorded running whose process is gone
(`shown_status`) is not live: a poll answers its state, not ``304``, though nothing new was
recorded, and its page (shown ``running (process gone)``) then polls about every 15 seconds
with ``gone=1`` (``304`` while it is still gone at ``N``), so a resume shows on a page left
open. A poll is two indexed
reads; nothing is verified for it. Pages are kept by run, chain position and shown status, so
several tabs on one run render it once per change. The
server listens on 127.0.0.1 only, serves each connection on its own thread under one deadline
for the whole connection (a client trickling its request a byte at a time holds nobody else
up, and is cut off when the deadline passes), at most ``MAX_CONNECTIONS`` at once (one more
is answered ``503`` and closed, so a client opening thousands costs no thread each), renders
one page at a time (a request whose deadline passes while it waits renders nothing), keeps
at most `PAGES_KEPT` pages (`PAGES_KEPT_CHARS` together), and refuses any ``Host`` other
than the loopback name and port it serves (two ``Host`` headers: ``400``), so a web page the
user visits cannot reach it through DNS rebinding. A request a browser makes for another
site's page (``Sec-Fetch-Site: cross-site`` or ``same-site``), but a top-level navigation,
is ``403`` before the ledger is read: such a page could not read the answer, but could keep
the server verifying runs. A record of the ledger that cannot be read is a one-line ``500``,
never a dropped connection; in the list of runs, a run whose own row cannot be read
(`RunLedger.run_listing`) is named in one line instead, below the runs that can, as
``clearance runs`` does. Pages carry the same Content-Security-Policy as a header as they
do in their ``<meta>`` tag.
"""

from __future__ import annotations

import contextlib
import html
import json
import re
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote

from markupsafe import escape

from clearance._core.errors import ClearanceError, ConfigError, MalformedRecord, StoreError
from clearance._orchestration.resume import process_gone, shown_status
from clearance._state.ledger import RunLedger
from clearance._view.model import load_run_view
from clearance._view.page import render_index, render_run_page
from clearance._view.runs import VerdictCache

__all__ = ["HOST", "RunServer", "make_server"]

HOST = "127.0.0.1"
"""The only interface the server listens on."""

REQUEST_TIMEOUT_S = 10.0
"""Deadline of one connection, from its start to its last byte (each socket operation too)."""

MAX_RUNS_LISTED = 500
"""Most runs the list shows (newest first)."""

PAGES_KEPT = 8
"""Most rendered run pages kept (by run id, with the chain position they show)."""

PAGES_KEPT_CHARS = 64_000_000
"""Most characters of rendered pages kept, all together: a page over it is never kept."""

MAX_CONNECTIONS = 64
"""Most connections served at once (each holds a thread until its deadline); one more is
answered ``503`` at once and closed."""

_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: 36\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
    b"too many connections; try it again.\n"
)

_REASON_CHARS = 300  # of a failure's text on an error page
_CROSS_SITE = "refused: a request another site's page made (open this address yourself)"
_STATE_PATH = re.compile(r"/run/([^/]+)/state")
_JSON_POLICY = "default-src 'none'"
_CSP = re.compile(r'http-equiv="Content-Security-Policy" content="([^"]*)"')


class RunServer(ThreadingHTTPServer):
    """An HTTP server holding the ledger it serves pages from; one thread per connection."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, ledger: RunLedger, port: int) -> None:
        self.ledger = ledger
        self.lock = threading.Lock()  # one page rendered from the ledger at a time
        self.verdicts = VerdictCache()  # under the lock
        # run id -> ((seq, shown status), page), under the lock
        self.pages: dict[str, tuple[tuple[int, str], str]] = {}
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)  # one per connection served
        super().__init__((HOST, port), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection on a thread of its own, or answer ``503`` when all are taken."""
        if not self.slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.setblocking(False)  # the answer fits the socket's buffer; never wait
                request.send(_BUSY)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()  # no thread was started to release it
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """Serve one connection (on its thread), then free its slot."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that went away (or was cut off at its deadline) is not an error to print."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]

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
        self._head = False  # answering a HEAD request: headers only
        super().setup()
        self._ends = time.monotonic() + REQUEST_TIMEOUT_S
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

    def do_HEAD(self) -> None:
        """``GET``'s status and headers without the body (RFC 9110, section 9.3.2)."""
        self._head = True
        self.do_GET()

    def do_GET(self) -> None:
        allowed = {f"{HOST}:{self.server.port}", f"localhost:{self.server.port}"}
        hosts = self.headers.get_all("Host") or []
        if len(hosts) > 1:  # RFC 9112, section 3.2: which one a proxy used is not known
            self._send(HTTPStatus.BAD_REQUEST, _message_page("more than one Host header"))
            return
        if not hosts or hosts[0] not in allowed:
            self._send(HTTPStatus.MISDIRECTED_REQUEST, _message_page("unknown host"))
            return
        if _from_another_site(self.headers):
            self._send(HTTPStatus.FORBIDDEN, _message_page(_CROSS_SITE))
            return
        path, _, query = self.path.split("#", 1)[0].partition("?")
        state = _STATE_PATH.fullmatch(path)
        if state is not None:
            if not self._lock():
                return
            try:
                status, answer = self._state(unquote(state[1]), query)
            finally:
                self.server.lock.release()
            self._send_json(status, answer)
            return
        if not self._lock():
            return
        try:  # sent after the lock is released: a slow reader holds no one
            status, page = self._page(path)
        finally:
            self.server.lock.release()
        self._send(status, page)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """An error the standard library answers itself: one line, with every answer's headers.

        A method other than GET or HEAD, a malformed request, a request line or headers too
        long: its own page went without ``X-Content-Type-Options``, a policy or
        ``frame-ancestors``.
        """
        self.close_connection = True
        status = HTTPStatus(code)
        self._send(status, _message_page(_one_line(message or status.phrase)))

    def _lock(self) -> bool:
        """Take the server's lock before the connection's deadline, or say it passed.

        A request that waited for other pages past its deadline has been cut off: rendering
        its page (and a page too large to keep is rendered each time) would hold everyone
        else for nobody.
        """
        remaining = self._ends - time.monotonic()
        return remaining > 0 and self.server.lock.acquire(timeout=remaining)

    def _page(self, path: str) -> tuple[HTTPStatus, str]:
        ledger = self.server.ledger
        try:
            if path == "/":
                listed = ledger.run_listing(limit=MAX_RUNS_LISTED)
                runs = [r for r in listed if not isinstance(r, MalformedRecord)]
                broken = [_one_line(r) for r in listed if isinstance(r, MalformedRecord)]
                rows = self.server.verdicts.rows(ledger, runs)
                return HTTPStatus.OK, render_index(rows, broken=broken)
            if path.startswith("/run/") and len(path) > len("/run/"):
                return HTTPStatus.OK, self._run_page(unquote(path.removeprefix("/run/")))
            return HTTPStatus.NOT_FOUND, _message_page("no such page")
        except MalformedRecord as exc:  # a forged record: one line on the page
            return HTTPStatus.INTERNAL_SERVER_ERROR, _message_page(_malformed(exc))
        except StoreError as exc:
            return HTTPStatus.NOT_FOUND, _message_page(str(exc))
        except ClearanceError as exc:
            return HTTPStatus.INTERNAL_SERVER_ERROR, _message_page(str(exc))
        except Exception as exc:  # a forged record: one line on the page, nothing dropped
            return HTTPStatus.INTERNAL_SERVER_ERROR, _message_page(_malformed(exc))

    def _run_page(self, run_id: str) -> str:
        ledger, pages = self.server.ledger, self.server.pages
        record = ledger.get_run(run_id)  # a prefix names one run, or raises
        full_id = record.run_id
        kept = pages.get(full_id)
        # Kept by status too: a killed run's chain head stays where it was, its status not.
        head = ledger.chain_heads([full_id]).get(full_id, 0)
        if kept is not None and kept[0] == (head, shown_status(record, now=ledger.server_time())):
            return kept[1]
        view = load_run_view(ledger, full_id)
        self.server.verdicts.remember(view)
        live_url = f"/run/{quote(full_id, safe='')}/state"
        page = render_run_page(view, runs_link="/", live_url=live_url)
        pages.pop(full_id, None)
        if len(page) <= PAGES_KEPT_CHARS:  # a huge record makes a huge page: rendered anew
            pages[full_id] = ((view.seq, view.status), page)
        while len(pages) > PAGES_KEPT or _kept_chars(pages) > PAGES_KEPT_CHARS:
            del pages[next(iter(pages))]
        return page

    def _state(self, run_id: str, query: str) -> tuple[HTTPStatus, dict[str, object] | None]:
        """``304`` (``None``) while the run's head is still ``since`` and it is as gone as asked.

        ``gone=1``: the asking page shows the run's process gone (it polls slowly, to pick up
        a resume), and is answered ``304`` while that still holds; without it, ``304`` only
        while the run is not gone.
        """
        fields = parse_qs(query, keep_blank_values=True)
        values, marks = fields.get("since", []), fields.get("gone", [])
        if marks not in ([], ["1"]):
            return HTTPStatus.BAD_REQUEST, {"error": "gone must be 1, once, or not given"}
        since: int | None = None
        if values:
            given = values[0]
            # At most 18 digits: a chain position fits, and int() never meets a huge string.
            if len(values) > 1 or not given.isdigit() or not given.isascii() or len(given) > 18:
                return HTTPStatus.BAD_REQUEST, {
                    "error": "since must be one whole number >= 0 (a chain position)"
                }
            since = int(values[0])
        ledger = self.server.ledger
        try:
            run = ledger.get_run(run_id)
            seq = ledger.chain_heads([run.run_id]).get(run.run_id, 0)
            gone = process_gone(run, now=ledger.server_time())
        except MalformedRecord as exc:
            return HTTPStatus.INTERNAL_SERVER_ERROR, {"error": _malformed(exc)}
        except StoreError as exc:
            return HTTPStatus.NOT_FOUND, {"error": str(exc)}
        except ClearanceError as exc:
            return HTTPStatus.INTERNAL_SERVER_ERROR, {"error": str(exc)}
        except Exception as exc:  # a forged record
            return HTTPStatus.INTERNAL_SERVER_ERROR, {"error": _malformed(exc)}
        # A killed run records nothing more: a page showing it going is told, not 304; a
        # page showing it gone is told once it is resumed (a live process again).
        if since == seq and gone == bool(marks):
            return HTTPStatus.NOT_MODIFIED, None
        live = run.finished_at is None and not gone
        return HTTPStatus.OK, {
            "run_id": run.run_id, "seq": seq, "status": run.status, "live": live
        }  # fmt: skip

    def _send_json(self, status: HTTPStatus, answer: dict[str, object] | None) -> None:
        body = b"" if answer is None else json.dumps(answer).encode("utf-8")
        self._send_body(status, body, "application/json", _JSON_POLICY)

    def _send(self, status: HTTPStatus, page: str) -> None:
        match = _CSP.search(page)
        policy = html.unescape(match[1]) if match else "default-src 'none'"
        self._send_body(status, page.encode("utf-8"), "text/html; charset=utf-8", policy)

    def _send_body(self, status: HTTPStatus, body: bytes, content_type: str, policy: str) -> None:
        self.send_response(status)
        if status != HTTPStatus.NOT_MODIFIED:  # a 304 has no body, so no type or length
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Content-Security-Policy", f"{policy}; frame-ancestors 'none'")
        self.end_headers()
        if status != HTTPStatus.NOT_MODIFIED and not self._head:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the command prints its own address, not a line per request."""


def _kept_chars(pages: dict[str, tuple[tuple[int, str], str]]) -> int:
    return sum(len(page) for _, page in pages.values())


def _from_another_site(headers: Any) -> bool:
    """Whether a browser sent the request for a page of another site, not as a navigation.

    ``Sec-Fetch-Site`` (Fetch Metadata) names where a browser's request comes from: another
    site's ``<img>``, ``<script>``, ``fetch`` or frame asking for a page would make the server
    verify runs for nobody to see. A top-level navigation (a link the user followed from
    elsewhere) is served; a request without the header (not a browser, or an older one) too.
    """
    if headers.get("Sec-Fetch-Site", "").strip().lower() not in ("cross-site", "same-site"):
        return False
    navigation = headers.get("Sec-Fetch-Mode", "").strip().lower() == "navigate"
    return not (navigation and headers.get("Sec-Fetch-Dest", "").strip().lower() == "document")


def _malformed(exc: Exception) -> str:
    """One line for a record the ledger never writes (`MalformedRecord`, or another failure)."""
    text = str(exc) if isinstance(exc, MalformedRecord) else f"{type(exc).__name__}: {exc}"
    return f"the ledger holds a malformed record ({_one_line(text)})"


def _one_line(problem: object) -> str:
    """``problem``'s text on one line (any run of whitespace one space), cut to a bound."""
    return " ".join(str(problem).split())[:_REASON_CHARS]


def _message_page(message: str) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'">'
        f"<title>clearance</title></head><body><p>{escape(message)}</p>"
        '<p><a href="/">all runs</a></p></body></html>'
    )
