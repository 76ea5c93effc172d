"""`ModelCaller`: the one model call — limits, deadline, retries, validation, records."""

import asyncio
import time

import pytest

from clearance import Agent, AgentLimits, LimitExceeded, ModelError, RetryPolicy, RunLedger
from clearance._agents.caller import CallBudget, ModelCaller
from clearance._context.builder import ContextBuilder
from clearance._context.isolated import IsolatedContext
from clearance.models._base import ModelRequest, ModelResponse, Usage
from clearance.testing import FunctionModel, ScriptedModel

NO_WAIT = RetryPolicy(initial_s=0, max_s=0, jitter_s=0)


def agent(**limits):
    return Agent(name="a", instructions="You are A.", limits=AgentLimits(**limits))


def prompt():
    context = IsolatedContext(task_id="t", task_description="Do it.")
    return ContextBuilder(count_tokens=len).build_isolated_prompt(context, agent=agent())


@pytest.fixture
def ledger(tmp_path):
    ledger = RunLedger(f"sqlite:///{tmp_path / 'runs.db'}")
    ledger.start_run(run_id="run-1", team="t", goal=None, graph=None, config={})
    yield ledger
    ledger.close()


class AbsurdUsage:
    model_id = "absurd:model"
    context_window = None

    def __init__(self, usage):
        self.usage = usage

    def count_tokens(self, text):
        return len(text)

    async def request(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(text="ok", usage=self.usage, model_id=self.model_id)


async def test_max_tokens_per_step_caps_what_is_asked_and_what_comes_back(ledger):
    model = ScriptedModel(["word " * 50])
    caller = ModelCaller(ledger=ledger, run_id="run-1")
    with pytest.raises(LimitExceeded) as info:
        await caller.call(
            subject="task:t",
            agent=agent(max_output_tokens=500, max_tokens_per_step=20),
            model=model,
            prompt=prompt(),
        )
    assert info.value.limit == "max_tokens_per_step"
    assert model.requests[0].max_tokens == 20  # never more than the per-step limit
    (call,) = ledger.calls("run-1")
    assert "max_tokens_per_step exceeded" in (call.error or "")


async def test_the_deadline_covers_every_attempt_and_is_not_retried(ledger):
    attempts = []

    async def hang(request):
        attempts.append(time.perf_counter())
        await asyncio.sleep(10)
        return "never"

    caller = ModelCaller(ledger=ledger, run_id="run-1", retry_policy=NO_WAIT)
    t0 = time.perf_counter()
    with pytest.raises(LimitExceeded) as info:
        await caller.call(
            subject="task:t",
            agent=agent(timeout_s=0.3, attempt_timeout_s=0.1, retries=50),
            model=FunctionModel(hang),
            prompt=prompt(),
        )
    elapsed = time.perf_counter() - t0
    assert info.value.limit == "timeout_s"
    assert elapsed < 2.0  # the 0.3 s deadline with room for a loaded machine; 50 retries: 5 s
    assert 2 <= len(attempts) <= 4
    calls = ledger.calls("run-1")
    assert len(calls) == len(attempts)  # every attempt that left the process is recorded
    assert "timeout_s exceeded" in (calls[-1].error or "")


@pytest.mark.parametrize(
    "usage",
    [
        Usage(requests=1, prompt_tokens=10**20, completion_tokens=1),
        Usage(requests=1, prompt_tokens=5, completion_tokens=-3),
        Usage(requests=1, prompt_tokens=5.5, completion_tokens=1),  # type: ignore[arg-type]
    ],
)
async def test_absurd_usage_is_a_recorded_model_error(ledger, usage):
    caller = ModelCaller(ledger=ledger, run_id="run-1")
    with pytest.raises(ModelError, match="impossible usage"):
        await caller.call(
            subject="task:t", agent=agent(), model=AbsurdUsage(usage), prompt=prompt()
        )
    (call,) = ledger.calls("run-1")
    assert call.response is None and "impossible usage" in (call.error or "")
    assert caller.usage == Usage()


async def test_the_call_budget_refuses_the_call_past_its_cap_before_sending():
    model = ScriptedModel(["one", "two", "three"])
    budget = CallBudget(2, subject="task:t")
    caller = ModelCaller()
    for _ in range(2):
        await caller.call(subject="task:t", agent=agent(), model=model, prompt=prompt(),
                          budget=budget)  # fmt: skip
    with pytest.raises(LimitExceeded) as info:
        await caller.call(subject="task:t", agent=agent(), model=model, prompt=prompt(),
                          budget=budget)  # fmt: skip
    assert (info.value.limit, info.value.maximum) == ("max_model_calls", 2)
    assert len(model.requests) == 2


async def test_usage_adds_up_over_successful_calls():
    model = ScriptedModel(["abcd", "efgh"])
    caller = ModelCaller()
    for _ in range(2):
        await caller.call(subject="task:t", agent=agent(), model=model, prompt=prompt())
    assert caller.usage.requests == 2
    assert caller.usage.completion_tokens == 2


def test_limits_reject_non_finite_timeouts():
    from clearance import ConfigError

    for bad in (float("inf"), float("nan"), 1e20, 0, -1):
        with pytest.raises(ConfigError, match="timeout_s"):
            AgentLimits(timeout_s=bad)
