"""Attacks on the provider boundary: absurd usage reports and servers that trickle bytes."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from clearance import ModelError
from clearance._context.builder import ContextBuilder
from clearance._core.prompt import Prompt
from clearance._core.spec import Agent, Task
from clearance._state.graph import TaskGraph
from clearance._state.queue import TaskQueue
from clearance.models import ModelRequest
from clearance.models._base import MAX_REPORTED_TOKENS, validated_usage
from clearance.models._openai import OpenAIModel

pytestmark = pytest.mark.network


def a_prompt() -> Prompt:
    graph = TaskGraph([Task(id="t", title="T", description="Say hi.", assignee="writer")])
    agent = Agent(name="writer", instructions="You write.")
    return ContextBuilder(count_tokens=len).build_task_prompt(
        graph.get("t"), agent=agent, queue=TaskQueue(graph)
    )


async def read_request(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.decode("latin-1").split("\r\n"):
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    await reader.readexactly(length)


@asynccontextmanager
async def serve(handler) -> AsyncIterator[str]:
    """A real HTTP server on 127.0.0.1 for the test; yields its ``/v1`` base URL."""
    tasks: set[asyncio.Task[None]] = set()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            await read_request(reader)
            await handler(writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        for task in tasks:
            task.cancel()
        server.close()
        await server.wait_closed()


def completion_body(usage: object) -> bytes:
    return json.dumps(
        {
            "id": "c1",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "hi"},
                    "finish_reason": "stop",
                }
            ],
            "usage": usage,
        }
    ).encode()


def answer_with(body: bytes):
    async def handler(writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()

    return handler


# -- usage (issue item 7, provider half) --------------------------------------------------


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 10**20, "completion_tokens": 1, "total_tokens": 10**20 + 1},
        {"prompt_tokens": 5, "completion_tokens": -3, "total_tokens": 2},
        {"prompt_tokens": MAX_REPORTED_TOKENS + 1, "completion_tokens": 0, "total_tokens": 0},
        {"prompt_tokens": 1.5, "completion_tokens": 1, "total_tokens": 2},
        {"prompt_tokens": [3], "completion_tokens": 1, "total_tokens": 2},
    ],
)
async def test_absurd_usage_from_a_server_is_a_clear_permanent_model_error(usage) -> None:
    async with serve(answer_with(completion_body(usage))) as url:
        model = OpenAIModel("m", base_url=url, timeout_s=10)
        try:
            with pytest.raises(ModelError, match=r"openai:m: the provider reported") as info:
                await model.request(ModelRequest(prompt=a_prompt()))
        finally:
            await model.aclose()
    assert info.value.transient is False


async def test_plausible_usage_from_a_server_is_kept() -> None:
    usage = {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
    async with (
        serve(answer_with(completion_body(usage))) as url,
        OpenAIModel("m", base_url=url, timeout_s=10) as model,
    ):
        response = await model.request(ModelRequest(prompt=a_prompt()))
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (7, 2)


@pytest.mark.parametrize("value", [-1, 10**20, 2.0, "3", [], True])
def test_validated_usage_refuses_what_is_not_a_token_count(value) -> None:
    with pytest.raises(ModelError, match="completion_tokens"):
        validated_usage(1, value, model_id="x:y")
    assert validated_usage(None, MAX_REPORTED_TOKENS, model_id="x:y").total_tokens == 10**9


# -- deadlines (issue item 9) -------------------------------------------------------------


async def trickle(writer: asyncio.StreamWriter) -> None:
    """Headers at once, then one byte of body every half second, for a minute."""
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        b"content-length: 100000\r\nconnection: close\r\n\r\n"
    )
    await writer.drain()
    for _ in range(120):
        writer.write(b" ")
        await writer.drain()
        await asyncio.sleep(0.5)


@pytest.mark.parametrize(("model_timeout", "request_timeout"), [(1.5, None), (600.0, 1.5)])
async def test_a_trickling_server_cannot_outlive_the_deadline(
    model_timeout: float, request_timeout: float | None
) -> None:
    async with serve(trickle) as url:
        model = OpenAIModel("m", base_url=url, timeout_s=model_timeout)
        t0 = time.perf_counter()
        try:
            with pytest.raises(ModelError, match=r"within 1\.5 s") as info:
                # The guard only keeps a failing test from hanging; the deadline is 1.5 s.
                await asyncio.wait_for(
                    model.request(ModelRequest(prompt=a_prompt(), timeout_s=request_timeout)),
                    timeout=8,
                )
        finally:
            await model.aclose()
    took = time.perf_counter() - t0
    assert took < 3.0, took
    assert info.value.transient is True


@pytest.mark.parametrize("value", [0, -1, float("-inf"), float("nan")])
def test_a_request_deadline_must_be_positive(value: float) -> None:
    from clearance import ConfigError

    with pytest.raises(ConfigError, match="timeout_s"):
        ModelRequest(prompt=a_prompt(), timeout_s=value)
