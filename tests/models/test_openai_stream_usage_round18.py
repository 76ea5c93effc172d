"""A streamed OpenAI-compatible answer's usage, checked as the server sent it.

The ``openai`` SDK validates each chunk's ``usage`` loosely when the chunk has the shape it
expects: with ``total_tokens`` present (as every honest server sends it), ``"7"``, ``7.0``
and ``true`` reach our checks as 7, 7 and 1; ``prompt_tokens_details.cached_tokens`` is
converted even without it. A non-streamed answer with the same usage is refused, so the
streamed one was recorded and charged with counts the server never sent as counts. What
reaches the check unconverted (``7.5``, ``-1``, ``"abc"``, or ``"7"`` in a usage without
``total_tokens``, whose chunk the SDK builds without validating) was refused already; it
still is, and the tests below prove both. Every chunk's usage is now checked in the raw
body (`RawStreamUsage`, shared with the Anthropic provider), before the SDK reads it.
Real servers on 127.0.0.1, and one run through `ModelCaller` with a real ledger.

Cost, measured with a 10,000-chunk honest stream (2.3 MB, usage in the last chunk, best
of 8, runs interleaved): 0.77 s before the check, 0.80 s with it (every chunk holding
``"usage": null``, as OpenAI's do). A chunk is decoded as JSON a second time only when its
text holds a ``usage`` that is not ``"usage": null``, or a ``\\u`` escape.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from raw_http import Server

from clearance import Agent, ModelError, RetryPolicy, RunBudget, RunLedger
from clearance._agents.budget_meter import BudgetMeter
from clearance._agents.caller import ModelCaller
from clearance.models import ModelRequest
from clearance.models._openai import OpenAIModel

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
BASE = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m"}
ANSWER = "Hello from a hostile stream."
HONEST = {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37}


def _event(data: str, end: str = "\n\n") -> bytes:
    return f"data: {data}{end}".encode()


def _chunk(**fields: Any) -> str:
    return json.dumps({**BASE, **fields})


def streamed(usage_json: str | None, *, end: str = "\n\n", after: str = "") -> bytes:
    """A streamed answer; its last chunk's usage is ``usage_json`` (raw JSON text; ``None``:
    no usage chunk). The other chunks carry ``"usage": null``, as OpenAI's do."""
    first = {"index": 0, "finish_reason": None, "delta": {"role": "assistant", "content": ANSWER}}
    body = _event(_chunk(choices=[first], usage=None), end)
    body += _event(_chunk(choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}]), end)
    if usage_json is not None:
        body += _event(_chunk(choices=[])[:-1] + f', "usage": {usage_json}}}', end)
    return HEAD + body + _event("[DONE]", end) + after.encode()


def whole(usage_json: str) -> bytes:
    """The same answer, not streamed, with ``usage_json`` as its usage."""
    message = {"role": "assistant", "content": ANSWER}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    text = json.dumps({**BASE, "object": "chat.completion", "choices": [choice]})
    body = (text[:-1] + f', "usage": {usage_json}}}').encode()
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
    return f"http://127.0.0.1:{servers[-1].port}/v1"


async def _ask(url: str, make_prompt: Any, *, stream: bool = True) -> Any:
    pieces: list[str] = []
    async with OpenAIModel("m", base_url=url, api_key="k") as chat:
        request = ModelRequest(
            prompt=make_prompt(chat.count_tokens), stream=pieces.append if stream else None
        )
        response = await chat.request(request)
    assert not stream or "".join(pieces) == ANSWER
    return response


def _usage(**fields: str) -> str:
    """``HONEST`` as JSON text, each of ``fields`` replacing (or adding) a raw value."""
    counts = {name: json.dumps(value) for name, value in HONEST.items()} | fields
    return "{" + ", ".join(f'"{name}": {value}' for name, value in counts.items()) + "}"


CACHED = "prompt_tokens_details"

# (the usage as sent, the error line's end): values the SDK converted before they were checked
CONVERTED = [
    (_usage(prompt_tokens='"30"'), "usage.prompt_tokens as a str '30', not an integer"),
    (_usage(prompt_tokens="30.0"), "usage.prompt_tokens as a float 30.0, not an integer"),
    (_usage(prompt_tokens="true"), "usage.prompt_tokens as a bool True, not an integer"),
    (_usage(completion_tokens='"7"'), "usage.completion_tokens as a str '7', not an integer"),
    (_usage(completion_tokens="7.0"), "usage.completion_tokens as a float 7.0, not an integer"),
    (_usage(completion_tokens="true"), "usage.completion_tokens as a bool True, not an integer"),
    (_usage(total_tokens='"37"'), "usage.total_tokens as a str '37', not an integer"),
    (_usage(total_tokens="37.0"), "usage.total_tokens as a float 37.0, not an integer"),
    (_usage(**{CACHED: '{"cached_tokens": "4"}'}),
     "usage.prompt_tokens_details.cached_tokens as a str '4', not an integer"),
    (_usage(**{CACHED: '{"cached_tokens": 4.0}'}),
     "usage.prompt_tokens_details.cached_tokens as a float 4.0, not an integer"),
    (_usage(**{CACHED: '{"cached_tokens": true}'}),
     "usage.prompt_tokens_details.cached_tokens as a bool True, not an integer"),
    ('{"prompt_tokens": 30, "completion_tokens": 7, "prompt_tokens_details": '
     '{"cached_tokens": "4"}}',
     "usage.prompt_tokens_details.cached_tokens as a str '4', not an integer"),
    ('{"\\u0070rompt_tokens": "30", "completion_tokens": 7, "total_tokens": 37}',
     "usage.prompt_tokens as a str '30', not an integer"),
]  # fmt: skip


@pytest.mark.parametrize(("usage", "says"), CONVERTED)
async def test_a_streamed_count_the_sdk_would_convert_is_refused_by_name(
    servers, make_prompt, usage: str, says: str
) -> None:
    url = _serving(servers, streamed(usage))
    with pytest.raises(ModelError) as info:
        await _ask(url, make_prompt)
    assert str(info.value) == f"openai:m: the server at {url}/ streamed {says}"
    assert not info.value.transient  # the same server gives the same answer
    assert len(servers[-1].heads) == 1


@pytest.mark.parametrize("usage", [usage for usage, says in CONVERTED if "total" not in says])
async def test_the_same_count_is_refused_in_a_whole_answer_too(
    servers, make_prompt, usage: str
) -> None:
    url = _serving(servers, whole(usage))
    with pytest.raises(ModelError, match=r"as (str|float|bool) .*, not an integer"):
        await _ask(url, make_prompt, stream=False)


# What the SDK hands on as it was sent: refused before the raw check too (other words).
UNCONVERTED = [
    (_usage(prompt_tokens="30.5"), r"prompt_tokens as (a )?float 30\.5, not an integer"),
    (_usage(completion_tokens="-1"), r"completion_tokens=-1, outside 0\.\.1000000000"),
    (_usage(completion_tokens="1000000000000"), r"completion_tokens=1000000000000, outside"),
    (_usage(prompt_tokens='"lots"'), r"prompt_tokens as (a )?str 'lots', not an integer"),
    ('{"prompt_tokens": "30", "completion_tokens": 7}',
     r"prompt_tokens as (a )?str '30', not an integer"),
]  # fmt: skip


@pytest.mark.parametrize(("usage", "says"), UNCONVERTED)
async def test_a_count_the_sdk_hands_on_unconverted_is_refused(
    servers, make_prompt, usage: str, says: str
) -> None:
    url = _serving(servers, streamed(usage))
    with pytest.raises(ModelError, match=says) as info:
        await _ask(url, make_prompt)
    assert "\n" not in str(info.value) and not info.value.transient


@pytest.mark.parametrize(
    ("end", "piece"), [("\r\n\r\n", 7), ("\n\r\n", 0), ("\r\r", 5), ("\n\n", 1)],
    ids=["crlf-cut", "lf-then-crlf", "cr", "lf-byte-by-byte"],
)  # fmt: skip
async def test_a_hostile_count_is_found_however_the_events_are_cut(
    servers, make_prompt, end: str, piece: int
) -> None:
    url = _serving(servers, streamed(_usage(completion_tokens="7.0"), end=end), piece=piece)
    with pytest.raises(ModelError) as info:
        await _ask(url, make_prompt)
    assert str(info.value).endswith(
        "streamed usage.completion_tokens as a float 7.0, not an integer"
    )


async def test_an_escaped_usage_key_does_not_slip_past(servers, make_prompt) -> None:
    body = streamed(None)
    hostile = _chunk(choices=[])[:-1] + ', "\\u0075s\\u0061ge": ' + _usage(prompt_tokens="true")
    body = body.replace(b"data: [DONE]", _event(hostile + "}") + b"data: [DONE]")
    url = _serving(servers, body)
    with pytest.raises(ModelError) as info:
        await _ask(url, make_prompt)
    assert str(info.value).endswith("streamed usage.prompt_tokens as a bool True, not an integer")


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (json.dumps(HONEST), (30, 7, None)),
        (_usage(**{CACHED: '{"cached_tokens": 12, "audio_tokens": 0}'},
                completion_tokens_details='{"reasoning_tokens": 0}'), (30, 7, 12)),
        (_usage(**{CACHED: '{"cached_tokens": null}'}, total_tokens="null"), (30, 7, None)),
        (_usage(**{CACHED: '"none"'}), (30, 7, None)),  # not an object: ignored, as when whole
        ('{"prompt_tokens": 30, "completion_tokens": 7}', (30, 7, None)),
    ],
    ids=["plain", "details", "nulls", "details-not-an-object", "no-total"],
)  # fmt: skip
async def test_an_honest_streamed_usage_still_counts(
    servers, make_prompt, usage: str, expected: tuple[int, int, int | None]
) -> None:
    url = _serving(servers, streamed(usage, end="\r\n\r\n"), piece=11)
    response = await _ask(url, make_prompt)
    assert response.text == ANSWER
    got = response.usage
    assert (got.prompt_tokens, got.completion_tokens, got.cached_prompt_tokens) == expected
    assert got.requests == 1 and not got.counted


async def test_a_stream_without_usage_is_still_counted_locally(servers, make_prompt) -> None:
    response = await _ask(_serving(servers, streamed(None)), make_prompt)
    assert response.text == ANSWER and response.usage.counted
    assert response.usage.completion_tokens > 0


async def test_text_that_names_usage_or_is_escaped_is_not_a_usage(servers, make_prompt) -> None:
    text = 'The "usage": "7" of caf\u00e9 \\u0075sage'
    delta = {"index": 0, "finish_reason": None, "delta": {"content": text}}
    extra = _event(_chunk(choices=[delta], usage=None))  # json.dumps escapes the é as \u00e9
    body = streamed(json.dumps(HONEST)).replace(HEAD, HEAD + extra, 1)
    pieces: list[str] = []
    async with OpenAIModel("m", base_url=_serving(servers, body), api_key="k") as chat:
        prompt = make_prompt(chat.count_tokens)
        response = await chat.request(ModelRequest(prompt=prompt, stream=pieces.append))
    assert response.text == text + ANSWER
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (30, 7)


async def test_what_follows_done_is_not_read_so_not_checked(servers, make_prompt) -> None:
    # The SDK stops at [DONE]: a chunk after it is never parsed, so never charged.
    after = "data: " + _chunk(choices=[])[:-1] + ', "usage": "junk"}\n\n'
    url = _serving(servers, streamed(json.dumps(HONEST), after=after))
    response = await _ask(url, make_prompt)
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (30, 7)


@pytest.fixture
def ledger(tmp_path: Any) -> Iterator[RunLedger]:
    ledger = RunLedger(f"sqlite:///{tmp_path / 'runs.db'}")
    ledger.start_run(run_id="run-1", team="t", goal=None, graph=None, config={})
    yield ledger
    ledger.close()


async def test_a_refused_streamed_usage_is_recorded_and_not_charged(
    servers, ledger, make_prompt
) -> None:
    url = _serving(servers, streamed(_usage(completion_tokens='"7"')))
    meter = BudgetMeter(RunBudget(tokens=100_000), run_id="run-1")
    caller = ModelCaller(
        ledger=ledger, run_id="run-1", meter=meter,
        retry_policy=RetryPolicy(initial_s=0, max_s=0, jitter_s=0),
        listener=lambda *event: None,
    )  # fmt: skip
    agent = Agent(name="writer", instructions="You write.")
    async with OpenAIModel("m", base_url=url, api_key="k") as chat:
        with pytest.raises(ModelError):
            await caller.call(
                subject="task:t", agent=agent, model=chat, prompt=make_prompt(chat.count_tokens)
            )
    line = f"openai:m: the server at {url}/ streamed usage.completion_tokens as a str '7', "
    (record,) = ledger.calls("run-1")
    assert record.error == f"attempt 1 of 3: {line}not an integer"
    assert record.usage.total_tokens == 0 and record.usage.requests == 0  # none paid
    assert meter.tokens == 0  # 37 tokens the server never reported as counts
    assert len(servers[-1].heads) == 1  # not retried


async def test_an_anthropic_usage_in_events_ended_lf_then_crlf_is_checked(
    servers, make_prompt
) -> None:
    # "\n\r\n" (a line, then a blank line) ends an event for the SDK, but is none of the
    # double line-ends its decoder cuts on, so it decodes those events when the body ends;
    # the raw check, which cut the same way, never looked at them and took ``"15"`` as 15.
    anthropic = pytest.importorskip("clearance.models._anthropic")
    message = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 25, "output_tokens": 1},
    }  # fmt: skip
    events = [
        ("message_start", {"message": message}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": ANSWER}}),
        ("content_block_stop", {"index": 0}),
        ("message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": "15"}}),
        ("message_stop", {}),
    ]  # fmt: skip
    body = b"".join(
        f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\r\n".encode()
        for name, data in events
    )
    url = _serving(servers, HEAD + body).removesuffix("/v1")
    async with anthropic.AnthropicModel("m", base_url=url, api_key="k") as chat:
        request = ModelRequest(prompt=make_prompt(chat.count_tokens), stream=lambda piece: None)
        with pytest.raises(ModelError) as info:
            await chat.request(request)
    assert str(info.value) == (
        f"anthropic:m: the server at {url} streamed usage.output_tokens as a str '15', "
        "not an integer"
    )


async def test_a_null_usage_elsewhere_in_the_chunk_does_not_hide_the_real_one(
    servers, make_prompt
) -> None:
    # A chunk whose only ``usage`` keys are ``"usage": null`` is not decoded again; one
    # that holds another ``usage`` too is.
    usage = _usage(completion_tokens="true")
    hostile = _chunk(choices=[], x={"usage": None})[:-1] + f', "usage" : {usage}}}'
    body = streamed(None).replace(b"data: [DONE]", _event(hostile) + b"data: [DONE]")
    url = _serving(servers, body)
    with pytest.raises(ModelError) as info:
        await _ask(url, make_prompt)
    assert str(info.value).endswith(
        "streamed usage.completion_tokens as a bool True, not an integer"
    )
