"""A model server's ``finish_reason`` is recorded short and printable, whatever it sends.

A text ``finish_reason`` was kept as sent, whatever its length: an OpenAI-compatible server
(whole or streamed), an Anthropic ``stop_reason`` or any `ChatModel` could put hundreds of
kilobytes (or escape sequences) there, and they landed in the ledger, ``inspect`` and the
run page; on PostgreSQL, whose ``calls.finish_reason`` column holds 64 characters, the
ledger's write failed and the run with it. The values servers really send are kept as
sent (``"length"`` still marks an answer cut off); any other text is kept with its
controls as escapes and at most 64 characters. Real servers on 127.0.0.1.
"""

from __future__ import annotations

import dataclasses
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from raw_http import Server

from clearance import Agent, AgentLimits, Orchestrator, RunLedger, Task, TaskStatus, Team
from clearance._agents.answer_checks import checked_response
from clearance._context.answers import TRUNCATED_MARK, mark_answer
from clearance.models import ModelRequest, ModelResponse, Usage
from clearance.models._finish import MAX_FINISH_REASON_CHARS, bounded_finish_reason
from clearance.models._openai import OpenAIModel
from clearance.testing import FunctionModel

BASE = {"id": "x", "object": "chat.completion", "created": 0, "model": "m"}
ANSWER = "An answer whose finish reason is checked."
HUGE = "x" * 200_000
CUT = "x" * (MAX_FINISH_REASON_CHARS - 3) + "..."
ESCAPES = "stop\x1b]52;c;aGk=\x07\u202e\r\nnow"
ESCAPED = "stop\\x1b]52;c;aGk=\\x07\\u202e now"
# (what the server sends, what is recorded)
CASES = [
    ("stop", "stop"),
    ("length", "length"),
    ("tool_calls", "tool_calls"),
    ("content_filter", "content_filter"),
    ("abort", "abort"),  # an unknown short reason (vLLM's) is kept as sent
    ("x" * MAX_FINISH_REASON_CHARS, "x" * MAX_FINISH_REASON_CHARS),
    ("x" * (MAX_FINISH_REASON_CHARS + 1), CUT),
    (HUGE, CUT),
    (ESCAPES, ESCAPED),
]
IDS = ["stop", "length", "tool_calls", "content_filter", "abort", "at-cap", "over-cap", "huge",
       "escapes"]  # fmt: skip


def _http(body: bytes, content_type: str) -> bytes:
    head = f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}"
    return head.encode() + b"\r\nConnection: close\r\n\r\n" + body


def openai_whole(reason: str) -> bytes:
    message = {"role": "assistant", "content": ANSWER}
    choice = {"index": 0, "message": message, "finish_reason": reason}
    usage = {"prompt_tokens": 30, "completion_tokens": 7}
    return _http(json.dumps({**BASE, "choices": [choice], "usage": usage}).encode(),
                 "application/json")  # fmt: skip


def openai_streamed(reason: str) -> bytes:
    chunk = {**BASE, "object": "chat.completion.chunk"}
    first = {"index": 0, "finish_reason": None, "delta": {"role": "assistant", "content": ANSWER}}
    last = {"index": 0, "delta": {}, "finish_reason": reason}
    usage = {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37}
    events = [{**chunk, "choices": [first]}, {**chunk, "choices": [last]},
              {**chunk, "choices": [], "usage": usage}]  # fmt: skip
    body = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    return head + body


def anthropic_whole(reason: str) -> bytes:
    body = json.dumps({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "text", "text": ANSWER}], "stop_reason": reason,
        "stop_sequence": None, "usage": {"input_tokens": 30, "output_tokens": 7},
    }).encode()  # fmt: skip
    return _http(body, "application/json")


def anthropic_streamed(reason: str) -> bytes:
    message = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 30, "output_tokens": 1},
    }  # fmt: skip
    events = [
        ("message_start", {"message": message}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": ANSWER}}),
        ("content_block_stop", {"index": 0}),
        ("message_delta", {"delta": {"stop_reason": reason, "stop_sequence": None},
                           "usage": {"output_tokens": 7}}),
        ("message_stop", {}),
    ]  # fmt: skip
    body = b"".join(
        f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()
        for name, data in events
    )
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    return head + body


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.close()


def _serving(servers: list[Server], answer: bytes, path: str) -> str:
    def handler(n: int, conn: socket.socket) -> None:
        conn.sendall(answer)

    servers.append(Server(handler))
    return f"http://127.0.0.1:{servers[-1].port}{path}"


async def _ask_openai(url: str, make_prompt: Any, *, stream: bool) -> ModelResponse:
    pieces: list[str] = []
    async with OpenAIModel("m", base_url=url, api_key="k") as chat:
        request = ModelRequest(
            prompt=make_prompt(chat.count_tokens), stream=pieces.append if stream else None
        )
        return await chat.request(request)


async def _ask_anthropic(url: str, make_prompt: Any, *, stream: bool) -> ModelResponse:
    pytest.importorskip("anthropic", reason="the anthropic extra is not installed")
    from clearance.models._anthropic import AnthropicModel

    pieces: list[str] = []
    async with AnthropicModel("m", base_url=url, api_key="k") as chat:
        request = ModelRequest(
            prompt=make_prompt(chat.count_tokens), stream=pieces.append if stream else None
        )
        return await chat.request(request)


@pytest.mark.network
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(("sent", "recorded"), CASES, ids=IDS)
async def test_an_openai_finish_reason_is_kept_short_and_printable(
    servers, make_prompt, stream: bool, sent: str, recorded: str
) -> None:
    answer = openai_streamed(sent) if stream else openai_whole(sent)
    response = await _ask_openai(_serving(servers, answer, "/v1"), make_prompt, stream=stream)
    assert response.text == ANSWER
    assert response.finish_reason == recorded
    assert len(response.finish_reason) <= MAX_FINISH_REASON_CHARS
    # Only "length" marks an answer cut off, as before.
    marked = mark_answer(response.text, finish_reason=response.finish_reason)
    assert marked.truncated is (sent == "length")


ANTHROPIC_CASES = [
    ("end_turn", "stop"),
    ("max_tokens", "length"),
    ("refusal", "content_filter"),
    ("pause_turn", "pause_turn"),
    ("x" * 70, CUT),
    (HUGE, CUT),
    (ESCAPES, ESCAPED),
]


@pytest.mark.network
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(("sent", "recorded"), ANTHROPIC_CASES, ids=lambda v: str(v)[:12])
async def test_an_anthropic_stop_reason_is_kept_short_and_printable(
    servers, make_prompt, stream: bool, sent: str, recorded: str
) -> None:
    answer = anthropic_streamed(sent) if stream else anthropic_whole(sent)
    response = await _ask_anthropic(_serving(servers, answer, ""), make_prompt, stream=stream)
    assert response.text == ANSWER
    assert response.finish_reason == recorded
    marked = mark_answer(response.text, finish_reason=response.finish_reason)
    assert marked.truncated is (sent == "max_tokens")


def test_llama_cpp_finish_reason_is_kept_short(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from clearance.models._llama_cpp import LlamaCppModel

    weights = tmp_path / "m.gguf"
    weights.write_bytes(b"never loaded")
    model = LlamaCppModel("m", model_path=str(weights), n_ctx=512)
    usage = {"prompt_tokens": 3, "completion_tokens": 2}
    for sent, recorded in CASES:
        result = {"choices": [{"text": "hi", "finish_reason": sent}], "usage": usage}
        assert model._to_response(result, [], []).finish_reason == recorded, sent[:20]


# -- any ChatModel: checked before it is recorded ---------------------------------------


def _response(reason: Any) -> ModelResponse:
    return ModelResponse(text=ANSWER, usage=Usage(requests=1, prompt_tokens=3,
                         completion_tokens=2), model_id="own:m", finish_reason=reason)  # fmt: skip


@pytest.mark.parametrize(("sent", "recorded"), [*CASES, (None, None)])
def test_checked_response_bounds_any_models_finish_reason(
    make_prompt, sent: str | None, recorded: str | None
) -> None:
    request = ModelRequest(prompt=make_prompt(len))
    agent = Agent(name="writer", instructions="W.")
    checked = checked_response(
        _response(sent), model_id="own:m", agent=agent, request=request, subject="task:t"
    )
    assert checked.finish_reason == recorded
    assert checked.text == ANSWER


def test_bounded_finish_reason_leaves_every_known_value_alone() -> None:
    known = ["stop", "length", "tool_calls", "function_call", "content_filter", "error",
             "end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal",
             "model_context_window_exceeded", ""]  # fmt: skip
    for reason in known:
        assert bounded_finish_reason(reason) is reason
    assert bounded_finish_reason(None) is None
    assert bounded_finish_reason("a" * 300 + "\x1b") == "a" * 61 + "..."
    assert bounded_finish_reason(" " * 300) == "..."


class _OwnModel(FunctionModel):
    """A user's own model whose every answer carries ``reason`` as its finish reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(lambda request: "SYNTH" if request.prompt.manifest.subject ==
                         "synthesis" else ANSWER)  # fmt: skip
        self.reason = reason

    async def request(self, request: ModelRequest) -> ModelResponse:
        response = await super().request(request)
        return dataclasses.replace(response, finish_reason=self.reason)


async def _run_recording(url: str, reason: str) -> tuple[Any, list[Any]]:
    alice = Agent(name="alice", instructions="A.", limits=AgentLimits(retries=0))
    team = Team(agents=(alice,), coordinator=Agent(name="lead", instructions="L."))
    with RunLedger(url) as ledger:
        orchestrator = Orchestrator(team, model=_OwnModel(reason), ledger=ledger)
        result = await orchestrator.run_tasks(
            [Task(id="t1", title="T", description="Do it.", assignee="alice")]
        )
        return result, ledger.calls(result.run_id)


async def test_a_huge_finish_reason_reaches_the_ledger_short(tmp_path: Path) -> None:
    result, calls = await _run_recording(f"sqlite:///{tmp_path / 'runs.db'}", HUGE)
    assert result.status == "completed", result.error
    assert result.tasks["t1"].status is TaskStatus.COMPLETED, result.tasks["t1"].error
    assert [c.finish_reason for c in calls] == [CUT, CUT]
    assert result.tasks["t1"].result == ANSWER
    ledger = b"".join(p.read_bytes() for p in tmp_path.glob("runs.db*"))  # noqa: ASYNC240
    assert b"x" * (MAX_FINISH_REASON_CHARS + 1) not in ledger


@pytest.mark.network
async def test_a_huge_finish_reason_no_longer_fails_a_postgresql_ledger(
    postgres_url: str,
) -> None:
    # calls.finish_reason is VARCHAR(64): the write of the whole reason failed the run.
    result, calls = await _run_recording(postgres_url, "y" * 1_000)
    assert result.status == "completed", result.error
    assert result.tasks["t1"].status is TaskStatus.COMPLETED, result.tasks["t1"].error
    assert [c.finish_reason for c in calls] == ["y" * 61 + "...", "y" * 61 + "..."]


async def test_length_still_marks_a_result_cut_off(tmp_path: Path) -> None:
    result, calls = await _run_recording(f"sqlite:///{tmp_path / 'runs.db'}", "length")
    assert [c.finish_reason for c in calls] == ["length", "length"]
    assert result.tasks["t1"].result.endswith(TRUNCATED_MARK)
