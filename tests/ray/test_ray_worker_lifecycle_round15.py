"""A Ray worker whose model blocks its event loop, and a worker that is restarting.

Before:

- a model blocking its worker's event loop (``time.sleep``, a synchronous busy loop) could not
  be cancelled at the call's deadline: the call failed here on time, but the actor stayed
  stuck, and every later call sent to it waited behind the stuck one (with one worker, every
  later call of the run). Now a worker whose cancelled call has not ended ``cancel_grace_s``
  after its cancellation is killed, restarted, and recorded (``worker_lost``, error
  ``WorkerHung``);
- a call sent to an actor Ray was still restarting (the retry of a call whose worker died)
  failed at once with ``ActorUnavailableError`` and counted as a second death. Now no call is
  sent to a lost worker before it answers again.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_ray_executor import TEAM, _prompt, dying_model, ray, ray_head, verify_cli  # noqa: F401

from clearance import (
    Agent,
    AgentLimits,
    ConfigError,
    LimitExceeded,
    Orchestrator,
    RayExecutor,
    RunLedger,
    RunServices,
    Task,
    Team,
)
from clearance._agents.caller import ModelCaller
from clearance._core.vocabulary import EventKind
from clearance._orchestration.ray_executor import HUNG_WORKER
from clearance.models._base import ModelRequest
from clearance.testing._fake import FakeModel

pytestmark = pytest.mark.ray


def _blocking(model_id: str, **options: Any) -> FakeModel:
    """A fake model that blocks its worker's event loop for 60 s over a task holding BLOCK."""

    class Blocking(FakeModel):
        async def request(self, request: ModelRequest) -> Any:
            subject = request.prompt.manifest.subject
            if "BLOCK" in request.prompt.text and subject.startswith("task:"):
                time.sleep(60)  # noqa: ASYNC251  (on purpose: the worker cannot cancel it)
            return await super().request(request)

    return Blocking(model_id.partition(":")[2], latency_s=0)


@pytest.fixture(scope="module")
def by_value(ray_head: str) -> Iterator[str]:  # noqa: F811
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray_head


def test_cancel_grace_s_is_checked() -> None:
    for bad in (0, -1, 601, float("nan")):
        with pytest.raises(ConfigError):
            RayExecutor(cancel_grace_s=bad)


async def test_a_worker_blocked_by_its_model_is_killed_and_the_next_call_answers(
    by_value: str,
) -> None:
    recorded: list[tuple[Any, str, dict[str, Any]]] = []
    agent = Agent(name="alpha", instructions="A.", limits=AgentLimits(timeout_s=1, retries=0))
    # One worker: a later call can only go to the actor the blocked call is stuck on.
    with RayExecutor(address=by_value, workers=1, calls_per_worker=2, cpus_per_worker=0,
                     cancel_grace_s=1, model_factory=_blocking) as ex:  # fmt: skip
        ex.attach(lambda kind, subject, data: recorded.append((kind, subject, data)))
        model = ex.model("fake:m", FakeModel("m"), {})
        caller = ModelCaller()
        started = time.monotonic()
        with pytest.raises(LimitExceeded):
            await caller.call(subject="task:x", agent=agent, model=model, prompt=_prompt("BLOCK"))
        assert time.monotonic() - started < 5  # the orchestrator's deadline held
        started = time.monotonic()
        request = ModelRequest(prompt=_prompt("fast"), max_tokens=16)
        # Without the reaper this call waits the 60 s of the blocked one.
        response = await asyncio.wait_for(ex.complete("fake:m", {}, request), 40)
        assert response.text.startswith("m result for")
        assert time.monotonic() - started < 30
        hung = [d for k, _, d in recorded if d["error"] == HUNG_WORKER]
        assert [k for k, _, _ in recorded][:1] == [EventKind.WORKER_LOST]
        assert hung == [{"worker": 0, "model_id": "fake:m", "error": HUNG_WORKER, "retry": False}]
        assert recorded[0][1] == "task:x"
        assert ex.lost_workers == len(recorded)


async def test_a_hung_worker_is_recorded_in_the_ledger_and_the_run_verifies(
    by_value: str, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    agent = Agent(name="alpha", instructions="A.", limits=AgentLimits(timeout_s=1, retries=0))
    team = Team(agents=(agent,))
    blocked = Task(id="b", title="BLOCK", description="Block.", assignee="alpha")
    with (
        RayExecutor(address=by_value, workers=1, cpus_per_worker=0, cancel_grace_s=1,
                    model_factory=_blocking) as ex,
        RunLedger(db) as ledger,
    ):  # fmt: skip
        orch = Orchestrator(team, model="fake:m", ledger=ledger, services=RunServices(executor=ex))
        started = time.monotonic()
        first = await asyncio.wait_for(orch.run_tasks([blocked]), 60)
        assert time.monotonic() - started < 30
        await asyncio.sleep(3)  # the grace passes, the worker is killed and it is recorded
        events = ledger.events(first.run_id, kind="worker_lost")
        started = time.monotonic()
        fine = Task(id="f", title="Fine", description="Fine.", assignee="alpha")
        second = await asyncio.wait_for(orch.run_tasks([fine]), 60)
        elapsed = time.monotonic() - started
    assert first.status != "completed"  # its only task timed out
    # The blocked call's worker, killed; any other loss recorded is one that was sent again.
    hung = [e for e in events if e.data["error"] == HUNG_WORKER]
    assert [(e.subject, e.data["retry"]) for e in hung] == [("task:b", False)]
    assert all(e.data["retry"] for e in events if e not in hung)
    assert second.status == "completed", second.error
    assert elapsed < 30  # not behind the 60 s the blocked call would take
    verify_cli(first.run_id, db)
    verify_cli(second.run_id, db)


@pytest.mark.parametrize("round_", range(3))
async def test_a_retry_waits_for_the_restarting_worker_and_is_not_a_second_death(
    by_value: str, tmp_path: Path, round_: int
) -> None:
    recorded: list[tuple[Any, str, dict[str, Any]]] = []
    factory = functools.partial(dying_model, str(tmp_path / "crashed"))
    with RayExecutor(address=by_value, workers=1, worker_retries=1, cpus_per_worker=0,
                     model_factory=factory) as ex:  # fmt: skip
        ex.attach(lambda kind, subject, data: recorded.append((kind, subject, data)))
        request = ModelRequest(prompt=_prompt("x"), max_tokens=16)
        # The only worker dies once; its retry goes to the same actor, which Ray restarts.
        response = await asyncio.wait_for(ex.complete("fake:echo", {}, request), 60)
        assert response.text.startswith("echo result for")
        assert ex.lost_workers == 1
        assert [(k, d["retry"]) for k, _, d in recorded] == [(EventKind.WORKER_LOST, True)]
        # Straight after, more calls: none is sent to an actor that is not back yet.
        answers = await asyncio.wait_for(
            asyncio.gather(*(ex.complete("fake:echo", {}, request) for _ in range(4))), 60
        )
        assert len(answers) == 4 and ex.lost_workers == 1


async def test_calls_after_the_worker_is_killed_from_outside_wait_for_its_restart(
    by_value: str,
) -> None:
    recorded: list[tuple[Any, str, dict[str, Any]]] = []
    with RayExecutor(address=by_value, workers=2, worker_retries=1, cpus_per_worker=0) as ex:
        ex.attach(lambda kind, subject, data: recorded.append((kind, subject, data)))
        assert ex._pool is not None
        for worker in ex._pool.workers:
            old = ray.get(worker.actor.ready.remote(), timeout=30)  # its process id
            ray.kill(worker.actor, no_restart=False)  # both restart: no live worker to use
            _gone(worker.actor, old)  # the kill is sent, not done: wait until it is
            worker.down = True  # as a call that saw it die marks it
        request = ModelRequest(prompt=_prompt("x"), max_tokens=16)
        answers = await asyncio.wait_for(
            asyncio.gather(*(ex.complete("fake:echo", {}, request) for _ in range(6))), 60
        )
        assert len(answers) == 6
        assert not recorded and ex.lost_workers == 0
        assert not any(w.down for w in ex._pool.workers)


def _gone(actor: Any, pid: int) -> None:
    """Return once the actor's process ``pid`` is gone (its ``ready`` fails or names another)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if ray.get(actor.ready.remote(), timeout=5) != pid:
                return
        except Exception:  # dead or restarting: the old process is gone
            return
        time.sleep(0.05)
    raise AssertionError(f"the killed actor's process {pid} still answers after 30 s")
