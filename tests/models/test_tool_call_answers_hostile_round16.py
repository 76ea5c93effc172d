"""Tool calls in answers from hostile model servers (real servers on 127.0.0.1).

Each answer below is one no honest server sends: an Anthropic stream whose tool inputs run
to megabytes past ``max_response_chars``, or that starts two content blocks at one index (the
SDK joined the second block's input onto the first's), or thousands of blocks; an OpenAI
stream whose ``tool_calls`` is not a list (the error named a Python method's address), whose
call has no name (it was dropped without a word) or arguments that are an object instead of
text (the tool ran with none); a whole answer whose arguments object is over the cap (it was
not counted). Each is now refused in one line, or turned into a tool error for the model (or,
for an object of arguments, taken as a whole answer's is), and ``clearance run`` fails the
task with that line and ``clearance verify`` passes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from raw_http import Server

pytest.importorskip("anthropic", reason="the anthropic extra is not installed")

from clearance import ModelError, RunLedger
from clearance.models import ModelRequest
from clearance.models._anthropic import AnthropicModel
from clearance.models._openai import OpenAIModel
from clearance.models._openai_parse import parse_completion

HEAD_SSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


@pytest.fixture
def serve() -> Iterator[Any]:
    started: list[Server] = []

    def start(body: bytes, head: bytes = HEAD_SSE) -> str:
        def answer(n: int, conn: socket.socket) -> None:
            conn.sendall(head + body)

        started.append(Server(answer))
        return f"http://127.0.0.1:{started[-1].port}"

    yield start
    for server in started:
        server.close()


# -- Anthropic -----------------------------------------------------------------------------


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()


START = _event("message_start", {"message": {
    "id": "m", "type": "message", "role": "assistant", "model": "m", "content": [],
    "stop_reason": None, "usage": {"input_tokens": 5, "output_tokens": 1}}})  # fmt: skip
_DELTA = {"delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 3}}
END = _event("message_delta", _DELTA) + _event("message_stop", {})


def _tool_use(index: int, name: str = "t", call_id: str = "tu") -> bytes:
    block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    return _event("content_block_start", {"index": index, "content_block": block})


def _input(index: int, piece: str) -> bytes:
    delta = {"type": "input_json_delta", "partial_json": piece}
    return _event("content_block_delta", {"index": index, "delta": delta})


def _stop(index: int) -> bytes:
    return _event("content_block_stop", {"index": index})


async def _anthropic(url: str, prompt: Any, *, stream: bool = True) -> Any:
    async with AnthropicModel("m", base_url=url, api_key="k") as chat:
        sink = (lambda piece: None) if stream else None
        return await chat.request(ModelRequest(prompt=prompt, max_tokens=1000, stream=sink))


async def test_anthropic_streamed_tool_input_counts_toward_max_response_chars(
    serve, make_prompt
) -> None:
    # 20 MB of input for max_tokens=1000 (a cap of 97,536 characters) was taken whole.
    pieces = [_input(0, '{"a": "')] + [_input(0, "x" * 100_000)] * 200 + [_input(0, '"}')]
    url = serve(START + _tool_use(0) + b"".join(pieces) + _stop(0) + END)
    started = time.monotonic()
    with pytest.raises(ModelError) as info:
        await _anthropic(url, make_prompt(len))
    assert str(info.value) == (
        "anthropic:m: the server streamed more than 97,536 characters for max_tokens=1000 "
        "(max_response_chars): refused"
    )
    assert time.monotonic() - started < 10


async def test_anthropic_block_index_reused_is_refused_not_joined(serve, make_prompt) -> None:
    # The second block's input went onto the first's; the second tool ran with none.
    body = (START + _tool_use(0, "t", "a") + _input(0, '{"a": 1}') + _stop(0)
            + _tool_use(0, "u", "b") + _input(0, '{"b": 2}') + _stop(0) + END)  # fmt: skip
    url = serve(body)
    with pytest.raises(ModelError) as info:
        await _anthropic(url, make_prompt(len))
    assert str(info.value) == (
        f"anthropic:m: the server at {url} streamed a malformed event: content block 0 "
        "started where block 1 was next"
    )


async def test_anthropic_thousands_of_blocks_are_refused_early(serve, make_prompt) -> None:
    blocks = b"".join(_tool_use(i, call_id=f"c{i}") + _stop(i) for i in range(3000))
    url = serve(START + blocks + END)
    with pytest.raises(ModelError) as info:
        await _anthropic(url, make_prompt(len))
    assert str(info.value).endswith("streamed a malformed event: more than 512 content blocks")


async def test_anthropic_whole_answer_tool_input_counts_toward_the_cap(serve, make_prompt) -> None:
    # A whole body may be 8 bytes per character of the cap: the input was not counted.
    message = {
        "id": "m", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "tool_use", "id": "a", "name": "t", "input": {"a": "x" * 300_000}}],
        "stop_reason": "tool_use", "usage": {"input_tokens": 5, "output_tokens": 3},
    }  # fmt: skip
    body = json.dumps(message).encode()
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n" % len(body))  # fmt: skip
    with pytest.raises(ModelError) as info:
        await _anthropic(serve(body, head), make_prompt(len), stream=False)
    assert "holds 300,010 characters, over the cap of 97,536" in str(info.value)


# -- OpenAI --------------------------------------------------------------------------------


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    data = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def _sse(*deltas: dict[str, Any]) -> bytes:
    return b"".join(_chunk(d) for d in deltas) + _chunk({}, "tool_calls") + b"data: [DONE]\n\n"


async def _openai(url: str, prompt: Any, *, stream: bool = True) -> Any:
    async with OpenAIModel("m", base_url=f"{url}/v1", api_key="k") as chat:
        sink = (lambda piece: None) if stream else None
        return await chat.request(ModelRequest(prompt=prompt, max_tokens=1000, stream=sink))


async def test_openai_streamed_arguments_sent_as_an_object_are_taken_as_a_whole_answers_are(
    serve, make_prompt
) -> None:
    # They were dropped: the tool ran with no arguments (its defaults) instead. A whole
    # answer's object arguments are checked and taken as they are; a stream's now are too.
    call = {"index": 0, "id": "a", "function": {"name": "t", "arguments": {"force": True}}}
    response = await _openai(serve(_sse({"tool_calls": [call]})), make_prompt(len))
    (got,) = response.tool_calls
    assert (got.name, got.arguments) == ("t", {"force": True})
    whole = {"choices": [{"message": {"role": "assistant", "tool_calls": [call]},
                          "finish_reason": "tool_calls"}]}  # fmt: skip
    parsed = parse_completion(json.dumps(whole).encode(), content_type="application/json",
                              model_id="openai:m", max_tokens=1000)  # fmt: skip
    assert [c.arguments for c in parsed.response.tool_calls] == [{"force": True}]


async def test_openai_streamed_arguments_partly_text_partly_an_object_are_a_tool_error(
    serve, make_prompt
) -> None:
    text = {"index": 0, "id": "a", "function": {"name": "t", "arguments": '{"force": '}}
    value = {"index": 0, "function": {"arguments": {"force": True}}}
    response = await _openai(serve(_sse({"tool_calls": [text]}, {"tool_calls": [value]})),
                             make_prompt(len))  # fmt: skip
    (got,) = response.tool_calls
    assert got.arguments == {"_raw": "(arguments sent partly as text, partly as a value)"}


NONAME = "the server streamed tool call 0 with no name, not a tool call"
NOTTEXT = "the server streamed tool call 0's name as an int, not text"


@pytest.mark.parametrize(
    ("function", "line"),
    [
        ({"arguments": '{"x": 1}'}, NONAME),
        ({"name": "", "arguments": "{}"}, NONAME),
        ({"name": 5, "arguments": "{}"}, NOTTEXT),
    ],
)  # fmt: skip
async def test_openai_streamed_call_without_a_name_is_refused_not_dropped(
    serve, make_prompt, function, line
) -> None:
    call = {"index": 0, "id": "a", "function": function}
    with pytest.raises(ModelError) as info:
        await _openai(serve(_sse({"content": "ok"}, {"tool_calls": [call]})), make_prompt(len))
    assert str(info.value) == f"openai:m: {line}"


@pytest.mark.parametrize(
    ("tool_calls", "what"),
    [({"index": 0}, "tool_calls is a dict, not a list"),
     (["x"], "tool call piece 0 is a str, not an object"),
     ([7], "tool call piece 0 is an int, not an object")],
)  # fmt: skip
async def test_openai_streamed_tool_calls_of_the_wrong_shape_are_one_named_line(
    serve, make_prompt, tool_calls, what
) -> None:
    # The line named "<built-in method index of str object at 0x...>".
    url = serve(_sse({"tool_calls": tool_calls}))
    with pytest.raises(ModelError) as info:
        await _openai(url, make_prompt(len))
    assert (
        str(info.value) == f"openai:m: the server at {url}/v1/ streamed a malformed event: {what}"
    )


async def test_openai_whole_answer_arguments_object_counts_toward_the_cap(
    serve, make_prompt
) -> None:
    call = {
        "id": "a",
        "type": "function",
        "function": {"name": "t", "arguments": {"x": "y" * 200_000}},
    }
    body = json.dumps({
        "id": "c", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls",
                     "message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }).encode()  # fmt: skip
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n" % len(body))  # fmt: skip
    with pytest.raises(ModelError) as info:
        await _openai(serve(body, head), make_prompt(len), stream=False)
    assert "holds 200,010 characters, over the cap of 97,536" in str(info.value)


# -- through the CLI -----------------------------------------------------------------------


@pytest.mark.network
def test_cli_run_fails_the_task_in_one_line_and_verify_passes(tmp_path: Path, serve) -> None:
    # A tool call (of a tool the agent was not given, its name holding a terminal escape and a
    # bidirectional override) whose arguments object is over the cap for max_output_tokens 512.
    name = "shell\u202e\x1b[2J"
    call = {
        "id": "a",
        "type": "function",
        "function": {"name": name, "arguments": {"c": "y" * 200_000}},
    }
    body = json.dumps({
        "id": "c", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls",
                     "message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }).encode()  # fmt: skip
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n" % len(body))  # fmt: skip
    url = serve(body, head)
    (tmp_path / "team.yaml").write_text(yaml.safe_dump({
        "name": "hostile-tool-calls", "model": "openai:gpt-test",
        "agents": [{"name": "alpha", "instructions": "You answer."}],
        "tasks": [{"id": "a", "title": "A", "description": "Answer.", "assignee": "alpha"}],
    }))  # fmt: skip
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    env = {**os.environ, "OPENAI_BASE_URL": f"{url}/v1", "OPENAI_API_KEY": "test",
           "PYTHONPATH": str(Path(__file__).parents[2] / "src")}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "clearance", "run", "team.yaml", "--db", db],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "\x1b" not in done.stdout + done.stderr and "\u202e" not in done.stdout + done.stderr
    with RunLedger(db) as ledger:
        (run,) = ledger.list_runs()
        (task,) = ledger.tasks(run.run_id)
        assert task.status == "failed"
        assert task.error is not None and "\n" not in task.error
        assert "over the cap of 81,920 for max_tokens=512 (max_response_chars)" in task.error
        assert ledger.tool_calls(run.run_id) == []  # nothing ran
    verified = subprocess.run(
        [sys.executable, "-m", "clearance", "verify", run.run_id, "--db", db],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr
