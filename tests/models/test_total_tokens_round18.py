"""A whole (non-streamed) answer's ``usage.total_tokens`` is checked as a streamed one's is.

A streamed OpenAI-compatible answer's ``total_tokens`` is refused unless absent, ``null`` or
a whole number in ``0..MAX_REPORTED_TOKENS`` (`RawStreamUsage`); the same count in a whole
answer was ignored, so ``"total_tokens": "37"`` was refused streamed and accepted whole. Both
refuse it now, the whole answer in the words it uses for its other counts. Real servers on
127.0.0.1 speaking HTTP by hand.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from raw_http import Server

from clearance import ModelError
from clearance.models import ModelRequest
from clearance.models._base import MAX_REPORTED_TOKENS
from clearance.models._openai import OpenAIModel

BASE = {"id": "x", "object": "chat.completion", "created": 0, "model": "m"}
ANSWER = "An answer whose usage is checked."


def whole(usage_json: str) -> bytes:
    """A whole answer (head included) whose ``usage`` is ``usage_json`` (raw JSON text)."""
    message = {"role": "assistant", "content": ANSWER}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    text = json.dumps({**BASE, "choices": [choice]})
    body = (text[:-1] + f', "usage": {usage_json}}}').encode()
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
    return head.encode() + b"\r\nConnection: close\r\n\r\n" + body


def streamed(usage_json: str) -> bytes:
    """The same answer streamed, ``usage_json`` in its last chunk."""
    chunk = {**BASE, "object": "chat.completion.chunk"}

    def event(data: str) -> bytes:
        return f"data: {data}\n\n".encode()

    first = {"index": 0, "finish_reason": None, "delta": {"role": "assistant", "content": ANSWER}}
    body = event(json.dumps({**chunk, "choices": [first], "usage": None}))
    body += event(json.dumps({**chunk, "choices": [{"index": 0, "delta": {},
                                                    "finish_reason": "stop"}]}))  # fmt: skip
    body += event(json.dumps({**chunk, "choices": []})[:-1] + f', "usage": {usage_json}}}')
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    return head + body + event("[DONE]")


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.close()


def _serving(servers: list[Server], answer: bytes) -> str:
    def handler(n: int, conn: socket.socket) -> None:
        conn.sendall(answer)

    servers.append(Server(handler))
    return f"http://127.0.0.1:{servers[-1].port}/v1"


async def _ask(url: str, make_prompt: Any, *, stream: bool) -> Any:
    pieces: list[str] = []
    async with OpenAIModel("m", base_url=url, api_key="k") as chat:
        request = ModelRequest(
            prompt=make_prompt(chat.count_tokens), stream=pieces.append if stream else None
        )
        return await chat.request(request)


def _usage(total: str | None, *, prompt: bool = True) -> str:
    """A usage of 30 + 7 tokens whose ``total_tokens`` is ``total`` as raw JSON (None: absent)."""
    fields = (['"prompt_tokens": 30'] if prompt else []) + ['"completion_tokens": 7']
    if total is not None:
        fields.append(f'"total_tokens": {total}')
    return "{" + ", ".join(fields) + "}"


TOO_MANY = str(MAX_REPORTED_TOKENS + 1)

# (total_tokens as sent, the end of the whole answer's error line)
HOSTILE = [
    ('"37"', "total_tokens as str '37', not an integer"),
    ("37.0", "total_tokens as float 37.0, not an integer"),
    ("true", "total_tokens as bool True, not an integer"),
    ('"lots"', "total_tokens as str 'lots', not an integer"),
    ("[37]", "total_tokens as list [37], not an integer"),
    ("-1", f"total_tokens=-1, outside 0..{MAX_REPORTED_TOKENS}"),
    (TOO_MANY, f"total_tokens={TOO_MANY}, outside 0..{MAX_REPORTED_TOKENS}"),
]


@pytest.mark.parametrize(("total", "says"), HOSTILE)
async def test_a_whole_answer_with_a_total_that_is_no_token_count_is_refused(
    servers, make_prompt, total: str, says: str
) -> None:
    url = _serving(servers, whole(_usage(total)))
    with pytest.raises(ModelError) as info:
        await _ask(url, make_prompt, stream=False)
    assert str(info.value) == f"openai:m: the provider reported {says}"
    assert not info.value.transient  # the same server gives the same answer
    assert len(servers[-1].heads) == 1


@pytest.mark.parametrize(("total", "says"), HOSTILE)
async def test_streamed_and_whole_agree_on_a_hostile_total(
    servers, make_prompt, total: str, says: str
) -> None:
    refused = []
    for stream, answer in ((True, streamed(_usage(total))), (False, whole(_usage(total)))):
        url = _serving(servers, answer)
        with pytest.raises(ModelError) as info:
            await _ask(url, make_prompt, stream=stream)
        refused.append(str(info.value))
    assert " streamed usage.total_tokens" in refused[0]  # its own words: see _stream_usage
    assert refused[1].endswith(f"reported {says}")


async def test_a_hostile_total_is_refused_even_when_the_other_counts_are_unreported(
    servers, make_prompt
) -> None:
    url = _serving(servers, whole(_usage('"37"', prompt=False)))
    with pytest.raises(ModelError) as info:
        await _ask(url, make_prompt, stream=False)
    assert str(info.value) == "openai:m: the provider reported total_tokens as str '37', " \
        "not an integer"  # fmt: skip


@pytest.mark.parametrize("total", [None, "null", "37", "0", str(MAX_REPORTED_TOKENS)])
async def test_an_absent_null_or_whole_total_is_fine_either_way(
    servers, make_prompt, total: str | None
) -> None:
    for stream, answer in ((False, whole(_usage(total))), (True, streamed(_usage(total)))):
        response = await _ask(_serving(servers, answer), make_prompt, stream=stream)
        assert response.text == ANSWER
        assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (30, 7)
