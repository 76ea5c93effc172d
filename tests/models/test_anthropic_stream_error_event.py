"""A streamed Anthropic answer that ends in an ``error`` event (a real server on 127.0.0.1).

The SDK raises such an event as an `anthropic.APIStatusError` of the stream's own status
(200), so an ``overloaded_error`` midway through an answer was not retried. It is now
transient as an HTTP 529 (or 429, 500) would be, and one line naming the server.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from raw_http import Server

pytest.importorskip("anthropic", reason="the anthropic extra is not installed")

from clearance import ModelError
from clearance.models import ModelRequest
from clearance.models._anthropic import AnthropicModel


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.close()


@pytest.mark.parametrize(
    ("kind", "transient"),
    [("overloaded_error", True), ("api_error", True), ("rate_limit_error", True),
     ("invalid_request_error", False), ("permission_error", False)],
)  # fmt: skip
async def test_a_streamed_error_event_is_one_line_and_transient_when_the_server_is_busy(
    servers, make_prompt, kind, transient
) -> None:
    def answer(n: int, conn: socket.socket) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
            + _event("error", {"error": {"type": kind, "message": "Busy\nforged line"}})
        )

    servers.append(Server(answer))
    url = f"http://127.0.0.1:{servers[-1].port}"
    async with AnthropicModel("m", base_url=url, api_key="k") as chat:
        with pytest.raises(ModelError) as info:
            await chat.request(ModelRequest(prompt=make_prompt(len), stream=lambda p: None))
    message = str(info.value)
    assert message.startswith(f"anthropic:m: the server at {url} streamed an error: {kind}")
    assert "\n" not in message
    assert info.value.transient is transient
