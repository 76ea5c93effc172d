"""`clearance serve` against a request with two ``Host`` headers, and pages of huge records.

The ``Host`` check read the first ``Host`` header only: a request naming the loopback first
and another site second was served (RFC 9112 says ``400``: a proxy in front may have used
the other one). Now it is ``400`` before the ledger is read.

Rendered pages were kept by count only (`serve.PAGES_KEPT`): a ledger edited to hold a
result of 50 MB makes a page of 200 MB (``<`` is ``&lt;``), and eight such runs kept 1.6 GB
for as long as the server ran. The pages kept are now bounded by their size together
(`serve.PAGES_KEPT_CHARS`); a page over it is served and not kept. So that queued requests
for such a page cannot hold the server, a request whose deadline passes while it waits for
the render lock renders nothing.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import pytest

from clearance import RunLedger
from clearance._view import serve

sys.path.insert(0, str(Path(__file__).parent))
from serving import fetch, serving


def raw_get(port: int, path: str, *headers: str) -> bytes:
    """The whole answer to a GET sent as given (HTTP/1.0: the server closes after it)."""
    request = f"GET {path} HTTP/1.0\r\n" + "".join(f"{h}\r\n" for h in headers) + "\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request.encode())
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


@pytest.mark.parametrize("first_is_ours", [True, False])
async def test_a_request_with_two_host_headers_is_400_before_the_ledger_is_read(
    recorded, first_is_ours
):
    with RunLedger(recorded.db) as ledger, serving(ledger) as server:
        ours, theirs = f"Host: 127.0.0.1:{server.port}", "Host: attacker.example"
        hosts = (ours, theirs) if first_is_ours else (theirs, ours)
        for path in (f"/run/{recorded.run_id}", f"/run/{recorded.run_id}/state", "/"):
            answer = raw_get(server.port, path, *hosts)
            assert answer.startswith(b"HTTP/1.0 400 "), answer[:200]
            assert b"more than one Host header" in answer
        assert server.pages == {} and server.verdicts.verified == 0
        # One Host header, ours: served as before.
        assert raw_get(server.port, "/", ours).startswith(b"HTTP/1.0 200 ")


async def test_the_pages_kept_are_bounded_by_their_size_together(
    recorded, record, tmp_path, monkeypatch
):
    other = await record(tmp_path)  # a second run in the same ledger
    with RunLedger(recorded.db) as ledger, serving(ledger) as server:
        first = fetch(f"{server.url}run/{recorded.run_id}")[2]
        assert set(server.pages) == {recorded.run_id}
        # Room for one page of this size, not two: the older one goes.
        monkeypatch.setattr(serve, "PAGES_KEPT_CHARS", len(first) * 3 // 2)
        second = fetch(f"{server.url}run/{other.run_id}")[2]
        assert set(server.pages) == {other.run_id}
        assert sum(len(page) for _, page in server.pages.values()) <= len(first) * 3 // 2
        # A page over the bound is served whole, and not kept.
        monkeypatch.setattr(serve, "PAGES_KEPT_CHARS", min(len(first), len(second)) - 1)
        status, _, page = fetch(f"{server.url}run/{recorded.run_id}")
        assert status == 200 and page == first
        assert server.pages == {}


async def test_a_request_whose_deadline_passes_waiting_for_the_lock_renders_nothing(
    recorded, monkeypatch
):
    # It waited for the pages of others, then rendered its own for a connection already cut
    # off: with pages too large to keep, each queued request rendered one anew.
    monkeypatch.setattr(serve, "REQUEST_TIMEOUT_S", 1.0)
    with RunLedger(recorded.db) as ledger, serving(ledger) as server:
        with server.lock:  # another page being rendered, for longer than the deadline
            conn = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            request = f"GET /run/{recorded.run_id} HTTP/1.0\r\nHost: 127.0.0.1:{server.port}"
            conn.sendall(f"{request}\r\n\r\n".encode())
            assert conn.recv(65536) == b""  # cut off at its deadline, nothing sent
            conn.close()
            await asyncio.sleep(0.3)
        await asyncio.sleep(0.5)  # time for a waiting thread to take the lock and render
        assert server.pages == {} and server.verdicts.verified == 0
        assert fetch(f"{server.url}run/{recorded.run_id}")[0] == 200  # the next one is served
