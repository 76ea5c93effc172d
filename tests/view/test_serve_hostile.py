"""`clearance serve` on a ledger someone edited: rows of the wrong type, or not JSON at all.

The ledger's file is not trusted (anyone who can write it can put anything in a row). A row
of a type `verify` does not expect used to raise out of the request: the server dropped the
connection and printed a traceback, and since the list of runs verifies every run, one such
run took the whole list down. Now the run's verdict says it could not be checked, and its
page, or a row that cannot even be read, is a one-line ``500`` naming the malformed record
(the ledger's reads check every row's shape: `MalformedRecord`); the list names a run whose
own row cannot be read in one line and shows the others.

A client opening connection after connection gets a ``503`` past `serve.MAX_CONNECTIONS`.
The answers the standard library's server gives itself (``501``, ``414``, ``431``) carry the
same headers as every other answer (``nosniff``, the policy, ``frame-ancestors``).
"""

from __future__ import annotations

import json
import socket
import sqlite3
import sys
import time
from pathlib import Path

from clearance import RunLedger
from clearance._view import serve

sys.path.insert(0, str(Path(__file__).parent))
from serving import fetch, serving


def forge(db: str, sql: str, *values: object) -> None:
    conn = sqlite3.connect(db.removeprefix("sqlite:///"))
    conn.execute(sql, values)
    conn.commit()
    conn.close()


FORGED_MANIFEST = json.dumps({"items": [1, 2], "clearance": "x", "total_tokens": 3})


async def test_one_forged_row_does_not_take_down_the_list_of_runs(recorded, record, tmp_path):
    other = await record(tmp_path)  # a second, intact run in the same ledger
    forge(recorded.db, "UPDATE calls SET manifest = ? WHERE run_id = ?", FORGED_MANIFEST,
          recorded.run_id)  # fmt: skip
    with RunLedger(recorded.db) as ledger, serving(ledger) as server:
        status, _, page = fetch(server.url)
    assert status == 200
    assert recorded.run_id in page and other.run_id in page
    assert "could not check: call call_" in page and "is malformed: its manifest" in page
    assert "model calls verified" in page  # the intact run


async def test_the_page_of_a_run_with_a_forged_row_says_which_and_why(recorded):
    forge(recorded.db, "UPDATE calls SET manifest = ?, messages = ?", FORGED_MANIFEST, "[1, 2]")
    with RunLedger(recorded.db) as ledger, serving(ledger) as server:
        status, _, page = fetch(f"{server.url}run/{recorded.run_id}")
    assert status == 500
    assert "the ledger holds a malformed record (call call_" in page
    assert "its messages are not a list of {role, content} texts" in page


async def test_a_row_that_cannot_be_read_is_a_one_line_500_not_a_dropped_connection(recorded):
    forge(recorded.db, "UPDATE runs SET config = ?", "{not json")
    with RunLedger(recorded.db) as ledger, serving(ledger) as server:
        status, headers, page = fetch(f"{server.url}run/{recorded.run_id}")
        state_status, _, state = fetch(f"{server.url}run/{recorded.run_id}/state")
        list_status, _, listing = fetch(server.url)
    assert status == 500
    assert (
        f"the ledger holds a malformed record (run {recorded.run_id} is malformed: its config "
        "is not JSON (" in page
    )
    # The list names the run in one line instead (test_serve_list_malformed.py).
    assert list_status == 200
    assert f"run {recorded.run_id} is malformed: its config is not JSON (" in listing
    assert "Content-Security-Policy" in headers
    assert state_status == 500
    assert json.loads(state)["error"].startswith("the ledger holds a malformed record")


# -- connections ----------------------------------------------------------------------------


def test_connections_past_the_cap_are_answered_503_at_once_and_freed_after(tmp_path, monkeypatch):
    # Each connection held a thread (and its deadline timer) until its deadline, however
    # many a client opened: thousands of idle connections, thousands of threads.
    monkeypatch.setattr(serve, "MAX_CONNECTIONS", 3)
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger, serving(ledger) as server:
        idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(3)]
        try:
            time.sleep(0.3)  # each is being served (its thread waits for a request)
            extra = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            started = time.monotonic()
            extra.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n\r\n".encode())
            answer = extra.recv(4096)
            extra.close()
            assert answer.startswith(b"HTTP/1.1 503 ")
            assert time.monotonic() - started < 2
        finally:
            for conn in idle:
                conn.close()
        deadline = time.monotonic() + 5
        while (status := fetch(server.url)[0]) != 200 and time.monotonic() < deadline:
            time.sleep(0.1)  # the closed connections' threads end and free their slots
        assert status == 200


def raw(port: int, request: bytes) -> tuple[list[str], bytes]:
    """The status line and headers, and the body, a raw request is answered with."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return head.decode("latin-1").split("\r\n"), body


def test_the_errors_http_server_answers_carry_every_answers_headers(recorded):
    """A ``POST``, a request line too long or too many headers: the standard library's page went
    without ``nosniff``, a policy or ``frame-ancestors``; now each is one line, as ours are."""
    with RunLedger(recorded.db) as ledger, serving(ledger) as server:
        host = f"Host: 127.0.0.1:{server.port}\r\n".encode()
        cases = [
            (b"POST / HTTP/1.0\r\n" + host + b"Content-Length: 0\r\n\r\n",
             "501 Not Implemented", "Unsupported method (&#39;POST&#39;)"),
            (b"GET /run/" + b"a" * 70_000 + b" HTTP/1.0\r\n" + host + b"\r\n",
             "414 Request-URI Too Long", "Request-URI Too Long"),
            (b"GET / HTTP/1.0\r\n" + host + b"X: y\r\n" * 101 + b"\r\n",
             "431 Request Header Fields Too Large", "Too many headers"),
        ]  # fmt: skip
        for request, status, said in cases:
            head, body = raw(server.port, request)
            assert head[0] == f"HTTP/1.0 {status}", head
            assert "X-Content-Type-Options: nosniff" in head
            assert "Content-Type: text/html; charset=utf-8" in head
            assert "Content-Security-Policy: default-src 'none'; frame-ancestors 'none'" in head
            assert "Cache-Control: no-store" in head and "X-Frame-Options: DENY" in head
            assert f"<p>{said}</p>".encode() in body and b"<h1>Error response</h1>" not in body
