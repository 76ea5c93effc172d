"""A streamed answer's usage from a hostile OpenAI-compatible server on 127.0.0.1.

A streamed answer reports its usage in a chunk of its own. A server that sends a usage
without token counts (``{}``, only ``prompt_tokens``) or one that is not an object must be
treated as a non-streamed answer's is: counted locally, or refused by name. Before, such a
stream was recorded as 0 tokens (or only its prompt tokens), so a run's token budget never
saw the call. Calls go through `ModelCaller` with a real ledger and the run's budget meter.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from raw_http import Server

from clearance import Agent, ModelError, RetryPolicy, RunBudget, RunLedger
from clearance._agents.budget_meter import BudgetMeter
from clearance._agents.caller import ModelCaller
from clearance.models._openai import OpenAIModel

WORDS = "one two three four five six seven eight nine ten " * 4


@pytest.fixture
def ledger(tmp_path: Any) -> Iterator[RunLedger]:
    ledger = RunLedger(f"sqlite:///{tmp_path / 'runs.db'}")
    ledger.start_run(run_id="run-1", team="t", goal=None, graph=None, config={})
    yield ledger
    ledger.close()


def _event(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def streamed(usage: Any) -> bytes:
    """A whole streamed answer of `WORDS`, its usage chunk holding ``usage`` (none: `...`)."""
    base = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    first = {"index": 0, "finish_reason": None, "delta": {"role": "assistant", "content": WORDS}}
    body = _event({**base, "choices": [first]})
    body += _event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    if usage is not ...:
        body += _event({**base, "choices": [], "usage": usage})
    body += b"data: [DONE]\n\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    return head + body


def whole(usage: Any) -> bytes:
    """The same answer, not streamed, with ``usage`` as its ``usage``."""
    body = json.dumps({
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": WORDS},
                     "finish_reason": "stop"}],
        "usage": usage,
    }).encode()  # fmt: skip
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
    return head.encode() + b"\r\nConnection: close\r\n\r\n" + body


async def call(
    server: Server, ledger: RunLedger, make_prompt: Any, *, stream: bool, meter: BudgetMeter
) -> Any:
    chat = OpenAIModel("m", base_url=f"http://127.0.0.1:{server.port}/v1", api_key="k")
    caller = ModelCaller(
        ledger=ledger, run_id="run-1", meter=meter,
        retry_policy=RetryPolicy(initial_s=0, max_s=0, jitter_s=0),
        listener=(lambda *event: None) if stream else None,
    )  # fmt: skip
    agent = Agent(name="writer", instructions="You write.")
    async with chat:
        return await caller.call(
            subject="task:t", agent=agent, model=chat, prompt=make_prompt(chat.count_tokens)
        )


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize(
    "usage", [{}, {"prompt_tokens": 3}, {"completion_tokens": 2}, None],
    ids=["empty", "prompt-only", "completion-only", "null"],
)  # fmt: skip
async def test_a_usage_without_counts_is_counted_streamed_or_not(
    serve, ledger, make_prompt, usage: Any, stream: bool
) -> None:
    server = serve(lambda n, conn: conn.sendall((streamed if stream else whole)(usage)))
    meter = BudgetMeter(RunBudget(tokens=100_000), run_id="run-1")
    response = await call(server, ledger, make_prompt, stream=stream, meter=meter)
    assert response.usage.counted
    assert response.usage.completion_tokens >= 40  # the 40 words generated, not 0 (or 2)
    assert response.usage.prompt_tokens > 3
    (record,) = ledger.calls("run-1")
    assert record.usage == response.usage  # what was recorded is what the budget was charged
    assert meter.tokens == response.usage.total_tokens


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize(
    ("usage", "says"), [(5, "an int"), ("lots", "a str"), ([1, 2], "a list")]
)  # fmt: skip
async def test_a_usage_that_is_not_an_object_is_refused_streamed_or_not(
    serve, ledger, make_prompt, usage: Any, says: str, stream: bool
) -> None:
    server = serve(lambda n, conn: conn.sendall((streamed if stream else whole)(usage)))
    meter = BudgetMeter(RunBudget(tokens=100_000), run_id="run-1")
    with pytest.raises(ModelError) as info:
        await call(server, ledger, make_prompt, stream=stream, meter=meter)
    assert str(info.value) == f"openai:m: usage is {says}, not an object"
    (record,) = ledger.calls("run-1")
    assert record.error == f"attempt 1 of 3: openai:m: usage is {says}, not an object"
    assert len(server.heads) == 1  # not transient: the same server gives the same answer


async def test_a_streamed_usage_repeated_in_several_chunks_is_charged_once(
    serve, ledger, make_prompt
) -> None:
    one = {"prompt_tokens": 30, "completion_tokens": 45}

    def answer(n: int, conn: Any) -> None:
        data = streamed(one)
        head, _, rest = data.partition(b"data: [DONE]")
        usage_chunk = head[head.rindex(b"data: ") :]
        conn.sendall(head + usage_chunk + usage_chunk + b"data: [DONE]" + rest)

    server = serve(answer)
    meter = BudgetMeter(RunBudget(tokens=100_000), run_id="run-1")
    response = await call(server, ledger, make_prompt, stream=True, meter=meter)
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (30, 45)
    assert not response.usage.counted
    assert meter.tokens == 75
    (record,) = ledger.calls("run-1")
    assert record.usage.total_tokens == 75
