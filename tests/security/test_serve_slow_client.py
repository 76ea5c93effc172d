"""`clearance serve` against a client that trickles its request: nobody else waits on it.

A client sending one byte every few seconds used to hold the single-threaded server (each
byte renewed the socket deadline), so a normal request waited for it. Each connection now has
its own thread and one deadline for the whole connection.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from clearance import RunLedger
from clearance._view import serve

sys.path.insert(0, str(Path(__file__).parents[1] / "view"))
from serving import serving


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.setattr(serve, "REQUEST_TIMEOUT_S", 2.0)
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger, serving(ledger) as running:
        yield running


def trickle(port: int, stop: threading.Event) -> socket.socket:
    """A connection sending a request's first line one byte every 0.3 s, in the background."""
    slow = socket.create_connection(("127.0.0.1", port))

    def drip() -> None:
        for byte in b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 1000:
            if stop.is_set():
                return
            try:
                slow.send(bytes([byte]))
            except OSError:
                return
            time.sleep(0.3)

    threading.Thread(target=drip, daemon=True).start()
    return slow


def test_a_trickling_client_does_not_hold_up_a_normal_request(server) -> None:
    stop = threading.Event()
    slow = trickle(server.port, stop)
    try:
        time.sleep(0.5)  # the slow connection is being served
        started = time.monotonic()
        with urllib.request.urlopen(server.url, timeout=10) as response:
            assert response.status == 200
        assert time.monotonic() - started < 1.5
    finally:
        stop.set()
        slow.close()


def test_a_trickling_client_is_cut_off_at_the_connection_deadline(server) -> None:
    stop = threading.Event()
    slow = trickle(server.port, stop)
    slow.settimeout(10)
    started = time.monotonic()
    try:
        while slow.recv(4096):  # until the server ends the connection
            pass
    except OSError:
        pass
    finally:
        stop.set()
        slow.close()
    assert time.monotonic() - started < 4  # the 2 s deadline, not 1000 bytes x 0.3 s


def test_a_client_that_went_away_prints_no_traceback(server, capsys) -> None:
    """A broken pipe or a reset connection is the client's doing, not a server error."""
    for gone in (BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "reset")):
        try:
            raise gone
        except OSError:
            server.handle_error(None, ("127.0.0.1", 1))
    assert capsys.readouterr().err == ""
    try:
        raise ValueError("a bug in a handler")
    except ValueError:
        server.handle_error(None, ("127.0.0.1", 1))
    assert "ValueError: a bug in a handler" in capsys.readouterr().err
