"""A model failing on a Ray worker fails its call as it would in this process, in one line.

Before:

- a model raising `SystemExit` or `KeyboardInterrupt` on a worker wedged the actor: the call
  never came back (only the agent's ``timeout_s``, 600 s by default, ended it) and neither did
  any later call sent to that worker;
- a provider's `ModelError` lost its ``retry_after_s`` (a 429's ``Retry-After`` was ignored
  and the provider hammered), its ``status_code`` and its ``paid`` usage (an answer refused
  after it arrived was charged locally, not under Ray), and its text gained a second model
  id (``fake:m: on a Ray worker: ModelError: fake:m: ...``);
- a `ConnectionError` raised by a model was transient locally (retried), not under Ray;
- an answer Ray could not send back (a value that does not pickle), or an error whose
  ``str`` fails, came back as ``Ray failed: RayTaskError(...)`` with the worker's whole
  traceback, ANSI colour codes included, and as transient, so it was retried;
- one executor could not serve a second event loop (two ``asyncio.run`` in a row): its
  per-model semaphores stayed bound to the first loop, and every call of the second run
  failed with ``RuntimeError: ... is bound to a different event loop``.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from test_ray_executor import TEAM, _prompt, ray, ray_head, wide_tasks  # noqa: F401

from clearance import (
    Agent,
    AgentLimits,
    ModelError,
    Orchestrator,
    RayExecutor,
    RunResult,
    RunServices,
)
from clearance._agents.caller import ModelCaller
from clearance.models._base import ModelRequest, ModelResponse, ToolCall, Usage
from clearance.testing import FunctionModel
from clearance.testing._fake import FakeModel

pytestmark = pytest.mark.ray

PAID = Usage(requests=1, prompt_tokens=5, completion_tokens=6)


class _BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text\nat all")


def _behaviour(kind: str) -> Any:
    """What the model ``fake:<kind>`` does with a request (raises, or returns an answer)."""
    if kind == "exit":
        raise SystemExit(3)
    if kind == "interrupt":
        raise KeyboardInterrupt
    if kind == "connection":
        raise ConnectionError("refused")
    if kind == "limited":
        raise ModelError(
            "HTTP 429 from the server",
            model_id="fake:limited",
            transient=True,
            retry_after_s=7.0,
            status_code=429,
            paid=PAID,
        )
    if kind == "badstr":
        raise _BadStr
    if kind == "unpicklable":
        lock = threading.Lock()
        call = ToolCall(id="1", name="t", arguments={"lock": lock})
        return ModelResponse(text="x", usage=PAID, model_id="fake:x", tool_calls=(call,))
    return None


def _hostile(model_id: str, **options: Any) -> FakeModel:
    kind = model_id.partition(":")[2]

    class Hostile(FakeModel):
        async def request(self, request: ModelRequest) -> Any:
            answer = _behaviour(kind)
            return answer if answer is not None else await super().request(request)

    return Hostile(kind, latency_s=0)


@pytest.fixture(scope="module")
def executor(ray_head: str) -> Iterator[RayExecutor]:  # noqa: F811
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with RayExecutor(address=ray_head, workers=1, calls_per_worker=2, cpus_per_worker=0,
                     model_factory=_hostile) as ex:  # fmt: skip
        yield ex


async def _complete(ex: RayExecutor, kind: str) -> ModelResponse:
    request = ModelRequest(prompt=_prompt("x"), max_tokens=16)
    return await asyncio.wait_for(ex.complete(f"fake:{kind}", {}, request), 30)


@pytest.mark.parametrize("kind", ["exit", "interrupt"])
async def test_a_model_ending_its_process_fails_the_call_and_the_worker_goes_on(
    executor: RayExecutor, kind: str
) -> None:
    started = time.monotonic()
    with pytest.raises(ModelError) as info:
        await _complete(executor, kind)
    assert time.monotonic() - started < 10
    text = str(info.value)
    assert "\n" not in text and info.value.transient is False
    assert ("SystemExit" if kind == "exit" else "KeyboardInterrupt") in text
    # The only worker answers the next call.
    assert (await _complete(executor, "calm")).text


async def test_a_providers_error_crosses_with_its_details_and_its_text(
    executor: RayExecutor,
) -> None:
    with pytest.raises(ModelError) as remote:
        await _complete(executor, "limited")
    with pytest.raises(ModelError) as local:
        await _hostile("fake:limited").request(ModelRequest(prompt=_prompt("x")))
    got, want = remote.value, local.value
    assert (got.transient, got.retry_after_s, got.status_code) == (True, 7.0, 429)
    assert got.paid == PAID
    assert str(got) == str(want) == "fake:limited: HTTP 429 from the server"


async def test_a_connection_error_on_a_worker_is_transient_as_it_is_locally(
    executor: RayExecutor,
) -> None:
    agent = Agent(name="alpha", instructions="A.", limits=AgentLimits(retries=0))

    async def local(request: ModelRequest) -> Any:
        raise ConnectionError("refused")

    model = FunctionModel(local, model_id="fake:connection")
    with pytest.raises(ModelError) as here:
        await ModelCaller().call(subject="task:x", agent=agent, model=model, prompt=_prompt("x"))
    remote = executor.model("fake:connection", FakeModel("connection"), {})
    with pytest.raises(ModelError) as there:
        await ModelCaller().call(subject="task:x", agent=agent, model=remote, prompt=_prompt("x"))
    assert here.value.transient is True
    assert there.value.transient is True
    assert "ConnectionError: refused" in str(there.value)


async def test_a_refused_answer_is_charged_under_ray_as_it_is_locally(
    executor: RayExecutor,
) -> None:
    agent = Agent(name="alpha", instructions="A.", limits=AgentLimits(retries=0))
    here, there = ModelCaller(), ModelCaller()
    with pytest.raises(ModelError):
        await here.call(subject="task:x", agent=agent, model=_hostile("fake:limited"),
                        prompt=_prompt("x"))  # fmt: skip
    remote = executor.model("fake:limited", FakeModel("limited"), {})
    with pytest.raises(ModelError):
        await there.call(subject="task:x", agent=agent, model=remote, prompt=_prompt("x"))
    assert here.usage.prompt_tokens == 5
    assert there.usage == here.usage


@pytest.mark.parametrize("kind", ["unpicklable", "badstr"])
async def test_an_answer_ray_cannot_bring_back_is_a_one_line_error(
    executor: RayExecutor, kind: str
) -> None:
    with pytest.raises(ModelError) as info:
        await _complete(executor, kind)
    text = str(info.value)
    assert "\n" not in text and "\x1b" not in text and "Traceback" not in text
    assert len(text) < 600
    assert ("cannot pickle" if kind == "unpicklable" else "_BadStr") in text
    assert info.value.transient is False  # the same call would fail the same way
    assert (await _complete(executor, "calm")).text


def test_one_executor_serves_runs_on_two_event_loops(ray_head: str) -> None:  # noqa: F811
    async def burst(ex: RayExecutor) -> int:
        request = ModelRequest(prompt=_prompt("x"))
        answers = await asyncio.gather(*(ex.complete("fake:m", {}, request) for _ in range(4)))
        return len(answers)

    async def run(orch: Orchestrator) -> RunResult:
        return await orch.run_tasks(wide_tasks(3, chain=1))

    with RayExecutor(address=ray_head, workers=1, calls_per_worker=1, cpus_per_worker=0) as ex:
        # One call in flight at a time: the other three wait on the model's semaphore.
        assert asyncio.run(burst(ex)) == 4
        assert asyncio.run(burst(ex)) == 4
        orch = Orchestrator(TEAM, model="fake:m", ledger=None,
                            services=RunServices(executor=ex))  # fmt: skip
        result = asyncio.run(run(orch))
    assert result.status == "completed", result.error
