"""`RayExecutor`: model calls answered by a pool of Ray worker actors.

The orchestrator's process keeps the task graph, every clearance, the `ContextBuilder`, the
ledger, the store, memory and tools. What crosses the network, per model call, is the model id,
its settings and the `ModelRequest` (the finished `Prompt` with its manifest, the tool specs,
``max_tokens``, sampling settings and ``timeout_s``); what comes back is the `ModelResponse`.
Each worker actor makes its own models (an embedded llama.cpp model per actor, an API client,
or a fake) from the model's id and settings.

Back-pressure: at most ``max_calls_per_model`` calls of one model are in flight at once (by
default every worker's ``calls_per_worker``), and each call goes to the worker with the fewest
calls in flight. Failures: a worker that dies during a call (its process killed, its node lost)
is recorded as a ``worker_lost`` event of the run, and the call is sent again to another worker,
at most ``worker_retries`` times; Ray restarts the lost actor in the background, and no call
is sent to it before it answers again. Deadlines: the `ModelCaller`'s deadline covers the
remote call; when it passes, the Ray task is cancelled, and a worker whose cancelled call does
not end within ``cancel_grace_s`` (a model blocking its event loop) is killed, restarted and
recorded (`ray_pool`).
Streaming (``--stream``): the request's sink (a function of this process) is not sent; the
worker streams the model's text back as the items of a Ray generator, handed to the sink as
they come. A call that cannot be sent fails with a short message (never the request's text);
a model's failure on a worker reads as it would here (`ray_worker.error_outcome`), and a Ray
failure is one line (`_ray_failure`). Reaching the cluster: `ray_cluster`.

Ray is an optional dependency (``pip install 'clearance[ray]'``), imported on `start`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from clearance._core.errors import ConfigError, ModelError
from clearance._core.names import check_count, check_number
from clearance._core.vocabulary import EventKind
from clearance._orchestration.executor import EventRecorder
from clearance._orchestration.ray_cluster import (
    LOCAL_RAY_ENV,
    checked_address,
    import_ray,
    init_ray,
)
from clearance._orchestration.ray_pool import Pool, Reaper, Worker
from clearance._orchestration.ray_worker import (
    ModelFactory,
    ModelWorker,
    Outcome,
    checked_outcome,
    short_text,
)
from clearance.models._base import (
    ChatModel,
    ModelRequest,
    ModelResponse,
    TextSink,
    framing_tokens,
    max_response_chars,
)
from clearance.models._openai_stream import max_chunks

__all__ = ["LOCAL_RAY_ENV", "RayExecutor", "RemoteModel", "checked_outcome"]


class RayExecutor:
    """Answers model calls on a pool of Ray worker actors; everything else stays local.

    Use it as ``Orchestrator(team, services=RunServices(executor=RayExecutor(...)))`` (or
    ``clearance run --executor ray``). Call `start` before the run (it connects to Ray and
    waits for the workers), and `close` after (or use it as a context manager).

    Args:
        address: A running Ray cluster (``"auto"``, ``"ray://host:10001"``, ``"host:6379"``;
            a port from 1 to 65535); ``None`` starts a cluster of this process's own on
            127.0.0.1 (no dashboard, no usage statistics; never the one ``RAY_ADDRESS``
            names) that `close` stops.
        workers: Worker actors (1 to 256). Each makes its own models: one embedded model per
            actor for ``llama-cpp:`` ids.
        calls_per_worker: Most calls one actor answers at once (1 to 1024); an embedded model
            answers one at a time whatever this says.
        max_calls_per_model: Most calls of one model in flight at once (on each event loop
            the executor serves); ``None`` means ``workers * calls_per_worker``.
        worker_retries: Most times a call is sent again after the worker answering it died
            (0 to 10).
        cpus_per_worker: CPUs Ray reserves for each actor (0 to 256); also the size of a
            local cluster (at least ``workers * cpus_per_worker`` CPUs).
        start_timeout_s: Seconds `start` waits for every actor to be up.
        model_factory: Makes a model on a worker, ``factory(model_id, **settings)``; ``None``
            means `clearance.models.get_model`. It is sent to the workers, so it must pickle
            (a module-level function).
        record_received: Make workers keep every call's arguments, for `received`
            (tests of what crosses the network; memory grows with the run).
        worker_env: Environment variables set in the workers' processes (an API key, a
            base URL); they cross the network to the cluster. ``None`` for none.
        cancel_grace_s: Seconds a call cancelled at its deadline has to end on its worker
            (more than 0, at most 600); the worker is killed and restarted after that.

    Raises:
        ConfigError: A setting is out of range.
    """

    def __init__(
        self,
        *,
        address: str | None = None,
        workers: int = 2,
        calls_per_worker: int = 4,
        max_calls_per_model: int | None = None,
        worker_retries: int = 2,
        cpus_per_worker: float = 1.0,
        start_timeout_s: float = 120.0,
        model_factory: ModelFactory | None = None,
        record_received: bool = False,
        worker_env: Mapping[str, str] | None = None,
        cancel_grace_s: float = 10.0,
    ) -> None:
        if address is not None:
            checked_address(address)
        self.address = address
        self.workers = check_count("workers", workers, least=1, most=256)
        self.calls_per_worker = check_count(
            "calls_per_worker", calls_per_worker, least=1, most=1024
        )
        cap = max_calls_per_model
        if cap is None:  # as many as the workers take at once
            cap = self.workers * self.calls_per_worker
        self.max_calls_per_model = check_count("max_calls_per_model", cap, least=1, most=1 << 20)
        self.worker_retries = check_count("worker_retries", worker_retries, least=0, most=10)
        check_number("cpus_per_worker", cpus_per_worker)
        if not 0 <= cpus_per_worker <= 256:
            raise ConfigError(f"must be 0 to 256, got {cpus_per_worker!r}", field="cpus_per_worker")
        self.cpus_per_worker = float(cpus_per_worker)
        check_number("start_timeout_s", start_timeout_s)
        if not 0 < start_timeout_s <= 3600:
            raise ConfigError("must be more than 0 and at most 3600", field="start_timeout_s")
        self.start_timeout_s = float(start_timeout_s)
        self._factory = model_factory
        self._record = record_received
        self.worker_env = dict(worker_env or {})
        for key, value in self.worker_env.items():
            if not isinstance(key, str) or not key or "=" in key or not isinstance(value, str):
                raise ConfigError(f"not an environment variable: {key!r}", field="worker_env")
        check_number("cancel_grace_s", cancel_grace_s)
        if not 0 < cancel_grace_s <= 600:
            raise ConfigError("must be more than 0 and at most 600", field="cancel_grace_s")
        self._reaper = Reaper(float(cancel_grace_s), self._killed)
        self._pool: Pool | None = None
        self._models: dict[str, RemoteModel] = {}
        self._started_ray = False
        self._recorder: EventRecorder | None = None
        self.lost_workers = 0
        """Workers lost during calls so far (each also recorded as a ``worker_lost`` event)."""

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Connect to Ray (or start a local cluster) and start the worker actors.

        Does nothing when already started. Blocks until every actor is up.

        Raises:
            ConfigError: Ray is not installed, the cluster's head does not answer within
                ``start_timeout_s`` (at most 5 s, `ray_cluster.probe`), a cluster started
                here is not on loopback, or the actors did not start within
                ``start_timeout_s`` (too few CPUs in the cluster).
        """
        if self._pool is not None:
            return
        ray = import_ray(local=self.address is None)
        if not ray.is_initialized():
            num_cpus = max(int(self.workers * self.cpus_per_worker + 0.999), os.cpu_count() or 1)
            init_ray(ray, self.address, num_cpus=num_cpus, timeout_s=self.start_timeout_s)
            self._started_ray = True
        actor_class = ray.remote(ModelWorker).options(
            max_concurrency=self.calls_per_worker,
            max_restarts=-1,
            max_task_retries=0,
            num_cpus=self.cpus_per_worker,
            scheduling_strategy="SPREAD",
            **({"runtime_env": {"env_vars": self.worker_env}} if self.worker_env else {}),
        )
        actors = [
            actor_class.remote(self._factory, record=self._record) for _ in range(self.workers)
        ]
        try:
            ray.get([a.ready.remote() for a in actors], timeout=self.start_timeout_s)
        except Exception as exc:
            for actor in actors:
                with contextlib.suppress(Exception):
                    ray.kill(actor)
            raise ConfigError(
                f"the {self.workers} Ray worker actors did not start within "
                f"{self.start_timeout_s:g} s ({type(exc).__name__}); does the cluster have "
                f"{self.workers * self.cpus_per_worker:g} free CPUs?",
                field="ray_workers",
            ) from None
        self._pool = Pool(
            workers=[Worker(index=i, actor=a) for i, a in enumerate(actors)],
            per_model=self.max_calls_per_model,
        )

    def close(self) -> None:
        """Stop the worker actors, and the local cluster if `start` started one."""
        pool, self._pool = self._pool, None
        self._models.clear()
        if pool is None:
            return
        self._reaper.close()
        import ray

        for worker in pool.workers:
            with contextlib.suppress(Exception):
                ray.kill(worker.actor)
        if self._started_ray:
            self._started_ray = False
            ray.shutdown()

    def __enter__(self) -> RayExecutor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the executor protocol ----------------------------------------------------------

    def model(self, model_id: str, local: ChatModel, options: Mapping[str, Any]) -> ChatModel:
        """A `RemoteModel` for ``model_id`` (the same one on every call); starts the pool.

        Raises:
            ConfigError: As `start`.
        """
        remote = self._models.get(model_id)
        if remote is None:
            self.start()
            remote = self._models[model_id] = RemoteModel(self, model_id, local, dict(options))
        return remote

    def attach(self, record: EventRecorder) -> None:
        """Record ``worker_lost`` events with ``record`` (the current run's ledger)."""
        self._recorder = record

    def received(self) -> list[list[tuple[str, dict[str, Any], ModelRequest]]]:
        """Per worker, every call's arguments it received (``record_received=True`` only).

        Raises:
            ConfigError: The executor was not started.
        """
        if self._pool is None:
            raise ConfigError("the Ray executor is not started", field="executor")
        import ray

        return list(ray.get([w.actor.received.remote() for w in self._pool.workers]))

    # -- calls --------------------------------------------------------------------------

    async def complete(
        self, model_id: str, options: Mapping[str, Any], request: ModelRequest
    ) -> ModelResponse:
        """Answer ``request`` on a worker, within the model's concurrency bound.

        Raises:
            ModelError: The model failed on the worker (transient as the worker said), the
                workers answering it kept dying (transient), or Ray failed (transient).
        """
        if self._pool is None:
            raise ModelError("the Ray executor is closed", model_id=model_id)
        pool = self._pool
        # A streaming sink is a function of this process: it stays here. The worker streams
        # the text back as items of a Ray generator, and they are handed to the sink.
        sink, request = request.stream, replace(request, stream=None)
        async with pool.slot(model_id):
            return await self._send(pool, model_id, options, request, sink)

    async def _send(
        self,
        pool: Pool,
        model_id: str,
        options: Mapping[str, Any],
        request: ModelRequest,
        sink: TextSink | None,
    ) -> ModelResponse:
        from ray.exceptions import RayActorError, RayError, RayTaskError

        lost: list[int] = []  # a worker per death: one restarted may die again, and counts
        heard = [0]  # pieces handed to the sink: once any are, a lost worker is not replaced
        if sink is not None:
            shown = sink

            def sink(piece: str) -> None:
                heard[0] += 1
                shown(piece)

        while True:
            bound = self._reaper.grace_s + self.start_timeout_s  # a hung actor killed, restarted
            worker = await pool.take(lost, min(bound, request.timeout_s or bound), model_id)
            worker.in_flight += 1
            try:
                # Restarting (lost earlier): a call sent now would fail at once, no death.
                await pool.wait_up(worker, self.start_timeout_s, model_id)
                if sink is None:
                    ref = worker.actor.complete.remote(model_id, options, request)
                else:
                    method = worker.actor.stream.options(num_returns="streaming")
                    ref = method.remote(model_id, options, request)
            except (asyncio.CancelledError, ModelError):
                worker.in_flight -= 1
                raise
            except Exception as exc:  # the request could not be sent (serialized, say)
                worker.in_flight -= 1
                raise ModelError(
                    f"cannot send the call to a Ray worker: {type(exc).__name__}: "
                    f"{short_text(str(exc))}",
                    model_id=model_id,
                ) from None
            try:
                if sink is None:
                    outcome = await ref
                else:
                    outcome = await _streamed(
                        ref, sink, max_tokens=request.max_tokens, model_id=model_id
                    )
            except (asyncio.CancelledError, ModelError):  # a deadline, the run stopping, a cap
                with contextlib.suppress(Exception):
                    _cancel(ref)
                # A model blocking its worker's loop cannot be cancelled: the reaper kills it.
                self._reaper.watch(worker, ref, (asyncio.get_running_loop(), model_id, request))
                raise
            except RayActorError as exc:
                worker.down = True  # Ray restarts it; no call is sent to it before it answers
                lost.append(worker.index)
                # Text already shown cannot be taken back: like a stream whose connection
                # dropped, the attempt fails (transient), and a retry is a new attempt.
                retry = len(lost) <= self.worker_retries and not heard[0]
                self._lost(worker, model_id, request, exc, retry=retry)
                if heard[0]:
                    raise ModelError(
                        f"the Ray worker died while streaming the answer, after {heard[0]} "
                        f"pieces ({type(exc).__name__})",
                        model_id=model_id,
                        transient=True,
                    ) from None
                if not retry:
                    raise ModelError(
                        f"the Ray workers died {len(lost)} times answering the call "
                        f"({type(exc).__name__})",
                        model_id=model_id,
                        transient=True,
                    ) from None
                continue
            except RayError as exc:
                # The worker's method raised (its answer would not pickle): the same call
                # fails the same way. Other Ray failures (an object lost...) may pass.
                raise ModelError(
                    _ray_failure(exc),
                    model_id=model_id,
                    transient=not isinstance(exc, RayTaskError),
                ) from None
            finally:
                worker.in_flight -= 1
            return checked_outcome(outcome, model_id)

    def _lost(
        self, worker: Worker, model_id: str, request: ModelRequest, exc: Exception | str, *,
        retry: bool,
    ) -> None:  # fmt: skip
        self.lost_workers += 1
        if self._recorder is not None:
            self._recorder(
                EventKind.WORKER_LOST,
                request.prompt.manifest.subject[:160],
                {
                    "worker": worker.index,
                    "model_id": model_id,
                    "error": exc if isinstance(exc, str) else type(exc).__name__,
                    "retry": retry,
                },
            )

    def _killed(self, worker: Worker, context: Any) -> None:
        """The reaper killed ``worker``: recorded on the loop of the call it abandoned."""
        loop, model_id, request = context
        with contextlib.suppress(RuntimeError):  # that loop has closed: nothing to record in
            loop.call_soon_threadsafe(
                functools.partial(self._lost, worker, model_id, request, HUNG_WORKER, retry=False)
            )


class RemoteModel:
    """A `ChatModel` whose calls a `RayExecutor`'s workers answer.

    Tokens are counted, and the context window read, by the model made in the orchestrator's
    process (``local``): prompts are built and budgeted there.

    Args:
        executor: The pool that answers.
        make_id: The id each worker makes the model from.
        local: The model made locally for ``make_id``.
        options: The settings each worker makes the model with.
    """

    def __init__(
        self, executor: RayExecutor, make_id: str, local: ChatModel, options: dict[str, Any]
    ) -> None:
        self.model_id = local.model_id
        self.make_id = make_id
        self.context_window = local.context_window
        self.local = local
        self.options = options
        self._executor = executor

    def __repr__(self) -> str:
        return f"RemoteModel({self.model_id!r})"

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` to a worker; see `RayExecutor.complete`."""
        return await self._executor.complete(self.make_id, self.options, request)

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text``, counted by the local model."""
        return self.local.count_tokens(text)

    @property
    def prompt_framing_tokens(self) -> int:
        """The local model's `framing_tokens` (the workers run the same model)."""
        return framing_tokens(self.local)


async def _streamed(items: Any, sink: TextSink, *, max_tokens: int, model_id: str) -> Outcome:
    """Hand a streamed call's ``("text", piece)`` items to ``sink``; return its outcome.

    A worker's stream is held to what a provider streaming in this process is held to: at
    most `max_chunks` pieces and `max_response_chars` characters for the request's
    ``max_tokens``, so a worker cannot flood the sink (the terminal) before its answer is
    checked.

    Raises:
        ModelError: The worker streamed more pieces or characters than the caps allow, or
            a ``"text"`` item whose piece is not text.
    """
    pieces_cap, chars_cap = max_chunks(max_tokens), max_response_chars(max_tokens)
    pieces = chars = 0
    async for ref in items:
        item = await ref
        if not (isinstance(item, tuple) and len(item) == 2 and item[0] == "text"):
            return item  # type: ignore[no-any-return]
        piece = item[1]
        if not isinstance(piece, str):
            raise ModelError("a Ray worker streamed a piece that is not text", model_id=model_id)
        pieces, chars = pieces + 1, chars + len(piece)
        if pieces > pieces_cap or chars > chars_cap:
            raise ModelError(
                f"the Ray worker streamed more than {pieces_cap:,} pieces or {chars_cap:,} "
                f"characters for max_tokens={max_tokens} (max_response_chars): refused",
                model_id=model_id,
            )
        if piece:
            sink(piece)
    return ("error", "RayError", "the worker's stream ended without an answer", True)


HUNG_WORKER = "WorkerHung"
"""The ``error`` of the ``worker_lost`` event of a worker killed because a cancelled call of
its did not end within ``cancel_grace_s``."""

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_RAY_FAILURE = 500
"""Most characters of the line naming a Ray failure."""


def _ray_failure(exc: BaseException) -> str:
    """One line naming a Ray failure: its type and the first line of its cause's text.

    A `RayTaskError`'s own text is the worker's whole traceback (with ANSI colours); its
    ``cause`` is the exception the worker's method raised. At most `MAX_RAY_FAILURE`
    characters.
    """
    cause = getattr(exc, "cause", None)
    try:
        text = str(cause if isinstance(cause, BaseException) else exc)
    except Exception:  # an exception's own bug
        text = ""
    lines = [" ".join(_CONTROL.sub(" ", line).split()) for line in _ANSI.sub("", text).splitlines()]
    first = next((line for line in lines if line), "")
    line = f"Ray failed: {type(exc).__name__}" + (f": {first}" if first else "")
    return line if len(line) <= MAX_RAY_FAILURE else line[: MAX_RAY_FAILURE - 3] + "..."


def _cancel(ref: Any) -> None:
    import ray

    ray.cancel(ref)
