"""Concurrent calls do not race past the run's budget (`BudgetMeter.reserved`).

Every call was checked against what the calls before it had *finished* using, so with eight
tasks at once and a budget of 50 tokens, all eight were sent (800 tokens used), although the
budget promises an overshoot of at most one call. A call in flight now holds a reservation
of its estimate (prompt tokens plus the ``max_tokens`` it asks for); another call is sent
only while everything fits, or alone.
"""

from __future__ import annotations

import asyncio

import pytest

from clearance import (
    Agent,
    AgentLimits,
    BudgetExceeded,
    Orchestrator,
    RunBudget,
    RunLedger,
    RunOptions,
    Task,
    Team,
)
from clearance._agents.budget_meter import BudgetMeter
from clearance._context.verify import verify_run
from clearance.models import ModelResponse, Usage
from clearance.testing import FunctionModel

TEAM = Team(
    agents=(
        Agent(
            name="alpha", instructions="You are Alpha.", limits=AgentLimits(max_output_tokens=20)
        ),
    )
)


class Slow(FunctionModel):
    """Answers after ``delay_s``; each answer costs ``tokens`` prompt and 10 completion tokens."""

    def __init__(self, tokens: int, delay_s: float = 0.05) -> None:
        super().__init__(lambda request: "done", model_id="fake:budget")
        self.tokens, self.delay_s = tokens, delay_s
        self.in_flight = self.most_in_flight = self.sent = 0

    async def request(self, request):
        self.sent += request.prompt.manifest.subject.startswith("task:")
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay_s)
        finally:
            self.in_flight -= 1
        usage = Usage(requests=1, prompt_tokens=self.tokens, completion_tokens=10)
        return ModelResponse(text="done", model_id=self.model_id, usage=usage)


def tasks(n: int) -> list[Task]:
    return [Task(id=f"t{i}", title=f"Step {i}", description="Do it.", assignee="alpha")
            for i in range(n)]  # fmt: skip


async def run(tmp_path, model: Slow, budget: RunBudget):
    """Eight tasks at once; ``(BudgetExceeded or None, result or None)``, the run verified."""
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orch = Orchestrator(TEAM, model=model, ledger=ledger,
                            options=RunOptions(max_concurrency=8, budget=budget))  # fmt: skip
        error, result = None, None
        try:
            result = await orch.run_tasks(tasks(8))
        except BudgetExceeded as exc:
            error = exc
        (run,) = ledger.list_runs(limit=1)
        report = verify_run(ledger, run.run_id)
        assert report.ok, [str(f) for f in report.findings]
        return error, result


async def test_eight_tasks_at_once_send_one_call_past_a_small_budget(tmp_path):
    model = Slow(tokens=90)
    error, _ = await run(tmp_path, model, RunBudget(tokens=50))
    assert isinstance(error, BudgetExceeded)
    assert model.sent == 1, "calls checked while others were in flight all crossed the budget"
    assert error.used == 100


async def test_a_budget_with_room_keeps_every_call_concurrent(tmp_path):
    model = Slow(tokens=90)
    error, result = await run(tmp_path, model, RunBudget(tokens=1_000_000))
    assert error is None and result.status == "completed", result.error
    assert model.sent == 8 and model.most_in_flight == 8


async def test_calls_that_fit_go_together_and_the_rest_wait_their_turn(tmp_path):
    # Each estimate: the prompt (about 40 tokens here) + 20 completion tokens. A budget for
    # about three estimates lets two or three calls out at once, never all eight.
    model = Slow(tokens=5)
    error, result = await run(tmp_path, model, RunBudget(tokens=200))
    assert 1 < model.most_in_flight < 8
    assert model.sent == 8 and error is None and result.status == "completed"


async def test_a_waiting_call_cancelled_leaves_no_reservation():
    meter = BudgetMeter(RunBudget(tokens=100), run_id="run_1")
    async with meter.reserved("task:a", "fake:x", prompt_tokens=60, max_tokens=20):
        waiting = asyncio.create_task(
            meter.reserved("task:b", "fake:x", prompt_tokens=60, max_tokens=20).__aenter__()
        )
        await asyncio.sleep(0.01)
        assert not waiting.done(), "a call that does not fit beside one in flight waits"
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
    assert meter._in_flight == 0 and meter._reserved_tokens == 0 and meter._waiting == []
    async with meter.reserved("task:c", "fake:x", prompt_tokens=60, max_tokens=20):
        assert meter._in_flight == 1
