"""Serving a ledger's run pages in a thread, and fetching from it, for the view tests."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from clearance import RunLedger
from clearance._view.serve import RunServer, make_server


def fetch(url: str, host: str | None = None) -> tuple[int, dict[str, str], str]:
    """``(status, headers, body)`` of a GET (an HTTP error's too), ``Host`` as given."""
    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


@contextmanager
def serving(ledger: RunLedger) -> Iterator[RunServer]:
    """`make_server` on any free port, serving in a thread until the block ends."""
    server = make_server(ledger, 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
