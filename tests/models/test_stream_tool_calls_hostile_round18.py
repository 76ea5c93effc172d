"""Streamed OpenAI tool calls whose id or name a later piece changes (real servers on 127.0.0.1).

A call's id and name come in its first piece; some servers repeat them in every piece, which
is fine. A server that sends a different id or name for the same ``index`` later had it merged
silently, keeping the first: the model's answer was taken as a call it never made whole. Such
a stream is now a malformed answer, refused in one line naming the index and the change,
recorded as the call's error, and no tool runs under either name.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from raw_http import Server

from clearance import Agent, ModelError, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance.models import ModelRequest
from clearance.models._openai import OpenAIModel

HEAD_SSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    data = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def _sse(*pieces: dict[str, Any]) -> bytes:
    """A stream of tool-call pieces, finished with ``tool_calls`` and usage."""
    usage = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3,
                                      "total_tokens": 10}}  # fmt: skip
    return (
        _chunk({"role": "assistant", "content": None})
        + b"".join(_chunk({"tool_calls": [piece]}) for piece in pieces)
        + _chunk({}, "tool_calls")
        + b"data: " + json.dumps(usage).encode() + b"\n\n"
        + b"data: [DONE]\n\n"
    )  # fmt: skip


@pytest.fixture
def serve() -> Iterator[Any]:
    """``serve(body) -> (url, server)``: every request answered with ``body`` as a stream."""
    started: list[Server] = []

    def start(body: bytes) -> tuple[str, Server]:
        def answer(n: int, conn: socket.socket) -> None:
            conn.sendall(HEAD_SSE + body)

        started.append(Server(answer))
        return f"http://127.0.0.1:{started[-1].port}", started[-1]

    yield start
    for server in started:
        server.close()


async def _streamed(url: str, prompt: Any) -> Any:
    async with OpenAIModel("m", base_url=f"{url}/v1", api_key="k") as chat:
        return await chat.request(
            ModelRequest(prompt=prompt, max_tokens=1000, stream=lambda piece: None)
        )


def _piece(index: int, *, call_id: str | None = None, name: str | None = None,
           arguments: str | None = None) -> dict[str, Any]:  # fmt: skip
    piece: dict[str, Any] = {"index": index}
    if call_id is not None:
        piece["id"] = call_id
    function = {k: v for k, v in (("name", name), ("arguments", arguments)) if v is not None}
    if function:
        piece["function"] = function
    return piece


RENAMED = (
    _piece(0, call_id="call_a", name="lookup", arguments='{"q": '),
    _piece(0, name="wipe", arguments='"x"}'),
)
REKEYED = (
    _piece(0, call_id="call_a", name="lookup", arguments='{"q": '),
    _piece(0, call_id="call_b", arguments='"x"}'),
)


@pytest.mark.parametrize(
    ("pieces", "what"),
    [
        (RENAMED, "tool call 0's name changed from 'lookup' to 'wipe'"),
        (REKEYED, "tool call 0's id changed from 'call_a' to 'call_b'"),
        # The second call (index 1) renamed after the first call was whole.
        ((_piece(0, call_id="a", name="lookup", arguments="{}"),
          _piece(1, call_id="b", name="lookup", arguments="{"),
          _piece(1, call_id="b", name="lookup\x1b[2J", arguments="}")),
         "tool call 1's name changed from 'lookup' to 'lookup\\x1b[2J'"),
    ],
)  # fmt: skip
async def test_a_changed_id_or_name_is_a_malformed_answer(serve, make_prompt, pieces, what):
    url, _ = serve(_sse(*pieces))
    with pytest.raises(ModelError) as info:
        await _streamed(url, make_prompt(len))
    assert (
        str(info.value) == f"openai:m: the server at {url}/v1/ streamed a malformed event: {what}"
    )
    assert not info.value.transient  # the same server would answer the same


async def test_an_id_and_name_repeated_in_every_piece_is_one_call(serve, make_prompt):
    # Some servers repeat the id and name in each piece, or send them empty after the first.
    pieces = (
        _piece(0, call_id="call_a", name="lookup", arguments=""),
        _piece(0, call_id="call_a", name="lookup", arguments='{"q": '),
        _piece(0, call_id="", name="", arguments='"x"'),
        _piece(0, call_id="call_a", name="lookup", arguments="}"),
        _piece(1, name="lookup", arguments='{"q": "y"}'),
        _piece(1, call_id="call_b"),  # an id that comes after the name: still the first
    )
    url, _ = serve(_sse(*pieces))
    response = await _streamed(url, make_prompt(len))
    got = [(c.id, c.name, c.arguments) for c in response.tool_calls]
    assert got == [("call_a", "lookup", {"q": "x"}), ("call_b", "lookup", {"q": "y"})]


async def test_a_run_records_the_renamed_call_as_the_model_error_and_runs_no_tool(
    tmp_path: Path, serve
) -> None:
    ran: list[tuple[str, Any]] = []

    def lookup(q: str) -> str:
        """Look a word up."""
        ran.append(("lookup", q))
        return "found"

    def wipe(q: str) -> str:
        """Wipe everything."""
        ran.append(("wipe", q))
        return "wiped"

    url, server = serve(_sse(*RENAMED))
    team = Team(agents=(Agent(name="a", instructions="You look words up.",
                              tools=("lookup", "wipe")),))  # fmt: skip
    task = Task(id="t", title="Look up", description="Look up x.", assignee="a")
    line = (f"openai:m: the server at {url}/v1/ streamed a malformed event: "
            "tool call 0's name changed from 'lookup' to 'wipe'")  # fmt: skip
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        async with OpenAIModel("m", base_url=f"{url}/v1", api_key="k") as model:
            result = await Orchestrator(
                team,
                model=model,
                ledger=ledger,
                tools={"lookup": lookup, "wipe": wipe},
                options=RunOptions(workspace_root=tmp_path / "ws", stream_text=True),
            ).run_tasks([task])
        assert ran == []
        assert ledger.tool_calls(result.run_id) == []
        (call,) = ledger.calls(result.run_id, subject="task:t")
        assert (call.error, call.response) == (f"attempt 1 of 3: {line}", None)
        (recorded,) = ledger.tasks(result.run_id)
        assert recorded.status == "failed"
        assert recorded.error is not None and line in recorded.error
        assert "\n" not in recorded.error
        assert verify_run(ledger, result.run_id).ok
        # The synthesis got the same answer; each call was sent once (not retried).
        calls = ledger.calls(result.run_id)
        assert [c.subject for c in calls] == ["task:t", "synthesis"]
        assert {c.error for c in calls} == {f"attempt 1 of 3: {line}"}
    assert len(server.heads) == len(calls)
