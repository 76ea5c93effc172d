"""A streamed Anthropic answer's usage, held to the rules of a non-streamed one.

The ``anthropic`` SDK converts each event's fields as it parses them: ``"7"`` becomes 7,
``5.0`` becomes 5, ``true`` becomes 1. A streamed answer's usage reached our checks only
after that conversion, so a count no non-streamed answer could report was recorded and
charged as a number the server never sent. The usage of every ``message_start`` and
``message_delta`` event is now checked as the server sent it. Real servers on 127.0.0.1.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from raw_http import Server

pytest.importorskip("anthropic", reason="the anthropic extra is not installed")

from clearance import Agent, ModelError, RetryPolicy, RunBudget, RunLedger
from clearance._agents.budget_meter import BudgetMeter
from clearance._agents.caller import ModelCaller
from clearance.models import ModelRequest
from clearance.models._anthropic import AnthropicModel

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
ANSWER = "Hello from a hostile stream."


def _event(name: str, data: dict[str, Any], *, newline: str = "\n") -> bytes:
    line = f"event: {name}{newline}data: {json.dumps({'type': name, **data})}{newline}{newline}"
    return line.encode()


def streamed(start_usage: Any, delta_usage: Any, *, newline: str = "\n") -> bytes:
    """A whole streamed answer: ``start_usage`` in message_start, ``delta_usage`` in its delta."""
    message = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": start_usage,
    }  # fmt: skip
    events = [
        ("message_start", {"message": message}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": ANSWER}}),
        ("content_block_stop", {"index": 0}),
        ("message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": delta_usage}),
        ("message_stop", {}),
    ]  # fmt: skip
    return HEAD + b"".join(_event(name, data, newline=newline) for name, data in events)


def whole(usage: Any) -> bytes:
    """The same answer, not streamed, with ``usage`` as its usage."""
    body = json.dumps({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "text", "text": ANSWER}], "stop_reason": "end_turn",
        "stop_sequence": None, "usage": usage,
    }).encode()  # fmt: skip
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
    return head.encode() + b"\r\nConnection: close\r\n\r\n" + body


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.close()


def _serving(servers: list[Server], answer: bytes, *, piece: int = 0) -> str:
    def handler(n: int, conn: socket.socket) -> None:
        if not piece:
            conn.sendall(answer)
            return
        for at in range(0, len(answer), piece):  # the events cut across many reads
            conn.sendall(answer[at : at + piece])

    servers.append(Server(handler))
    return f"http://127.0.0.1:{servers[-1].port}"


async def _ask(url: str, make_prompt: Any, *, stream: bool) -> Any:
    pieces: list[str] = []
    async with AnthropicModel("m", base_url=url, api_key="k") as chat:
        request = ModelRequest(
            prompt=make_prompt(chat.count_tokens), stream=pieces.append if stream else None
        )
        return await chat.request(request)


START = {"input_tokens": 25, "output_tokens": 1}
DELTA = {"output_tokens": 15}

# (where, field, value, the error line's end)
HOSTILE = [
    ("start", "input_tokens", "7", "usage.input_tokens as a str '7', not an integer"),
    ("start", "input_tokens", 25.0, "usage.input_tokens as a float 25.0, not an integer"),
    ("start", "cache_read_input_tokens", 5.0,
     "usage.cache_read_input_tokens as a float 5.0, not an integer"),
    ("start", "cache_creation_input_tokens", True,
     "usage.cache_creation_input_tokens as a bool True, not an integer"),
    ("delta", "output_tokens", "15", "usage.output_tokens as a str '15', not an integer"),
    ("delta", "output_tokens", 15.0, "usage.output_tokens as a float 15.0, not an integer"),
    ("delta", "output_tokens", True, "usage.output_tokens as a bool True, not an integer"),
    ("delta", "input_tokens", "25", "usage.input_tokens as a str '25', not an integer"),
    ("delta", "cache_read_input_tokens", "4",
     "usage.cache_read_input_tokens as a str '4', not an integer"),
    ("delta", "output_tokens", -1, "usage.output_tokens=-1, outside 0..1000000000"),
    ("delta", "output_tokens", 10**12,
     "usage.output_tokens=1000000000000, outside 0..1000000000"),
]  # fmt: skip


def _hostile(where: str, name: str, value: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    if where == "start":
        return {**START, name: value}, DELTA
    return START, {**DELTA, name: value}


@pytest.mark.parametrize(("where", "name", "value", "says"), HOSTILE)
async def test_a_streamed_usage_count_the_sdk_would_convert_is_refused_by_name(
    servers, make_prompt, where: str, name: str, value: Any, says: str
) -> None:
    start, delta = _hostile(where, name, value)
    url = _serving(servers, streamed(start, delta))
    with pytest.raises(ModelError) as info:
        await _ask(url, make_prompt, stream=True)
    assert str(info.value) == f"anthropic:m: the server at {url} streamed {says}"
    assert not info.value.transient  # the same server gives the same answer
    assert len(servers[-1].heads) == 1


@pytest.mark.parametrize(("where", "name", "value", "says"), HOSTILE)
async def test_the_same_count_is_refused_in_a_whole_answer_too(
    servers, make_prompt, where: str, name: str, value: Any, says: str
) -> None:
    start, delta = _hostile(where, name, value)
    usage = {**start, **delta} if where == "delta" else {**start, "output_tokens": 15}
    url = _serving(servers, whole(usage))
    with pytest.raises(ModelError, match=r"not an integer|outside 0"):
        await _ask(url, make_prompt, stream=False)


async def test_a_hostile_count_is_found_with_crlf_events_cut_across_reads(
    servers, make_prompt
) -> None:
    answer = streamed(START, {**DELTA, "output_tokens": "15"}, newline="\r\n")
    url = _serving(servers, answer, piece=7)
    with pytest.raises(ModelError) as info:
        await _ask(url, make_prompt, stream=True)
    assert str(info.value).endswith("streamed usage.output_tokens as a str '15', not an integer")


@pytest.mark.parametrize(
    ("where", "says"),
    [("start", "a str"), ("delta", "a str")],
)
async def test_a_streamed_usage_that_is_not_an_object_is_refused(
    servers, make_prompt, where: str, says: str
) -> None:
    start, delta = ("lots", DELTA) if where == "start" else (START, "lots")
    url = _serving(servers, streamed(start, delta))
    with pytest.raises(ModelError) as info:
        await _ask(url, make_prompt, stream=True)
    assert str(info.value) == f"anthropic:m: usage is {says}, not an object"


@pytest.mark.parametrize(
    ("start", "delta", "expected"),
    [
        (START, DELTA, (25, 15, None)),
        ({**START, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}, DELTA,
         (25, 15, 0)),
        ({"input_tokens": 5, "output_tokens": 1, "cache_creation_input_tokens": 10,
          "cache_read_input_tokens": 20}, {"output_tokens": 7}, (35, 7, 20)),
        ({"input_tokens": 3, "output_tokens": 1},
         {"output_tokens": 9, "input_tokens": 5, "cache_read_input_tokens": 4,
          "cache_creation_input_tokens": None}, (9, 9, 4)),
        ({**START, "server_tool_use": None, "service_tier": "standard"},
         {**DELTA, "input_tokens": None}, (25, 15, None)),
    ],
    ids=["plain", "cache-zero", "cache-from-start", "counts-in-delta", "nulls-and-extras"],
)  # fmt: skip
async def test_an_honest_streamed_usage_still_counts(
    servers, make_prompt, start: Any, delta: Any, expected: tuple[int, int, int | None]
) -> None:
    url = _serving(servers, streamed(start, delta, newline="\r\n"), piece=11)
    response = await _ask(url, make_prompt, stream=True)
    assert response.text == ANSWER
    usage = response.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_prompt_tokens) == expected
    assert usage.requests == 1 and not usage.counted


@pytest.fixture
def ledger(tmp_path: Any) -> Iterator[RunLedger]:
    ledger = RunLedger(f"sqlite:///{tmp_path / 'runs.db'}")
    ledger.start_run(run_id="run-1", team="t", goal=None, graph=None, config={})
    yield ledger
    ledger.close()


async def test_a_refused_streamed_usage_is_recorded_and_not_charged(
    servers, ledger, make_prompt
) -> None:
    url = _serving(servers, streamed(START, {**DELTA, "output_tokens": 15.0}))
    meter = BudgetMeter(RunBudget(tokens=100_000), run_id="run-1")
    caller = ModelCaller(
        ledger=ledger, run_id="run-1", meter=meter,
        retry_policy=RetryPolicy(initial_s=0, max_s=0, jitter_s=0),
        listener=lambda *event: None,
    )  # fmt: skip
    agent = Agent(name="writer", instructions="You write.")
    async with AnthropicModel("m", base_url=url, api_key="k") as chat:
        with pytest.raises(ModelError):
            await caller.call(
                subject="task:t", agent=agent, model=chat, prompt=make_prompt(chat.count_tokens)
            )
    line = f"anthropic:m: the server at {url} streamed usage.output_tokens as a float 15.0, "
    (record,) = ledger.calls("run-1")
    assert record.error == f"attempt 1 of 3: {line}not an integer"
    assert meter.tokens == 0  # 15 completion tokens the server never reported as a count
    assert len(servers[-1].heads) == 1
