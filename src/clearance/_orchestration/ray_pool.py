"""The worker actors of a `RayExecutor`: which one answers a call, and keeping them alive.

- **Routing.** A call goes to a worker with no cancelled call still running, preferably one
  that is up (not known to be restarting), with the fewest calls in flight (`Pool.pick`).
  When every worker has a cancelled call still running, the call is not queued behind one
  (that actor is about to be killed, and the call would be lost with it): it waits, within
  its deadline, until a worker's cancelled call ends or the reaper kills it (`Pool.take`).
- **Restarts.** A worker lost during a call is marked down; Ray restarts its actor. The next
  call picked for it (when no worker that is up is free of it) first waits for the actor to
  answer `ModelWorker.ready` (`Pool.wait_up`, within a deadline): a call sent to an actor
  still restarting would fail at once with ``ActorUnavailableError`` and read as a second
  death, so it is never sent to one.
- **Hung workers.** A call cancelled at its deadline ends on its worker at once, unless the
  model blocks the actor's event loop (a synchronous busy loop, ``time.sleep``): then the
  cancellation cannot take effect, and every later call sent to that actor would wait behind
  it. `Reaper` gives each cancelled call ``grace_s`` to end; an actor whose cancelled call has
  not ended by then is killed (Ray restarts it), marked down, and reported (``on_kill``).
  One reaper thread per executor, while it has calls to watch. A streamed call is watched by
  the object that is ready when its generator task ends (``completed()``): the generator
  itself reads as ready as soon as it has an item (or an error) to hand out, which a
  cancelled stream does at once, even while its worker is blocked.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from clearance._core.errors import ModelError

__all__ = ["MAX_WATCHED", "Pool", "Reaper", "Worker"]

MAX_WATCHED = 65_536
"""Most cancelled calls the reaper watches at once (beyond, the actor is killed at once)."""
_POLL_S = 0.25
"""Seconds between two asks of a restarting actor whether it is up."""


@dataclass(slots=True)
class Worker:
    """One actor of the pool, the calls it has in flight, and whether it is known to be up."""

    index: int
    actor: Any
    in_flight: int = 0
    down: bool = False
    """Lost or killed, and not yet seen to answer since (Ray is restarting it)."""
    stuck: int = 0
    """Its cancelled calls that have not ended yet (the reaper watches them)."""


@dataclass(slots=True)
class Pool:
    """The actors, and one semaphore per model id and event loop."""

    workers: list[Worker]
    per_model: int
    slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]] = (
        field(default_factory=weakref.WeakKeyDictionary)
    )

    def slot(self, model_id: str) -> asyncio.Semaphore:
        """``model_id``'s semaphore on the running loop (a semaphore serves one loop only)."""
        loop = asyncio.get_running_loop()
        semaphores = self.slots.get(loop)
        if semaphores is None:
            semaphores = self.slots[loop] = {}
        semaphore = semaphores.get(model_id)
        if semaphore is None:
            semaphore = semaphores[model_id] = asyncio.Semaphore(self.per_model)
        return semaphore

    def pick(self, avoid: list[int]) -> Worker:
        """The best worker, by: none stuck, not in ``avoid``, up, the fewest calls in flight."""
        return min(
            self.workers,
            key=lambda w: (w.stuck > 0, w.index in avoid, w.down, w.in_flight, w.index),
        )

    async def take(self, avoid: list[int], timeout_s: float, model_id: str) -> Worker:
        """`pick`, once some worker has no cancelled call still running (at once, mostly).

        A worker whose cancelled call has not ended is killed by the reaper within its
        grace (then it is down, not stuck, and `wait_up` waits for the restart), or its call
        ends: the wait is bounded by that, by ``timeout_s``, and by the caller's deadline
        (a cancellation).

        Raises:
            ModelError: Every worker was still stuck after ``timeout_s`` (transient).
        """
        deadline = time.monotonic() + timeout_s
        while True:
            worker = self.pick(avoid)
            if not worker.stuck:
                return worker
            left = deadline - time.monotonic()
            if left <= 0:
                raise ModelError(
                    f"every Ray worker was still running a cancelled call after {timeout_s:g} s",
                    model_id=model_id,
                    transient=True,
                )
            await asyncio.sleep(min(_POLL_S, left))

    async def wait_up(self, worker: Worker, timeout_s: float, model_id: str) -> None:
        """Return once ``worker``'s actor answers (at once when it is not known to be down).

        Raises:
            ModelError: The actor did not answer within ``timeout_s`` (transient).
        """
        from ray.exceptions import RayActorError

        deadline = time.monotonic() + timeout_s
        while worker.down:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ModelError(
                    f"the Ray worker being restarted did not come back within {timeout_s:g} s",
                    model_id=model_id,
                    transient=True,
                )
            ref = worker.actor.ready.remote()
            try:
                await asyncio.wait_for(_awaited(ref), left)
            except RayActorError:  # still restarting: not a death, ask again
                await asyncio.sleep(min(_POLL_S, max(left, 0)))
                continue
            except TimeoutError:
                with contextlib.suppress(Exception):
                    _cancel(ref)
                continue
            worker.down = False


async def _awaited(ref: Any) -> Any:
    return await ref


class Reaper:
    """Kills the actors whose cancelled calls do not end within ``grace_s`` (see the module).

    Args:
        grace_s: Seconds a cancelled call has to end on its worker.
        on_kill: Called (on the reaper's thread) with the worker and the call's ``context``
            after its actor was killed.
    """

    def __init__(self, grace_s: float, on_kill: Callable[[Worker, Any], None]) -> None:
        self.grace_s = grace_s
        self._on_kill = on_kill
        self._lock = threading.Lock()
        self._watched: dict[int, tuple[float, Worker, Any, Any]] = {}
        self._next = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def watch(self, worker: Worker, ref: Any, context: Any) -> None:
        """Watch ``ref``, a call of ``worker``'s just cancelled; ``context`` goes to ``on_kill``.

        ``ref`` is a call's result, or a streamed call's generator (watched by its task's
        ``completed()`` ref, see the module).
        """
        ref = _ended(ref)
        with self._lock:
            worker.stuck += 1
            if len(self._watched) >= MAX_WATCHED:
                due = time.monotonic()  # too many to watch: this actor is killed at once
            else:
                due = time.monotonic() + self.grace_s
            self._next += 1
            self._watched[self._next] = (due, worker, ref, context)
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(
                    target=self._work, name="clearance-ray-reaper", daemon=True
                )
                self._thread.start()

    def close(self) -> None:
        """Stop watching (the actors are being stopped anyway)."""
        self._stop.set()
        with self._lock:
            watched, self._watched = self._watched, {}
            for _, worker, _, _ in watched.values():
                worker.stuck -= 1

    def _work(self) -> None:
        import ray

        while not self._stop.is_set():
            with self._lock:
                if not self._watched:
                    self._thread = None
                    return
                watched = dict(self._watched)
            refs = [ref for _, _, ref, _ in watched.values()]
            wait_s = max(0.0, min(due for due, _, _, _ in watched.values()) - time.monotonic())
            try:
                done, _ = ray.wait(refs, num_returns=len(refs), timeout=min(wait_s, 1.0))
            except Exception:
                if not ray.is_initialized():  # Ray shut down under the reaper: nothing to kill
                    done = refs
                else:  # a ref Ray would not wait on: unwatchable, so killed when it is due
                    done = _each_ended(refs)
                    self._stop.wait(min(wait_s, 1.0))
            ended = set(done)
            now = time.monotonic()
            for key, (due, worker, ref, context) in watched.items():
                if ref not in ended and due > now:
                    continue
                with self._lock:
                    if self._watched.pop(key, None) is None:
                        continue
                    worker.stuck -= 1
                if ref not in ended:
                    self._kill(worker, context)

    def _kill(self, worker: Worker, context: Any) -> None:
        import ray

        worker.down = True
        try:
            ray.kill(worker.actor, no_restart=False)
        except Exception:  # already dead, or Ray shut down: nothing to kill
            return
        with contextlib.suppress(Exception):
            self._on_kill(worker, context)


def _ended(ref: Any) -> Any:
    """What is ready when the call behind ``ref`` has ended on its worker (see the module)."""
    import ray

    if isinstance(ref, ray.ObjectRefGenerator):
        return ref.completed()
    return ref


def _each_ended(refs: list[Any]) -> list[Any]:
    """The ``refs`` that `ray.wait` says are ready, asked one by one (one that fails: not)."""
    import ray

    done = []
    for ref in refs:
        with contextlib.suppress(Exception):
            done += ray.wait([ref], num_returns=1, timeout=0)[0]
    return done


def _cancel(ref: Any) -> None:
    import ray

    ray.cancel(ref)
