"""Streaming: providers stream through the one model caller; a run's events as an async stream.

The model server is a real local OpenAI-compatible server answering with server-sent events.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from clearance import Agent, AgentLimits, Orchestrator, RunLedger, Task, Team
from clearance._agents.caller import ModelCaller
from clearance._context.verify import verify_run
from clearance._core.errors import ConfigError, LimitExceeded, ModelError
from clearance._core.prompt import ChatMessage, ContextManifest, Prompt
from clearance.models import ModelRequest
from clearance.models._openai import OpenAIModel
from clearance.models._openai_stream import max_chunks
from clearance.testing import ScriptedModel

pytestmark = pytest.mark.network

WRITER = Agent(name="writer", instructions="You write.")
TEAM = Team(agents=(WRITER,))
TASKS = [
    Task(id="a", title="First", description="Write the first part.", assignee="writer"),
    Task(id="b", title="Second", description="Write the second.", assignee="writer",
         depends_on=("a",)),
]  # fmt: skip


def reply(messages: list[dict[str, Any]]) -> str:
    text = messages[-1]["content"]
    if "Write the first part." in text:
        return "alpha beta gamma"
    if "Write the second." in text:
        return "delta epsilon"
    return "the synthesis of it all"


def prompt() -> Prompt:
    return Prompt(
        messages=(ChatMessage(role="system", content="s"), ChatMessage(role="user", content="u")),
        manifest=ContextManifest(
            subject="test", agent="w", items=(), total_tokens=0, prompt_sha256="0"
        ),
    )


async def test_openai_provider_streams_text_and_usage(openai_server) -> None:
    url = openai_server(lambda messages: "one two three")
    pieces: list[str] = []
    async with OpenAIModel("m", base_url=url) as model:
        response = await model.request(ModelRequest(prompt=prompt(), stream=pieces.append))
    assert pieces == ["one ", "two ", "three"]
    assert response.text == "one two three"
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (10, 5)
    assert response.finish_reason == "stop"
    assert url.bodies[-1]["stream"] is True
    assert url.bodies[-1]["stream_options"] == {"include_usage": True}


async def test_openai_provider_joins_streamed_tool_calls(openai_server) -> None:
    url = openai_server(lambda messages: [("lookup", {"query": "x" * 40}), ("other", {})])
    pieces: list[str] = []
    async with OpenAIModel("m", base_url=url) as model:
        response = await model.request(ModelRequest(prompt=prompt(), stream=pieces.append))
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("lookup", {"query": "x" * 40}),
        ("other", {}),
    ]
    assert response.finish_reason == "tool_calls"
    assert pieces == []


async def test_a_server_streaming_without_end_is_refused(openai_server) -> None:
    """Attack: more chunks than max_tokens can explain is a ModelError, not a memory sink."""

    def endless(messages: list[dict[str, Any]]) -> Iterator[str]:
        while True:
            yield "x"

    url = openai_server(endless)
    async with OpenAIModel("m", base_url=url) as model:
        with pytest.raises(ModelError, match=f"more than {max_chunks(4)} chunks"):
            await model.request(ModelRequest(prompt=prompt(), max_tokens=4, stream=[].append))


async def test_deadline_holds_over_a_stream_that_trickles_forever(openai_server) -> None:
    """Attack: a server that sends a piece every 50 ms forever; the agent's deadline (1 s)
    ends the call, every attempt recorded."""

    def trickle(messages: list[dict[str, Any]]) -> Iterator[str]:
        while True:
            time.sleep(0.05)
            yield "."

    url = openai_server(trickle)
    limits = AgentLimits(timeout_s=1.0, retries=0, max_output_tokens=100000)
    agent = Agent(name="w", instructions="i", limits=limits)
    heard: list[tuple[str, str, str]] = []
    caller = ModelCaller(listener=lambda *event: heard.append(event))
    started = time.monotonic()
    async with OpenAIModel("m", base_url=url) as model:
        with pytest.raises(LimitExceeded) as raised:
            await caller.call(subject="task:t", agent=agent, model=model, prompt=prompt())
    assert raised.value.limit == "timeout_s"
    assert time.monotonic() - started < 5
    assert heard[0] == ("model_call", "task:t", "attempt 1")
    assert [k for k, _, _ in heard[1:]] and {k for k, _, _ in heard[1:]} == {"text"}


async def test_run_events_stream_in_order(openai_server, ledger: RunLedger) -> None:
    url = openai_server(reply)
    async with OpenAIModel("m", base_url=url) as model:
        orchestrator = Orchestrator(TEAM, model=model, ledger=ledger)
        async with orchestrator.stream(TASKS, goal="Report.") as events:
            seen = [event async for event in events]
    kinds = [e.kind for e in seen]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert seen[-1].detail == "completed"
    # Task a: started, its call, its text word by word, completed; then b; then synthesis.
    a = [(e.kind, e.detail) for e in seen if e.task_id == "a"]
    assert a == [
        ("task_started", ""), ("model_call", "attempt 1"),
        ("text", "alpha "), ("text", "beta "), ("text", "gamma"), ("task_completed", ""),
    ]  # fmt: skip
    first_done = kinds.index("task_completed")
    assert first_done < kinds.index("task_started", first_done)  # b after a
    synthesis = "".join(e.detail for e in seen if e.kind == "text" and e.subject == "synthesis")
    assert synthesis == "the synthesis of it all"
    assert kinds.index("synthesis_started") < len(kinds) - 1
    assert events.result.status == "completed"
    assert events.result.result("a") == "alpha beta gamma"
    assert events.dropped == 0


async def test_ledger_records_the_same_with_and_without_streaming(
    openai_server, ledger: RunLedger
) -> None:
    url = openai_server(reply)
    async with OpenAIModel("m", base_url=url) as model:
        plain = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks(TASKS)
        async with Orchestrator(TEAM, model=model, ledger=ledger).stream(TASKS) as events:
            async for _ in events:
                pass
    streamed = events.result

    def recorded(run_id: str) -> list[tuple[Any, ...]]:
        return [
            (c.subject, c.response, c.finish_reason, c.usage, c.error, c.messages)
            for c in ledger.calls(run_id)
        ]

    assert recorded(streamed.run_id) == recorded(plain.run_id)
    assert [t.result for t in ledger.tasks(streamed.run_id)] == [
        t.result for t in ledger.tasks(plain.run_id)
    ]
    assert url.bodies[0].get("stream") is None and url.bodies[-1]["stream"] is True
    assert verify_run(ledger, streamed.run_id).ok


async def test_a_slow_reader_drops_text_never_lifecycle_events(ledger: RunLedger) -> None:
    """Back-pressure policy: past max_events unread, text pieces are dropped (counted);
    task and run events are always delivered, and the results are whole."""
    long = " ".join(f"w{i}" for i in range(200))
    model = ScriptedModel([long, long, "done"])
    orchestrator = Orchestrator(TEAM, model=model, ledger=ledger)
    async with orchestrator.stream(TASKS, max_events=5) as events:
        await asyncio.sleep(0.2)  # the run finishes while nobody reads
        seen = [event async for event in events]
    kinds = [e.kind for e in seen]
    assert events.dropped > 0
    for kind in ("run_started", "task_started", "task_completed", "run_finished"):
        assert kind in kinds
    assert kinds.count("task_completed") == 2
    assert events.result.result("a") == long


async def test_leaving_the_stream_early_interrupts_the_run(ledger: RunLedger) -> None:
    async def slow(request: ModelRequest) -> str:
        await asyncio.sleep(30)
        return "never"

    from clearance.testing import FunctionModel

    orchestrator = Orchestrator(TEAM, model=FunctionModel(slow), ledger=ledger)
    async with orchestrator.stream(TASKS) as events:
        async for event in events:
            if event.kind == "task_started":
                break
    (run,) = ledger.list_runs()
    assert run.status == "interrupted"
    with pytest.raises(RuntimeError, match="not finished"):
        events.result  # noqa: B018


def test_stream_needs_something_to_run() -> None:
    with pytest.raises(ConfigError, match="tasks, a goal or a run"):
        Orchestrator(TEAM, model=ScriptedModel([])).stream()
    with pytest.raises(ConfigError):
        Orchestrator(TEAM, model=ScriptedModel([])).stream(TASKS, max_events=0)
