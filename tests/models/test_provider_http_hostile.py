"""The HTTP providers (``openai:``, ``anthropic:``) against a hostile server on 127.0.0.1.

Each server here is a real socket speaking HTTP by hand, so it can answer what no honest
server does: a ``Retry-After`` past the call's deadline, the API key echoed back in an error,
a redirect elsewhere, an error body of hundreds of megabytes, a stream that never ends its
event or is cut before its finish. Calls go through `ModelCaller` with a real ledger, so each
test asserts what was recorded as well as the one-line error.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import pytest
from raw_http import Handler, Server

from clearance import Agent, AgentLimits, LimitExceeded, ModelError, RetryPolicy, RunLedger
from clearance._agents.caller import ModelCaller
from clearance._core.vocabulary import EventKind
from clearance.models._anthropic import AnthropicModel
from clearance.models._http_body import MAX_RESPONSE_BYTES
from clearance.models._openai import OpenAIModel

KEY = "sk-test-0123456789abcdef"


@pytest.fixture
def ledger(tmp_path: Any) -> Iterator[RunLedger]:
    ledger = RunLedger(f"sqlite:///{tmp_path / 'runs.db'}")
    ledger.start_run(run_id="run-1", team="t", goal=None, graph=None, config={})
    yield ledger
    ledger.close()


def answer(status: int, body: bytes = b"", headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    head = f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers)
    return head.encode() + b"\r\n" + body


def completion(text: str = "hello") -> bytes:
    return json.dumps({
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2},
    }).encode()  # fmt: skip


def message(text: str = "hello") -> bytes:
    return json.dumps({
        "id": "m", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 5, "output_tokens": 2},
    }).encode()  # fmt: skip


def model(provider: str, server: Server) -> Any:
    if provider == "openai":
        return OpenAIModel("m", base_url=f"http://127.0.0.1:{server.port}/v1", api_key=KEY)
    return AnthropicModel("m", base_url=f"http://127.0.0.1:{server.port}", api_key=KEY)


async def call(
    ledger: RunLedger,
    chat: Any,
    make_prompt: Any,
    *,
    stream: bool = False,
    policy: RetryPolicy | None = None,
    **limits: Any,
) -> Any:
    heard: list[Any] = []
    caller = ModelCaller(
        ledger=ledger, run_id="run-1",
        retry_policy=policy or RetryPolicy(initial_s=0, max_s=0, jitter_s=0),
        listener=(lambda *event: heard.append(event)) if stream else None,
    )  # fmt: skip
    agent = Agent(name="writer", instructions="You write.", limits=AgentLimits(**limits))
    async with chat:
        return await caller.call(
            subject="task:t", agent=agent, model=chat, prompt=make_prompt(chat.count_tokens)
        )


def errors(ledger: RunLedger) -> list[str | None]:
    return [c.error for c in ledger.calls("run-1")]


# -- the call's deadline wins over the server's Retry-After ------------------------------


@pytest.mark.parametrize("retry_after", ["3600", "Fri, 01 Jan 2100 00:00:00 GMT", "299"])
async def test_a_retry_after_past_the_calls_deadline_is_not_waited(
    serve, ledger, make_prompt, retry_after: str
) -> None:
    server = serve(lambda n, conn: conn.sendall(answer(
        429, b'{"error": {"message": "slow down"}}', (("Retry-After", retry_after),)
    )))  # fmt: skip
    started = time.monotonic()
    with pytest.raises(ModelError) as info:  # the default policy waits up to 300 s
        await call(ledger, model("openai", server), make_prompt, policy=RetryPolicy(),
                   timeout_s=5, retries=3)  # fmt: skip
    assert time.monotonic() - started < 3  # not 299 s, nor until the deadline
    assert info.value.status_code == 429
    assert len(server.heads) == 1  # no retry could have finished in time
    (error,) = errors(ledger)
    assert error is not None
    assert error.startswith("attempt 1 of 4: openai:m: HTTP 429 from http://127.0.0.1:")
    assert error.endswith("slow down")


async def test_a_storm_of_500s_is_retried_to_the_cap_and_every_attempt_recorded(
    serve, ledger, make_prompt
) -> None:
    server = serve(lambda n, conn: conn.sendall(answer(
        500, b'{"error": {"message": "down"}}', (("Retry-After", "0"),)
    )))  # fmt: skip
    with pytest.raises(ModelError, match="HTTP 500"):
        await call(ledger, model("anthropic", server), make_prompt, timeout_s=5, retries=4)
    assert len(server.heads) == 5
    recorded = errors(ledger)
    assert [e.split(":")[0] for e in recorded if e] == [f"attempt {n} of 5" for n in range(1, 6)]


async def test_a_backoff_past_the_deadline_is_not_waited_either(serve, ledger, make_prompt) -> None:
    server = serve(lambda n, conn: conn.sendall(answer(503, b"{}")))
    started = time.monotonic()
    with pytest.raises(ModelError, match="HTTP 503"):
        await call(ledger, model("openai", server), make_prompt,
                   policy=RetryPolicy(initial_s=30, max_s=30, jitter_s=0),
                   timeout_s=5, retries=2)  # fmt: skip
    assert time.monotonic() - started < 3
    assert len(errors(ledger)) == 1


# -- the API key never reaches an error, the ledger or the terminal ------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("status", [401, 500])
async def test_an_api_key_the_server_echoes_is_taken_out_of_the_error(
    serve, ledger, make_prompt, provider: str, status: int, tmp_path: Any
) -> None:
    body = json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}"}}).encode()
    server = serve(lambda n, conn: conn.sendall(answer(status, body)))
    with pytest.raises(ModelError) as info:
        await call(ledger, model(provider, server), make_prompt, timeout_s=5, retries=1)
    assert KEY in server.heads[0]  # it was sent, as it must be
    assert KEY not in str(info.value)
    assert "Incorrect API key provided: [api key]" in str(info.value)
    recorded = errors(ledger)
    assert len(recorded) == (2 if status == 500 else 1)
    assert all(e and "[api key]" in e and KEY not in e for e in recorded)
    ledger.close()
    assert KEY.encode() not in (tmp_path / "runs.db").read_bytes()


def test_clearance_run_and_inspect_never_show_the_echoed_key(serve, tmp_path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from clearance.cli import app

    body = json.dumps({"error": {"message": f"bad key {KEY}"}}).encode()
    server = serve(lambda n, conn: conn.sendall(answer(401, body)))
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{server.port}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    (tmp_path / "team.yaml").write_text(
        "name: t\nagents:\n  - {name: writer, instructions: You write.}\n"
        "tasks:\n  - {id: note, title: Note, description: Write a note., assignee: writer}\n"
    )
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    run = CliRunner().invoke(app, ["run", str(tmp_path / "team.yaml"), "--model", "openai:m",
                                   "--db", db])  # fmt: skip
    assert run.exit_code != 0, run.output
    assert "HTTP 401" in run.output and "bad key [api key]" in run.output
    assert server.heads and all(KEY in head for head in server.heads)
    run_id = run.output.split("run id: ")[1].split()[0]
    shown = CliRunner().invoke(app, ["inspect", run_id, "--json", "--db", db])
    assert shown.exit_code == 0, shown.output
    assert "bad key [api key]" in shown.output
    for text in (run.output, shown.output):
        assert KEY not in text
    with sqlite3.connect(tmp_path / "runs.db") as db_file:
        dump = "\n".join(db_file.iterdump())
    assert KEY not in dump


# -- redirects are not followed ------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("status", [301, 307, 308])
async def test_a_redirect_is_an_error_not_a_second_request(
    serve, ledger, make_prompt, provider: str, status: int
) -> None:
    elsewhere = serve(lambda n, conn: conn.sendall(
        answer(200, completion("from elsewhere") if provider == "openai" else message("x"))
    ))  # fmt: skip
    path = "/v1/chat/completions" if provider == "openai" else "/v1/messages"
    target = f"http://localhost:{elsewhere.port}{path}"
    server = serve(lambda n, conn: conn.sendall(answer(status, b"", (("Location", target),))))
    with pytest.raises(ModelError) as info:
        await call(ledger, model(provider, server), make_prompt, timeout_s=5, retries=2)
    assert elsewhere.heads == []  # the prompt went nowhere else
    assert info.value.status_code == status
    assert not info.value.transient
    assert f"(a redirect to {target!r}, not followed)" in str(info.value)
    (error,) = errors(ledger)
    assert error is not None
    assert error.startswith(f"attempt 1 of 3: {provider}:m: HTTP {status} from http://127.0.0.1")


# -- bodies are read to a cap -------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_huge_error_body_is_not_read_whole(
    serve, ledger, make_prompt, provider: str
) -> None:
    size = 512 * 1024 * 1024
    block = b"x" * (1024 * 1024)

    def flood(n: int, conn: socket.socket) -> None:
        server.send(conn, answer(500)[:-2].replace(b"Length: 0", f"Length: {size}".encode())
                    + b"\r\n")  # fmt: skip
        for _ in range(size // len(block)):
            server.send(conn, block)

    server = serve(flood)
    started = time.monotonic()
    with pytest.raises(ModelError) as info:
        await call(ledger, model(provider, server), make_prompt, timeout_s=30, retries=0)
    assert time.monotonic() - started < 10
    assert info.value.status_code == 500
    await asyncio.sleep(0.2)
    assert server.sent < 32 * 1024 * 1024  # the client hung up long before 512 MB
    (error,) = errors(ledger)
    assert error is not None and f"{provider}:m: HTTP 500" in error


async def test_a_streamed_event_that_never_ends_is_refused_at_the_cap(
    serve, ledger, make_prompt
) -> None:
    block = b"a" * (1024 * 1024)

    def endless(n: int, conn: socket.socket) -> None:
        server.send(conn, b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                          b"Connection: close\r\n\r\n" + b'data: {"x": "')  # fmt: skip
        for _ in range(1024):
            server.send(conn, block)

    server = serve(endless)
    with pytest.raises(ModelError) as info:
        await call(ledger, model("openai", server), make_prompt, stream=True,
                   timeout_s=60, retries=0)  # fmt: skip
    assert str(info.value) == (
        f"openai:m: the answer from http://127.0.0.1:{server.port} is over "
        f"{MAX_RESPONSE_BYTES:,} bytes: refused"
    )
    assert not info.value.transient
    await asyncio.sleep(0.2)
    assert server.sent < MAX_RESPONSE_BYTES + 32 * 1024 * 1024
    assert errors(ledger) == [f"attempt 1 of 1: {info.value}"]


# -- a stream cut before its end is not a whole answer --------------------------------------


def _openai_stream(n: int, conn: socket.socket) -> None:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        data = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
        return b"data: " + json.dumps(data).encode() + b"\n\n"

    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
    conn.sendall(chunk({"role": "assistant", "content": "The answer is"}))
    if n == 1:
        return  # the connection closes mid-answer
    conn.sendall(chunk({"content": " 42."}) + chunk({}, "stop") + b"data: [DONE]\n\n")


def _anthropic_stream(n: int, conn: socket.socket) -> None:
    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()

    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
    conn.sendall(
        event("message_start", {"message": {
            "id": "m", "type": "message", "role": "assistant", "model": "m", "content": [],
            "stop_reason": None, "usage": {"input_tokens": 5, "output_tokens": 0}}})
        + event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
        + event("content_block_delta", {"index": 0, "delta": {"type": "text_delta",
                                                             "text": "The answer is"}})
    )  # fmt: skip
    if n == 1:
        return
    conn.sendall(
        event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": " 42."}})
        + event("content_block_stop", {"index": 0})
        + event("message_delta", {"delta": {"stop_reason": "end_turn"},
                                  "usage": {"output_tokens": 4}})
        + event("message_stop", {})
    )  # fmt: skip


@pytest.mark.parametrize(
    ("provider", "handler", "missing"),
    [("openai", _openai_stream, "finish_reason"), ("anthropic", _anthropic_stream, "stop_reason")],
)
async def test_a_stream_cut_before_its_end_is_retried_not_taken_as_the_answer(
    serve, ledger, make_prompt, provider: str, handler: Handler, missing: str
) -> None:
    server = serve(handler)
    response = await call(ledger, model(provider, server), make_prompt, stream=True,
                          timeout_s=10, retries=1)  # fmt: skip
    assert response.text == "The answer is 42."
    assert len(server.heads) == 2
    first, second = ledger.calls("run-1")
    assert first.error == (
        f"attempt 1 of 2: {provider}:m: the stream ended before the answer was finished "
        f"(no {missing}): cut off"
    )
    assert first.response is None
    assert second.error is None and second.response == "The answer is 42."


async def test_a_cut_stream_without_retries_fails_the_call(serve, ledger, make_prompt) -> None:
    server = serve(lambda n, conn: _openai_stream(1, conn))
    with pytest.raises((ModelError, LimitExceeded)) as info:
        await call(ledger, model("openai", server), make_prompt, stream=True,
                   timeout_s=10, retries=0)  # fmt: skip
    assert isinstance(info.value, ModelError) and info.value.transient
    assert [c.response for c in ledger.calls("run-1")] == [None]


# -- a streamed tool input left open is not run as a lenient parse --------------------------

TOOLS = ({"type": "function", "function": {
    "name": "remove", "description": "Remove files.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                                                   "force": {"type": "boolean"}}}}},)  # fmt: skip


@pytest.mark.parametrize(
    ("pieces", "arguments"),
    [
        (
            ['{"force": true, ', '"path": "/data/rep'],
            {"_raw": '{"force": true, "path": "/data/rep'},
        ),
        (['{"force": true, ', '"path": "notes/x"}'], {"force": True, "path": "notes/x"}),
    ],
)
async def test_an_anthropic_streamed_tool_input_left_open_is_raw_not_a_subset(
    serve, ledger, make_prompt, pieces: list[str], arguments: dict[str, Any]
) -> None:
    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()

    def handler(n: int, conn: socket.socket) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
            + event("message_start", {"message": {
                "id": "m", "type": "message", "role": "assistant", "model": "m", "content": [],
                "stop_reason": None, "usage": {"input_tokens": 5, "output_tokens": 0}}})
            + event("content_block_start", {"index": 0, "content_block": {
                "type": "tool_use", "id": "toolu_1", "name": "remove", "input": {}}})
            + b"".join(event("content_block_delta", {"index": 0, "delta": {
                "type": "input_json_delta", "partial_json": p}}) for p in pieces)
            + event("content_block_stop", {"index": 0})
            + event("message_delta", {"delta": {"stop_reason": "tool_use"},
                                      "usage": {"output_tokens": 9}})
            + event("message_stop", {})
        )  # fmt: skip

    server = serve(handler)
    chat = model("anthropic", server)
    caller = ModelCaller(ledger=ledger, run_id="run-1", listener=lambda *event: None)
    agent = Agent(name="writer", instructions="You write.", limits=AgentLimits(timeout_s=10))
    async with chat:
        prompt = make_prompt(chat.count_tokens)
        response = await caller.call(
            subject="task:t", agent=agent, model=chat, prompt=prompt, tools=TOOLS
        )
    (tool_call,) = response.tool_calls
    assert (tool_call.name, tool_call.arguments) == ("remove", arguments)
    (recorded,) = ledger.events("run-1", kind=EventKind.MODEL_TOOL_CALLS)
    assert recorded.data["tool_calls"][0]["arguments"] == arguments
