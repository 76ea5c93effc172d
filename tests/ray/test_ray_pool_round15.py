"""Calls while every Ray worker is stuck, and a streamed call whose model blocks its worker.

Before:

- when every worker had a cancelled call that had not ended (a model blocking its event loop),
  a new call was still sent to one of them; the reaper then killed that actor, and the new call
  died with it: recorded as a ``worker_lost`` event (``retry: true``) although its worker was
  never lost to it, and sent again after up to ``cancel_grace_s``. Now it waits (within its
  own deadline) for a worker that is not stuck, or for the restart, and is sent once;
- a streamed call (``--stream``, a Ray generator) was watched by its generator, which reads as
  ready as soon as the cancelled stream has an item or an error to hand out: the reaper took
  the call as ended, never killed its blocked worker, and every later call waited behind it.
  Now it is watched by the generator task's ``completed()`` ref;
- a ref `ray.wait` refused made the reaper take every watched call as ended. Now such a call
  is taken as not ended, and its worker is killed when its grace is over.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from test_ray_executor import _prompt, ray, ray_head  # noqa: F401  (the module's Ray head)

from clearance import ModelError, RayExecutor
from clearance._core.vocabulary import EventKind
from clearance._orchestration.ray_executor import HUNG_WORKER
from clearance._orchestration.ray_pool import Pool, Reaper, Worker
from clearance.models._base import ModelRequest
from clearance.testing._fake import FakeModel

pytestmark = pytest.mark.ray

HUNG = {"worker": 0, "model_id": "fake:m", "error": HUNG_WORKER, "retry": False}


def _blocking(model_id: str, **options: Any) -> FakeModel:
    """A fake model that blocks its worker's event loop for 60 s over a prompt holding BLOCK.

    Streaming, it first streams one piece (and lets it reach the orchestrator).
    """

    class Blocking(FakeModel):
        async def request(self, request: ModelRequest) -> Any:
            if "BLOCK" in request.prompt.text:
                if request.stream is not None:
                    request.stream("first ")
                    await asyncio.sleep(0.5)
                time.sleep(60)  # noqa: ASYNC251  (on purpose: the worker cannot cancel it)
            return await super().request(request)

    return Blocking(model_id.partition(":")[2], latency_s=0)


@pytest.fixture(scope="module")
def by_value(ray_head: str) -> Iterator[str]:  # noqa: F811
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray_head


def _executor(address: str, workers: int, grace_s: float) -> RayExecutor:
    return RayExecutor(
        address=address,
        workers=workers,
        calls_per_worker=2,
        cpus_per_worker=0,
        cancel_grace_s=grace_s,
        model_factory=_blocking,
    )


@pytest.mark.parametrize("workers", [1, 2])
async def test_a_call_while_every_worker_is_stuck_waits_and_is_sent_once(
    by_value: str, workers: int
) -> None:
    recorded: list[tuple[Any, str, dict[str, Any]]] = []
    with _executor(by_value, workers, grace_s=2) as ex:
        ex.attach(lambda kind, subject, data: recorded.append((kind, subject, data)))
        blocked = ModelRequest(prompt=_prompt("BLOCK"), max_tokens=16)
        stuck = [asyncio.wait_for(ex.complete("fake:m", {}, blocked), 1) for _ in range(workers)]
        outcomes = await asyncio.gather(*stuck, return_exceptions=True)
        assert all(isinstance(o, TimeoutError) for o in outcomes), outcomes
        assert ex._pool is not None and all(w.stuck for w in ex._pool.workers)
        started = time.monotonic()
        fast = ModelRequest(prompt=_prompt("fast"), max_tokens=16)
        # Sent before: to a stuck actor, lost with it when the reaper kills it, sent again.
        response = await asyncio.wait_for(ex.complete("fake:m", {}, fast), 40)
        assert response.text.startswith("m result for")
        assert time.monotonic() - started < 30  # not behind the blocked calls' 60 s
        await asyncio.sleep(1)  # any other kill would be recorded by now
        # Only the blocked calls' workers, killed: nothing recorded for the call that waited.
        assert [(k, s) for k, s, _ in recorded] == [(EventKind.WORKER_LOST, "task:x")] * workers
        assert sorted(d["worker"] for _, _, d in recorded) == list(range(workers))
        assert all({**d, "worker": 0} == HUNG for _, _, d in recorded)
        assert ex.lost_workers == workers


async def test_a_streamed_call_blocking_its_worker_is_killed_and_the_next_call_answers(
    by_value: str,
) -> None:
    recorded: list[tuple[Any, str, dict[str, Any]]] = []
    heard: list[str] = []
    with _executor(by_value, 1, grace_s=1) as ex:
        ex.attach(lambda kind, subject, data: recorded.append((kind, subject, data)))
        blocked = ModelRequest(prompt=_prompt("BLOCK"), max_tokens=16, stream=heard.append)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(ex.complete("fake:m", {}, blocked), 2)
        assert heard == ["first "]  # the stream was running when its model blocked
        started = time.monotonic()
        fast = ModelRequest(prompt=_prompt("fast"), max_tokens=16)
        # Before: the stream read as ended, its worker was never killed, this call waited 60 s.
        response = await asyncio.wait_for(ex.complete("fake:m", {}, fast), 30)
        assert response.text.startswith("m result for")
        assert time.monotonic() - started < 20
        assert recorded == [(EventKind.WORKER_LOST, "task:x", HUNG)]
        # A streamed call after the restart streams its whole answer.
        again: list[str] = []
        streamed = ModelRequest(prompt=_prompt("fast"), max_tokens=64, stream=again.append)
        response = await asyncio.wait_for(ex.complete("fake:m", {}, streamed), 30)
        assert "".join(again) == response.text
        assert len(recorded) == 1


def test_a_call_ray_will_not_wait_on_is_killed_when_due_not_taken_as_ended(
    by_value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    killed: list[Any] = []
    reported: list[Any] = []
    done = threading.Event()

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise TypeError("wait() expected a list of ray.ObjectRef")

    monkeypatch.setattr(ray, "wait", refuse)
    monkeypatch.setattr(ray, "kill", lambda actor, **kw: killed.append(actor))
    worker = Worker(index=0, actor="actor-0")
    reaper = Reaper(0.3, lambda w, context: (reported.append((w.index, context)), done.set()))
    reaper.watch(worker, object(), "ctx")
    done.wait(10)
    reaper.close()
    assert killed == ["actor-0"] and reported == [(0, "ctx")]  # before: nothing killed
    assert worker.down and worker.stuck == 0


async def test_take_prefers_a_free_worker_and_waits_within_its_timeout() -> None:
    stuck, free = Worker(index=0, actor=None, stuck=1), Worker(index=1, actor=None, down=True)
    pool = Pool(workers=[stuck, free], per_model=1)
    # A worker lost to this call (in avoid) and restarting still beats one about to be killed.
    assert await pool.take([1], 1, "fake:m") is free
    free.stuck = 1
    started = time.monotonic()
    with pytest.raises(ModelError, match=r"still running a cancelled call after 0\.4 s") as info:
        await pool.take([], 0.4, "fake:m")
    assert info.value.transient is True
    assert 0.35 < time.monotonic() - started < 2

    async def ends() -> None:
        await asyncio.sleep(0.3)
        stuck.stuck = 0  # its cancelled call ended (or the reaper killed it)

    ending = asyncio.ensure_future(ends())
    assert await pool.take([], 5, "fake:m") is stuck
    await ending
