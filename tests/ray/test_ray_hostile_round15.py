"""A hostile model on a Ray worker: it kills its worker on every call, or answers megabytes.

Before:

- a call whose model kills its worker every time (a prompt that crashes the embedded model,
  say) was sent again without end whenever the pool had at most ``worker_retries`` workers:
  the retry count was the number of *distinct* workers lost, so once every worker had died
  once, each further death was "another retry" of no new worker. The call ended only at the
  agent's ``timeout_s`` (600 s by default), recording a ``worker_lost`` event per death;
- an answer over `max_response_chars` for the request's ``max_tokens`` (megabytes of text)
  was brought back whole from the worker into the orchestrator's memory before
  `ModelCaller` refused it; the worker now refuses it, charged as it is locally.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_ray_executor import _prompt, ray, ray_head, verify_cli  # noqa: F401  (its Ray head)

from clearance import Agent, AgentLimits, ModelError, RayExecutor
from clearance._agents.caller import ModelCaller
from clearance._core.vocabulary import EventKind
from clearance.models._base import ModelRequest, ModelResponse, ToolCall, Usage, max_response_chars
from clearance.testing._fake import FakeModel

pytestmark = pytest.mark.ray

PAID = Usage(requests=1, prompt_tokens=7, completion_tokens=9)


def _hostile(model_id: str, **options: Any) -> FakeModel:
    """``fake:crash`` ends its worker's process; ``fake:huge`` answers 4 MB of text."""
    kind = model_id.partition(":")[2]

    class Hostile(FakeModel):
        async def request(self, request: ModelRequest) -> Any:
            if kind == "crash":
                os._exit(1)
            if kind == "huge":
                return ModelResponse(text="x" * 4_000_000, usage=PAID, model_id=model_id)
            if kind == "hugetool":
                call = ToolCall(id="1", name="t" * 4_000_000, arguments={})
                return ModelResponse(text="", usage=PAID, model_id=model_id, tool_calls=(call,))
            return await super().request(request)

    return Hostile(kind, latency_s=0)


@pytest.fixture(scope="module")
def by_value(ray_head: str) -> Iterator[str]:  # noqa: F811
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray_head


@pytest.fixture(scope="module")
def one_worker(by_value: str) -> Iterator[RayExecutor]:
    with RayExecutor(address=by_value, workers=1, worker_retries=1, cpus_per_worker=0,
                     model_factory=_hostile) as ex:  # fmt: skip
        yield ex


@pytest.mark.parametrize(("workers", "retries"), [(1, 1), (2, 2)])
async def test_a_model_killing_every_worker_fails_the_call_after_worker_retries(
    by_value: str, workers: int, retries: int
) -> None:
    recorded: list[tuple[Any, str, dict[str, Any]]] = []
    with RayExecutor(address=by_value, workers=workers, worker_retries=retries,
                     cpus_per_worker=0, model_factory=_hostile) as ex:  # fmt: skip
        ex.attach(lambda kind, subject, data: recorded.append((kind, subject, data)))
        request = ModelRequest(prompt=_prompt("x"), max_tokens=16)
        started = time.monotonic()
        with pytest.raises(ModelError, match="Ray workers died") as info:
            # Without a bound on the attempts this waits for the deadline below.
            await asyncio.wait_for(ex.complete("fake:crash", {}, request), 90)
        assert time.monotonic() - started < 60
        assert info.value.transient is True
        # The first attempt and `worker_retries` more, each death recorded; the last one
        # says the call was not sent again.
        assert ex.lost_workers == retries + 1
        assert [k for k, _, _ in recorded] == [EventKind.WORKER_LOST] * (retries + 1)
        assert [d["retry"] for _, _, d in recorded] == [True] * retries + [False]
        # The error names how the last one was lost (died, or still restarting).
        assert re.fullmatch(
            rf"fake:crash: the Ray workers died {retries + 1} times answering the call "
            r"\(Actor(Died|Unavailable)Error\)",
            str(info.value),
        )
        # The pool is whole again: the restarted actors answer.
        response = await asyncio.wait_for(ex.complete("fake:echo", {}, request), 60)
        assert response.text.startswith("echo result for")


async def test_an_answer_over_the_size_cap_is_refused_on_the_worker(
    one_worker: RayExecutor,
) -> None:
    request = ModelRequest(prompt=_prompt("x"), max_tokens=16)
    for kind in ("huge", "hugetool"):
        with pytest.raises(ModelError, match="max_response_chars") as info:
            await asyncio.wait_for(one_worker.complete(f"fake:{kind}", {}, request), 60)
        assert f"over the cap of {max_response_chars(16):,} for max_tokens=16" in str(info.value)
        assert info.value.transient is False
        assert info.value.paid == PAID  # paid for, as the answer refused locally is


async def test_a_refused_huge_answer_is_charged_the_same_under_ray_as_locally(
    one_worker: RayExecutor,
) -> None:
    agent = Agent(name="alpha", instructions="A.", limits=AgentLimits(retries=0))
    usages = []
    for model in (_hostile("fake:huge"), one_worker.model("fake:huge", _hostile("fake:huge"), {})):
        caller = ModelCaller()
        with pytest.raises(ModelError, match="max_response_chars"):
            await asyncio.wait_for(
                caller.call(subject="task:x", agent=agent, model=model, prompt=_prompt("x")), 60
            )
        usages.append(caller.usage)
    assert usages[0] == usages[1] == PAID


def _tool_user(request: ModelRequest) -> Any:
    """Calls ``lookup`` until its answer is in the prompt, then answers (the synthesis too)."""
    if request.tools and "ANSWER-42" not in request.prompt.text:
        return ToolCall(id="c1", name="lookup", arguments={"key": "k"})
    return f"done ({len(request.prompt.text)} characters seen)"


def _function_model(model_id: str, **options: Any) -> Any:
    from clearance.testing import FunctionModel

    return FunctionModel(_tool_user, model_id=model_id)


def lookup(key: str) -> str:
    """Look a key up."""
    return f"ANSWER-42 for {key}"


async def test_one_team_gets_the_same_calls_and_records_under_ray_as_locally(
    by_value: str, tmp_path: Path
) -> None:
    """Tools, sampling and limits of an agent mean the same on a Ray worker as locally."""
    from clearance import Orchestrator, RunLedger, RunServices, Task, Team
    from clearance._core.agent_spec import Sampling
    from clearance.testing import FunctionModel

    agent = Agent(
        name="alpha", instructions="A.", tools=("lookup",),
        sampling=Sampling(temperature=0.7, top_p=0.9, stop=("END",)),
        limits=AgentLimits(max_output_tokens=123, max_tool_calls_per_step=1, retries=0),
    )  # fmt: skip
    team = Team(agents=(agent,))
    task = Task(id="t", title="Look", description="Look k up.", assignee="alpha")
    seen: dict[str, list[tuple[dict[str, Any], str, tuple[str, ...]]]] = {}
    records: dict[str, tuple[Any, ...]] = {}
    with RayExecutor(address=by_value, workers=1, cpus_per_worker=0, record_received=True,
                     model_factory=_function_model) as ex:  # fmt: skip
        for where in ("local", "ray"):
            local = FunctionModel(_tool_user, model_id="test:fn")
            executor = ex if where == "ray" else None
            services = RunServices(models={"test:fn": local}, executor=executor)
            with RunLedger(f"sqlite:///{tmp_path / (where + '.db')}") as ledger:
                orch = Orchestrator(team, model="test:fn", ledger=ledger, tools={"lookup": lookup},
                                    services=services)  # fmt: skip
                result = await orch.run_tasks([task])
                assert result.status == "completed", result.error
                requests = [r for _, _, r in ex.received()[0]] if where == "ray" else local.requests
                seen[where] = [
                    (
                        r.parameters(),
                        r.prompt.text,
                        tuple(i.origin for i in r.prompt.manifest.items),
                    )
                    for r in requests
                ]
                calls = ledger.calls(result.run_id)
                records[where] = (
                    [
                        (
                            c.subject,
                            c.agent,
                            c.messages,
                            c.manifest,
                            c.parameters,
                            c.response,
                            c.finish_reason,
                            c.usage,
                            c.error,
                        )
                        for c in calls
                    ],
                    [(t.name, t.arguments, t.result) for t in ledger.tool_calls(result.run_id)],
                    result.usage,
                )
            if where == "ray":
                assert not local.requests  # every call was answered on the worker
            verify_cli(result.run_id, f"sqlite:///{tmp_path / (where + '.db')}")
    assert len(seen["local"]) == 3  # the tool call, the answer, the synthesis
    assert _ids_out(seen["ray"]) == _ids_out(seen["local"])
    params = seen["ray"][0][0]
    assert (params["max_tokens"], params["temperature"], params["top_p"]) == (123, 0.7, 0.9)
    assert _ids_out(records["ray"]) == _ids_out(records["local"])


def _ids_out(value: object) -> str:
    """``value``'s text with what each run makes anew (ids, hashes of text with ids) made one."""
    text = re.sub(r"\b(tool|call|run)_[0-9A-Za-z_]+", r"\1_ID", repr(value))
    return re.sub(r"\b[0-9a-f]{64}\b", "SHA256", text)
