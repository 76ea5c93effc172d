"""The HTTP providers against a server whose answer is compressed or whose stream is malformed.

A raw socket on 127.0.0.1 sends what no honest server does: a small gzip (or deflate) body
that decodes to hundreds of megabytes (a "gzip bomb"), an encoding stacked on itself, a
server-sent event that is not JSON or has the wrong shape. Each call must fail within
seconds with one line naming the server and what was wrong, never the API key.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from raw_http import Server, answering

from clearance import ModelError
from clearance.models._anthropic import AnthropicModel
from clearance.models._base import ModelRequest
from clearance.models._http_body import MAX_RESPONSE_BYTES
from clearance.models._http_client import MAX_ERROR_BODY_BYTES
from clearance.models._openai import OpenAIModel

KEY = "sk-test-0123456789abcdef"
WBITS = {"gzip": 31, "deflate": 15}


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.close()


def bomb(coding: str, megabytes: int, prefix: bytes = b"") -> bytes:
    """``prefix`` then ``megabytes`` MiB of ``x``, compressed (about 1 KiB per MiB)."""
    block = b"x" * (1024 * 1024)
    compressor = zlib.compressobj(9, zlib.DEFLATED, WBITS[coding])
    first = compressor.compress(prefix + block) + compressor.flush(zlib.Z_FULL_FLUSH)
    again = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    return first + again * (megabytes - 1) + compressor.flush()


def http(status: int, body: bytes, *, encoding: str, content_type: str, chunked: bool) -> bytes:
    head = f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nConnection: close\r\n"
    if encoding:
        head += f"Content-Encoding: {encoding}\r\n"
    if chunked:
        pieces = [body[i : i + 4096] for i in range(0, len(body), 4096)]
        framed = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces)
        return (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + framed + b"0\r\n\r\n"
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def model(provider: str, server: Server) -> Any:
    if provider == "openai":
        return OpenAIModel("m", base_url=f"http://127.0.0.1:{server.port}/v1", api_key=KEY)
    return AnthropicModel("m", base_url=f"http://127.0.0.1:{server.port}", api_key=KEY)


async def ask(chat: Any, make_prompt: Any, *, stream: bool, max_tokens: int = 100) -> Any:
    async with chat:
        request = ModelRequest(
            prompt=make_prompt(chat.count_tokens), max_tokens=max_tokens, timeout_s=30,
            stream=(lambda piece: None) if stream else None,
        )  # fmt: skip
        return await chat.request(request)


# -- a compressed answer is capped in decoded bytes ------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("coding", ["gzip", "deflate"])
@pytest.mark.parametrize("chunked", [False, True])
async def test_a_compressed_stream_that_expands_past_the_cap_is_refused(
    servers, make_prompt, provider: str, coding: str, chunked: bool
) -> None:
    if provider == "openai":
        prefix = b'data: {"x": "'
    else:
        prefix = b'event: content_block_delta\ndata: {"x": "'
    body = bomb(coding, 160, prefix)  # 160 MiB decoded, under 200 KiB on the wire
    assert len(body) < 256 * 1024
    servers.append(answering(http(200, body, encoding=coding, content_type="text/event-stream",
                               chunked=chunked)))  # fmt: skip
    started = time.monotonic()
    with pytest.raises(ModelError) as info:
        await ask(model(provider, servers[0]), make_prompt, stream=True)
    assert time.monotonic() - started < 10
    assert str(info.value) == (
        f"{provider}:m: the answer from http://127.0.0.1:{servers[0].port} is over "
        f"{MAX_RESPONSE_BYTES:,} bytes once decoded ({coding}): refused"
    )
    assert not info.value.transient


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_compressed_body_that_expands_past_the_cap_is_refused(
    servers, make_prompt, provider: str
) -> None:
    servers.append(answering(http(200, bomb("gzip", 160, b'{"x": "'), encoding="gzip",
                               content_type="application/json", chunked=False)))  # fmt: skip
    started = time.monotonic()
    with pytest.raises(ModelError, match=r"over the cap of .* bytes for max_tokens=100"):
        await ask(model(provider, servers[0]), make_prompt, stream=False)
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("coding", ["gzip", "deflate"])
async def test_a_compressed_error_body_is_cut_at_the_cap_once_decoded(
    servers, make_prompt, provider: str, coding: str
) -> None:
    body = bomb(coding, 50, b'{"error": {"message": "')  # 50 MiB decoded, 50 KiB sent
    assert len(body) < MAX_ERROR_BODY_BYTES
    servers.append(answering(http(500, body, encoding=coding, content_type="application/json",
                               chunked=True)))  # fmt: skip
    started = time.monotonic()
    with pytest.raises(ModelError) as info:
        await ask(model(provider, servers[0]), make_prompt, stream=False)
    assert time.monotonic() - started < 10
    text = str(info.value)
    assert text.startswith(f"{provider}:m: HTTP 500 from http://127.0.0.1:{servers[0].port}")
    assert len(text) < MAX_ERROR_BODY_BYTES + 1024  # not the 50 MiB the body decodes to
    assert info.value.status_code == 500


@pytest.mark.parametrize(("encoding", "named"), [("gzip, gzip", "gzip, gzip"), ("br", "br")])
async def test_a_stacked_or_unasked_encoding_is_refused(
    servers, make_prompt, encoding: str, named: str
) -> None:
    body = zlib.compress(zlib.compress(b"{}", wbits=31), wbits=31)
    servers.append(answering(http(200, body, encoding=encoding, content_type="application/json",
                               chunked=False)))  # fmt: skip
    with pytest.raises(ModelError) as info:
        await ask(model("openai", servers[0]), make_prompt, stream=False)
    assert str(info.value) == (
        f"openai:m: the answer from http://127.0.0.1:{servers[0].port} has the content "
        f"encoding {named!r}; only one of gzip, deflate is accepted: refused"
    )
    (head,) = servers[0].heads
    assert "accept-encoding: gzip, deflate\r\n" in head.lower() + "\r\n"


# -- a malformed server-sent event is named, with the server ---------------------------------

SSE = "text/event-stream"


@pytest.mark.parametrize(
    ("provider", "events", "what"),
    [
        ("openai", b"data: {not json \x1b[31m\n\n", "not JSON: '{not json \\x1b[31m'"),
        ("openai", b'data: {"choices": [5]}\n\n', "choice 0 is an int, not an object"),
        ("openai", b'data: {"choices": "x"}\n\n', "choices is a str, not a list"),
        ("anthropic", b"event: message_start\ndata: {not json\n\n", "not JSON: '{not json'"),
        (
            "anthropic",
            b'event: message_start\ndata: {"type": "message_start", "message": 5}\n\n',
            "AttributeError: \"'int' object has no attribute 'to_dict'\"",
        ),
        (
            "anthropic",
            b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
            b'"delta": {"type": "text_delta", "text": "x"}}\n\n',
            "an event out of order or of the wrong shape (AssertionError)",
        ),
    ],
)
async def test_a_malformed_event_fails_with_one_line_naming_the_server(
    servers, make_prompt, provider: str, events: bytes, what: str
) -> None:
    servers.append(answering(http(200, events, encoding="", content_type=SSE, chunked=False)))
    with pytest.raises(ModelError) as info:
        await ask(model(provider, servers[0]), make_prompt, stream=True)
    base = f"http://127.0.0.1:{servers[0].port}{'/v1/' if provider == 'openai' else ''}"
    assert str(info.value) == (
        f"{provider}:m: the server at {base} streamed a malformed event: {what}"
    )
    assert not info.value.transient


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_long_malformed_event_is_cut_and_never_shows_the_key(
    servers, make_prompt, provider: str
) -> None:
    data = b"{" + KEY.encode() + b"\x00" * 5000 + b"\n\n"
    events = (b"event: message_start\n" if provider == "anthropic" else b"") + b"data: " + data
    servers.append(answering(http(200, events, encoding="", content_type=SSE, chunked=True)))
    with pytest.raises(ModelError) as info:
        await ask(model(provider, servers[0]), make_prompt, stream=True)
    text = str(info.value)
    assert "streamed a malformed event: not JSON: '{[api key]\\x00\\x00" in text
    assert KEY not in text and "\n" not in text and len(text) < 300
