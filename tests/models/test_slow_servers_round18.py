"""Deadlines and caps of the HTTP providers against slow and hostile servers on 127.0.0.1.

A run through the product path (a team file and ``clearance run``) against a server that
answers one task at once and stalls the other (headers, then a trickle that never ends, in
each of the ways a stream can stall): the stalled task ends at its ``limits.timeout_s`` with
a one-line recorded error, and the other task's result stays recorded. Then what a server
puts in an answer's fields (a ``finish_reason`` that is not a short text), and retries
against every kind of ``Retry-After``.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from raw_http import Server
from typer.testing import CliRunner

from clearance import Agent, AgentLimits, ModelError, RetryPolicy, RunLedger
from clearance._agents.caller import ModelCaller
from clearance.cli._app import app
from clearance.models import ModelRequest, ModelResponse, Usage
from clearance.models._anthropic import AnthropicModel
from clearance.models._openai import OpenAIModel

SSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


def oa_chunk(delta: dict[str, Any], finish: Any = None) -> bytes:
    data = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def an_event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()


AN_START = an_event("message_start", {"message": {
    "id": "m", "type": "message", "role": "assistant", "model": "m", "content": [],
    "stop_reason": None, "usage": {"input_tokens": 5, "output_tokens": 0}}}) + an_event(
    "content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})  # fmt: skip


def answer(provider: str, stream: bool, text: str = "FAST-DONE") -> bytes:
    """A whole honest answer of ``text``."""
    if stream and provider == "openai":
        return (SSE + oa_chunk({"role": "assistant", "content": text}) + oa_chunk({}, "stop")
                + b"data: [DONE]\n\n")  # fmt: skip
    if stream:
        return SSE + AN_START + b"".join([
            an_event("content_block_delta", {"index": 0, "delta": {"type": "text_delta",
                                                                  "text": text}}),
            an_event("content_block_stop", {"index": 0}),
            an_event("message_delta", {"delta": {"stop_reason": "end_turn"},
                                       "usage": {"output_tokens": 2}}),
            an_event("message_stop", {}),
        ])  # fmt: skip
    if provider == "openai":
        body = json.dumps({
            "id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2},
        }).encode()  # fmt: skip
    else:
        body = json.dumps({
            "id": "m", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 5, "output_tokens": 2},
        }).encode()  # fmt: skip
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
    return head.encode() + b"\r\nConnection: close\r\n\r\n" + body


def stall(provider: str, how: str) -> Iterator[bytes]:
    """What a stalling server sends: its head, then pieces forever (one per 0.2 s)."""
    if how == "loris":  # a body announced, then one byte a second
        yield b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 99999\r\n\r\n"
        while True:
            yield b" "
            time.sleep(0.8)
    elif how == "never-ends":  # no length, no end: a JSON body that never closes
        yield b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + b'{"id": "x"'
        while True:
            yield b" "
    else:
        yield SSE + (AN_START if provider == "anthropic" and how == "empty-deltas" else b"")
        if how == "empty-deltas" and provider == "openai":
            piece = oa_chunk({"content": ""})
        elif how == "empty-deltas":
            piece = an_event("content_block_delta", {"index": 0, "delta": {"type": "text_delta",
                                                                          "text": ""}})  # fmt: skip
        else:
            piece = b": ping\n\n" if how == "pings" else b"data:\n\n"
        while True:
            yield piece


class Stalling:
    """A server that answers a prompt holding ``FAST`` at once and stalls any other."""

    def __init__(
        self, provider: str, how: str, stream: bool,
        bad: Callable[[], Iterator[bytes]] | None = None,
    ) -> None:  # fmt: skip
        self.provider, self.how, self.stream = provider, how, stream
        self._bad = bad or (lambda: stall(provider, how))
        self.hung_up = 0
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            data = b""
            while b"\r\n\r\n" not in data:
                more = conn.recv(65536)
                if not more:
                    return
                data += more
            head, rest = data.split(b"\r\n\r\n", 1)
            length = next(
                (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                 if line.lower().startswith(b"content-length:")), 0,
            )  # fmt: skip
            while len(rest) < length:
                rest += conn.recv(65536)
            if b"SLOW-TASK" not in rest or b"Completed tasks" in rest:
                conn.sendall(answer(self.provider, self.stream))
                return
            try:
                for piece in self._bad():
                    conn.sendall(piece)
                    time.sleep(0.2)
            except OSError:
                self.hung_up += 1

    def close(self) -> None:
        self._sock.close()


TEAM = """\
name: slow
agents:
  - name: writer
    instructions: You write.
    limits: {timeout_s: 2, retries: 1}
tasks:
  - {id: fast, title: Fast, description: FAST write a note., assignee: writer}
  - {id: slow, title: Slow, description: SLOW-TASK write a note., assignee: writer}
"""


def run(tmp: Path, provider: str, stream: bool, monkeypatch: pytest.MonkeyPatch,
        port: int) -> tuple[Any, str, float]:  # fmt: skip
    monkeypatch.chdir(tmp)
    if provider == "openai":
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "test")
    else:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    (tmp / "team.yaml").write_text(TEAM)
    started = time.monotonic()
    result = CliRunner().invoke(app, [
        "run", "team.yaml", "--model", f"{provider}:m", "--db", f"sqlite:///{tmp / 'runs.db'}",
        *(["--stream"] if stream else []),
    ])  # fmt: skip
    found = re.findall(r"run id: (\S+)", result.output)
    return result, found[-1] if found else "", time.monotonic() - started


STALLS = [  # (provider, how, streamed)
    ("openai", "loris", False), ("anthropic", "loris", False),
    ("openai", "never-ends", False), ("anthropic", "never-ends", False),
    ("openai", "pings", True), ("anthropic", "pings", True),
    ("openai", "empty-deltas", True), ("anthropic", "empty-deltas", True),
    ("anthropic", "empty-data", True),
]  # fmt: skip


@pytest.mark.parametrize(("provider", "how", "stream"), STALLS)
def test_a_stalled_answer_ends_at_timeout_s_and_the_finished_task_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, provider: str, how: str, stream: bool
) -> None:
    server = Stalling(provider, how, stream)
    try:
        result, run_id, elapsed = run(tmp_path, provider, stream, monkeypatch, server.port)
    finally:
        server.close()
    assert run_id, result.output
    assert result.exit_code == 1, result.output
    assert elapsed < 15, elapsed  # 2 s deadline; not the server's forever, nor 600 s
    assert "FAILED     slow: task:slow: timeout_s exceeded: " in result.output
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        tasks = {t.task_id: t for t in ledger.tasks(run_id)}
        calls = ledger.calls(run_id, subject="task:slow")
        events = ledger.events(run_id)
    assert (tasks["fast"].status, tasks["fast"].result) == ("completed", "FAST-DONE")
    assert tasks["slow"].status == "failed"
    assert tasks["slow"].error is not None and "\n" not in tasks["slow"].error
    assert [c.response for c in calls] == [None]  # the deadline is not retried
    assert calls[0].error is not None
    assert calls[0].error.startswith("attempt 1 of 2: task:slow: timeout_s exceeded: ")
    assert [e.data["limit"] for e in events if e.kind == "limit_exceeded"] == ["timeout_s"]


# -- a finish_reason is text, or nothing -----------------------------------------------------


def streamed_finish(finish: Any) -> bytes:
    return (SSE + oa_chunk({"role": "assistant", "content": "SLOW-DONE"}) + oa_chunk({}, finish)
            + b"data: [DONE]\n\n")  # fmt: skip


@pytest.mark.parametrize("finish", [{"why": "x"}, [1, 2], 42, True])
def test_a_streamed_finish_reason_that_is_not_text_fails_the_call_not_the_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, finish: Any
) -> None:
    server = Stalling("openai", "finish", True, bad=lambda: iter([streamed_finish(finish)]))
    (tmp_path / "one.yaml").write_text(TEAM.replace("retries: 1", "retries: 0"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{server.port}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    result = CliRunner().invoke(app, [
        "run", "one.yaml", "--model", "openai:m", "--db", f"sqlite:///{tmp_path / 'runs.db'}",
        "--stream",
    ])  # fmt: skip
    server.close()
    assert result.exit_code == 1, result.output
    assert "LedgerError" not in result.output and "cannot record" not in result.output
    (run_id,) = re.findall(r"run id: (\S+)", result.output)
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        tasks = {t.task_id: t for t in ledger.tasks(run_id)}
        calls = ledger.calls(run_id)
    assert (tasks["fast"].status, tasks["fast"].result) == ("completed", "FAST-DONE")
    assert tasks["slow"].status == "failed"
    kind = {dict: "a dict", list: "a list", int: "an int", bool: "a bool"}[type(finish)]
    (slow,) = [c for c in calls if c.subject == "task:slow"]
    assert slow.response is None and slow.finish_reason is None
    assert slow.error == (
        f"attempt 1 of 1: openai:m: the server at http://127.0.0.1:{server.port}/v1/ streamed "
        f"a malformed event: finish_reason is {kind}, not text"
    )


class _Finishing:
    """A `ChatModel` (a user's own) answering with the given ``finish_reason``."""

    model_id = "mine:m"
    context_window = None

    def __init__(self, finish: Any) -> None:
        self.finish = finish

    async def request(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(text="done", usage=Usage(requests=1, prompt_tokens=3,
                                                      completion_tokens=1),
                             model_id=self.model_id, finish_reason=self.finish)  # fmt: skip

    def count_tokens(self, text: str) -> int:
        return len(text.split())


@pytest.mark.parametrize(
    ("finish", "says"),
    [({"a": 1}, "a dict, not text"), (7, "an int, not text"), (["stop"], "a list, not text")],
)  # fmt: skip
async def test_any_models_finish_reason_is_checked_before_it_is_recorded(
    ledger: RunLedger, make_prompt: Any, finish: Any, says: str
) -> None:
    ledger.start_run(run_id="run-1", team="t", goal=None, graph=None, config={})
    chat = _Finishing(finish)
    caller = ModelCaller(ledger=ledger, run_id="run-1")
    agent = Agent(name="writer", instructions="You write.", limits=AgentLimits(retries=0))
    with pytest.raises(ModelError) as info:
        await caller.call(subject="task:t", agent=agent, model=chat,  # type: ignore[arg-type]
                          prompt=make_prompt(chat.count_tokens))  # fmt: skip
    assert str(info.value) == f"mine:m: the answer's finish_reason is {says}: refused"
    (record,) = ledger.calls("run-1")
    assert record.response is None and record.finish_reason is None
    assert record.error == f"attempt 1 of 1: {info.value}"


@pytest.mark.parametrize("finish", ["stop", "length", "banana", "content_filter", "x" * 500, None])
async def test_an_unknown_finish_reason_text_is_kept_as_it_is(
    ledger: RunLedger, make_prompt: Any, finish: Any
) -> None:
    ledger.start_run(run_id="run-1", team="t", goal=None, graph=None, config={})
    chat = _Finishing(finish)
    caller = ModelCaller(ledger=ledger, run_id="run-1")
    agent = Agent(name="writer", instructions="You write.")
    response = await caller.call(subject="task:t", agent=agent, model=chat,  # type: ignore[arg-type]
                                 prompt=make_prompt(chat.count_tokens))  # fmt: skip
    # Kept: a word as it is; a longer text cut to the 64 characters its column holds
    # (`tests/models/test_finish_reason_round20.py` holds every other form).
    kept = "x" * 61 + "..." if finish == "x" * 500 else finish
    assert response.finish_reason == kept
    (record,) = ledger.calls("run-1")
    assert record.finish_reason == kept and record.response == "done"


# -- retries: capped in count and time, whatever the server's Retry-After --------------------

RETRY_AFTERS = ["0", "-5", "999999999", "1e400", "nan", "soon", "",
                "Thu, 01 Jan 1970 00:00:00 GMT", "Fri, 01 Jan 9999 00:00:00 GMT"]  # fmt: skip


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("status", [429, 503])
@pytest.mark.parametrize("retry_after", RETRY_AFTERS)
async def test_retries_are_capped_whatever_the_retry_after(
    serve: Callable[..., Server], ledger: RunLedger, make_prompt: Any, provider: str,
    status: int, retry_after: str,
) -> None:  # fmt: skip
    ledger.start_run(run_id="run-1", team="t", goal=None, graph=None, config={})
    body = b'{"error": {"message": "busy"}}'
    server = serve(lambda n, conn: conn.sendall(
        f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
        f"Retry-After: {retry_after}\r\n\r\n".encode() + body
    ))  # fmt: skip
    chat: Any = (
        OpenAIModel("m", base_url=f"http://127.0.0.1:{server.port}/v1", api_key="k")
        if provider == "openai"
        else AnthropicModel("m", base_url=f"http://127.0.0.1:{server.port}", api_key="k")
    )
    policy = RetryPolicy(initial_s=0.1, max_s=0.1, jitter_s=0)
    caller = ModelCaller(ledger=ledger, run_id="run-1", retry_policy=policy)
    agent = Agent(name="writer", instructions="You write.",
                  limits=AgentLimits(timeout_s=3, retries=4))  # fmt: skip
    started = time.monotonic()
    async with chat:
        with pytest.raises(ModelError) as info:
            await caller.call(subject="task:t", agent=agent, model=chat,
                              prompt=make_prompt(chat.count_tokens))  # fmt: skip
    assert time.monotonic() - started < 8  # the 3 s deadline holds over every wait
    assert info.value.status_code == status
    assert 1 <= len(server.heads) <= 5  # the first attempt and at most 4 retries
    recorded = [c.error for c in ledger.calls("run-1")]
    assert len(recorded) == len(server.heads)
    assert all(e is not None and f"HTTP {status}" in e and "\n" not in e for e in recorded)
