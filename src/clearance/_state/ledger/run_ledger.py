"""`RunLedger`: the durable record of every run.

The ledger keeps, per run: the goal, the task graph, each task's latest state, every model
call (the prompt's messages, its manifest and hash, the response, usage and timing), the
messages agents exchanged, the synthesis and the total usage. ``clearance inspect``,
``verify`` and ``resume`` read it back.

Storage is SQLAlchemy Core on SQLite by default (``sqlite:///.clearance/runs.db``, relative to
the working directory); a PostgreSQL URL works the same way. On SQLite every connection uses
write-ahead logging (readers never block the writer), ``synchronous=NORMAL`` (a commit
survives a crash of the process; the last commits may be lost on power failure), enforced
foreign keys and a busy timeout, and writes take the write lock up front (``BEGIN
IMMEDIATE``) so two ledgers on one file queue behind each other instead of failing.

The schema is versioned the way simonw's ``llm`` does it (`clearance._state.ledger.schema`):
opening a ledger applies the migrations its database lacks, in order, in one transaction.

All timestamps are timezone-aware UTC datetimes. Every failure of the database surfaces as
`StoreError`, naming the operation and the URL (password masked).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select, update

from clearance._core.errors import ConfigError
from clearance._core.ids import new_id
from clearance._core.prompt import Prompt
from clearance._state.db import JSONText, canonical_json_text
from clearance._state.ledger.events import LedgerEvents
from clearance._state.ledger.leases import lease_until
from clearance._state.ledger.records import unknown_run
from clearance._state.ledger.schema import RUNS
from clearance._state.ledger.writes import CallWrite, FinishWrite, TaskWrite
from clearance._state.messages import Message
from clearance._state.queue import TaskState
from clearance._state.write_behind import PendingWrite
from clearance.models._base import ModelResponse, Usage

__all__ = ["RUN_STATUSES", "RunLedger"]

RUN_STATUSES = ("running", "completed", "failed", "interrupted")
"""Statuses a run can have: ``running`` from `RunLedger.start_run` (or `reopen_run`) until
`finish_run`; ``interrupted`` when it was stopped and can be resumed."""


class RunLedger(LedgerEvents):
    """The durable record of every run (SQLAlchemy Core; SQLite by default).

    Each write is one short transaction; upserts use the dialect's
    ``INSERT ... ON CONFLICT DO UPDATE``, so recording a task or a message again updates it
    in place without a read first. Calls are synchronous and meant for one thread (the
    orchestrator's event-loop thread); several ledgers, in one process or several, may share
    a database file.

    Inside `write_behind` (the orchestrator uses it for every run), the frequent records
    (`start_run`, `record_task`, `record_tasks`, `record_call`, `record_messages`,
    `record_tool_call`) are queued instead and committed in groups by a writer thread, in
    order; every other method, reads included, first waits for the queued writes, so this
    ledger object always reads its own writes.

    Usable as a context manager; `close` releases the connections.

    Args:
        url: SQLAlchemy database URL: ``sqlite:///path`` (relative) or ``sqlite:////abs/path``,
            or ``postgresql://...``. The parent folder of an SQLite file is created.
        clock: Source of ``created_at`` and ``finished_at`` timestamps (aware UTC); ``None``:
            this host's clock. Leases are on the database's clock (`server_time`) whatever it is.
        read_only: Open an SQLite file read-only, for reading a ledger whose file or folder
            is not writable (`clearance verify`, `inspect`, `runs`): no schema migration,
            no write-ahead-log switch; every write fails with `StoreError`.
        create: Create the ledger (an SQLite file and its folder, the tables) when there is
            none yet. ``False``, for code acting on recorded runs (``clearance approve``,
            ``deny``, ``resume``): a missing SQLite file, or a database holding no ledger
            (empty, or another program's), is refused and nothing is written to it; an
            older ledger is still upgraded. ``read_only`` implies it.

    Raises:
        StoreError: The URL is malformed, names an unsupported database or a missing driver,
            the database cannot be reached or created, or its schema is newer than this
            version of Clearance (opened ``read_only``: is not this version's), or (opened
            ``read_only`` or without ``create``) there is no ledger there. The message
            holds the URL (password masked) and the cause.
    """

    def start_run(
        self,
        *,
        run_id: str,
        team: str,
        goal: str | None,
        graph: list[dict[str, Any]] | None,
        config: dict[str, Any] | None = None,
    ) -> None:
        """Record a new run with status ``"running"`` and ``created_at`` from the clock.

        Args:
            run_id: A new, unique id (``new_id("run")``).
            team: The team's name.
            goal: The goal of `run_team`, or ``None`` for a run of explicit tasks.
            graph: The task graph (`TaskGraph.to_dict`), or ``None`` until the coordinator
                has planned (then see `set_graph`).
            config: JSON-ready run settings; ``None`` records ``{}``.

        Raises:
            StoreError: The id is already recorded, or the database failed (inside
                `write_behind`: raised by a later call, see there).
        """
        row = {
            "run_id": run_id,
            "team": team,
            "goal": goal,
            "status": "running",
            "graph": _graph_text(graph),
            "config": config or {},
            "requests": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "created_at": self._clock(),
            "chain_key_id": self._key_id,
            "owner": self._leases.owner,
            "lease_expires_at": lease_until(self._server_time),
        }
        self._submit(PendingWrite(f"start run {run_id!r}", {"run": [row]}))
        # Remembered for `_update_run`; not when the id was started before in this ledger
        # (this insert will fail: the row is the other start's).
        if self._runs.pop(run_id, None) is None:
            self._runs[run_id] = dict(row)
        self._leases.hold(run_id)

    def reopen_run(
        self, run_id: str, *, process: dict[str, Any] | None = None, force: bool = False,
        seen: int | None = None,
    ) -> None:  # fmt: skip
        """Take a recorded run over to resume it: ``running`` again, owned by this ledger.

        Clears the run's end, synthesis and error. One process runs a run at a time: the
        run's row names its owner and the time its lease expires, and this is an atomic
        compare-and-set on that row. A run ``running`` under another owner is taken only
        once the owner's lease has expired (it is renewed while the owner runs) or the owner
        is a dead process on this host; a run with records past ``seen`` is never taken.

        Args:
            run_id: The run's full id.
            process: The process resuming it (``{"host", "pid"}``), recorded as the run
                config's ``process``; ``None`` leaves the config as it is.
            force: Take the run even from a live owner.
            seen: The run's chain head (`chain_heads`) when the caller read it to resume.

        Raises:
            ConfigError: Another live process holds the run's lease, or ``seen`` is stale.
            StoreError: The run is unknown, is chained with another ledger key, or the
                database failed.
        """
        with self._writing(f"reopen run {run_id!r}") as conn:
            now = self._server_time()
            query = select(
                RUNS.c.config, RUNS.c.owner, RUNS.c.lease_expires_at, RUNS.c.status
            ).where(RUNS.c.run_id == run_id)
            if self._dialect == "postgresql":
                query = query.with_for_update()
            row = conn.execute(query).first()
            if row is None:
                raise unknown_run(run_id, self._url)
            self._leases.check(run_id, row, now, force=force, seen=seen, conn=conn)
            values: dict[str, Any] = {}
            if process is not None:
                values["config"] = {**(row.config or {}), "process": process}
            owner = RUNS.c.owner
            taken = conn.execute(
                update(RUNS)
                .where(
                    RUNS.c.run_id == run_id,
                    owner.is_(None) if row.owner is None else owner == row.owner,
                )
                .values(
                    status="running",
                    error=None,
                    synthesis=None,
                    finished_at=None,
                    owner=self._leases.owner,
                    lease_expires_at=lease_until(self._server_time),
                    **values,
                )
            ).rowcount
            if not taken:  # another process took it between our read and our write
                raise ConfigError(
                    f"run {run_id} was just taken over by another process; not resumed",
                )
            self._chain.append_run(conn, run_id)
            self._runs.pop(run_id, None)
        self._leases.hold(run_id)

    def set_graph(self, run_id: str, graph: list[dict[str, Any]]) -> None:
        """Record the task graph of a run (after the coordinator planned it).

        Args:
            run_id: The run's full id.
            graph: The graph in `TaskGraph.to_dict` form; replaces any earlier one.

        Raises:
            StoreError: The run is unknown, or the database failed.
        """
        self._change_run(f"record the graph of run {run_id!r}", run_id, graph=_graph_text(graph))

    def record_task(self, run_id: str, state: TaskState) -> None:
        """Record a task's current state, replacing the previous record of the same task.

        One upsert keyed by ``(run_id, task id)``: status, result, error, timestamps, title,
        assignee, dependencies and memory scope are overwritten; the row keeps the position
        of its first record. A task is recorded when it changes state: until its first
        record `tasks` reads it from the run's graph. A failure, skip or interruption reason
        is also kept in `task_reasons`.

        Args:
            run_id: The run's full id.
            state: The task's state (`TaskQueue.get`).

        Raises:
            StoreError: The run is unknown, or the database failed (inside `write_behind`:
                raised by a later call, see there).
        """
        recorded_at = self._clock() if state.error is not None else None
        self._submit(TaskWrite(run_id, state, recorded_at))

    def record_tasks(self, run_id: str, states: Sequence[TaskState]) -> None:
        """Record several tasks' states at once, in one transaction (as `record_task` each).

        Args:
            run_id: The run's full id.
            states: The states (`TaskQueue.states`); an empty sequence does nothing.

        Raises:
            StoreError: The run is unknown, or the database failed (inside `write_behind`:
                raised by a later call).
        """
        if states:
            states = tuple(states)
            self._submit(TaskWrite(run_id, states, self._reason_time(states)))

    def _reason_time(self, states: tuple[TaskState, ...]) -> datetime | None:
        """When the reasons of ``states`` are recorded (``None``: none has an error).

        Read now, on the caller's thread (the clock may not be thread-safe); the rows are
        built on the writer thread.
        """
        for state in states:
            if state.error is not None:
                return self._clock()
        return None

    def record_messages(self, run_id: str, messages: Sequence[Message]) -> None:
        """Record messages of a run; a message already recorded (same id) is updated in place.

        Args:
            run_id: The run's full id.
            messages: The messages (`MessageBus.all`); an empty sequence does nothing.

        Raises:
            StoreError: The run is unknown, or the database failed (inside `write_behind`:
                raised by a later call).
        """
        if not messages:
            return
        rows = {
            m.id: {
                "run_id": run_id,
                "message_id": m.id,
                "sender": m.sender,
                "recipient": m.recipient,
                "content": m.content,
                "created_at": m.created_at,
            }
            for m in messages
        }
        self._submit(
            PendingWrite(
                f"record {len(rows)} message(s) of run {run_id!r}",
                {"message": list(rows.values())},
            )
        )

    def record_call(
        self,
        *,
        run_id: str,
        subject: str,
        agent: str,
        model_id: str,
        prompt: Prompt,
        response: ModelResponse | None,
        error: str | None,
        started_at: datetime,
        latency_s: float,
        parameters: dict[str, Any] | None = None,
    ) -> str:
        """Record one model call with the exact prompt it was given.

        Args:
            run_id: The run's full id.
            subject: ``"task:<id>"``, ``"synthesis"`` or ``"plan"``.
            agent: The agent the prompt was built for.
            model_id: The ``"provider:name"`` id called.
            prompt: The prompt sent; its messages, manifest and hash are stored.
            response: What the model returned, or ``None`` if the call failed (usage is then
                recorded as zero).
            error: Why the call failed, or ``None``.
            started_at: When the call started (aware UTC; a naive value is taken as UTC).
            latency_s: Wall-clock seconds the call took.
            parameters: What the model was asked besides the prompt
                (`ModelRequest.parameters`), chained with the call; ``None`` if not known.

        Returns:
            The new call's id (``call_...``).

        Raises:
            StoreError: The run is unknown, or the database failed (inside `write_behind`:
                raised by a later call).
        """
        call_id = new_id("call")
        # Serialized when committed (on the writer thread): prompt and response are
        # immutable.
        self._submit(
            CallWrite(
                call_id=call_id, run_id=run_id, subject=subject, agent=agent,
                model_id=model_id, prompt=prompt, response=response, error=error,
                started_at=started_at, latency_s=latency_s, pending=False,
                parameters=parameters,
            )
        )  # fmt: skip
        return call_id

    def record_request(
        self,
        *,
        run_id: str,
        subject: str,
        agent: str,
        model_id: str,
        prompt: Prompt,
        started_at: datetime,
        parameters: dict[str, Any] | None = None,
    ) -> str:
        """Record a model call about to be sent, before it is sent (its outcome comes later).

        The call is recorded ``pending`` (no response, zero usage) until `finish_call`; one
        left pending shows a request that left the process with no recorded outcome (the
        process stopped while the call was in flight). Inside `write_behind` the record is
        queued: await `wait_committed` before sending.

        Args:
            run_id: The run's full id.
            subject: ``"task:<id>"``, ``"synthesis"``, ``"plan"``...
            agent: The agent the prompt was built for.
            model_id: The ``"provider:name"`` id called.
            prompt: The prompt to send; its messages, manifest and hash are stored.
            started_at: When the call starts (aware UTC).
            parameters: What the model is asked besides the prompt
                (`ModelRequest.parameters`), chained with the call; ``None`` if not known.

        Returns:
            The new call's id (``call_...``), for `finish_call`.

        Raises:
            StoreError: The run is unknown, or the database failed (inside `write_behind`:
                raised by a later call).
        """
        call_id = new_id("call")
        self._submit(
            CallWrite(
                call_id=call_id, run_id=run_id, subject=subject, agent=agent,
                model_id=model_id, prompt=prompt, response=None, error=None,
                started_at=started_at, latency_s=0.0, pending=True, parameters=parameters,
            )
        )  # fmt: skip
        return call_id

    def finish_call(
        self,
        call_id: str,
        *,
        run_id: str,
        response: ModelResponse | None,
        error: str | None,
        latency_s: float,
        usage: Usage | None = None,
    ) -> None:
        """Record the outcome of a call recorded with `record_request`.

        Args:
            call_id: What `record_request` returned.
            run_id: The run's full id.
            response: What the model returned, or ``None`` if the call failed.
            error: Why the call failed, or ``None``.
            latency_s: Wall-clock seconds the call took.
            usage: The usage of a failed call whose answer arrived but was refused (it was
                paid for); ``None`` records the response's usage, or zero without one.

        Raises:
            StoreError: The database failed (inside `write_behind`: raised by a later call).
        """
        self._submit(FinishWrite(call_id, run_id, response, error, latency_s, usage))

    def finish_run(
        self, run_id: str, *, status: str, synthesis: str | None, usage: Usage, error: str | None
    ) -> None:
        """Record the end of a run, with ``finished_at`` from the clock.

        Args:
            run_id: The run's full id.
            status: ``"completed"`` or ``"failed"`` (``"running"`` is accepted too).
            synthesis: The final answer, or ``None``.
            usage: Total usage of the run.
            error: Why the run failed, or ``None``.

        Raises:
            ConfigError: ``status`` is not one of `RUN_STATUSES`.
            StoreError: The run is unknown, or the database failed.
        """
        if status not in RUN_STATUSES:
            raise ConfigError(
                f"run status must be one of {', '.join(RUN_STATUSES)}, got {status!r}",
                field="status",
            )
        lease: dict[str, Any] = {}
        if status != "running":
            lease = {"owner": None, "lease_expires_at": None}
            self._leases.drop(run_id)
        self._change_run(
            f"finish run {run_id!r}",
            run_id,
            status=status,
            synthesis=synthesis,
            error=error,
            requests=usage.requests,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            finished_at=self._clock(),
            **lease,
        )

    def record_tool_call(
        self,
        *,
        run_id: str,
        tool_call_id: str,
        subject: str,
        agent: str,
        step: int,
        name: str,
        arguments: dict[str, Any],
        result: str,
        is_error: bool,
        store_reads: Sequence[dict[str, Any]] = (),
        chain: dict[str, Any] | None = None,
    ) -> None:
        """Record one tool call and its result (see `ToolCallRecord` for the fields).

        Raises:
            StoreError: The run is unknown, the id is already recorded in the run, or the
                database failed.
        """
        row = {
            "tool_call_id": tool_call_id,
            "run_id": run_id,
            "subject": subject,
            "agent": agent,
            "step": step,
            "name": name,
            "arguments": arguments,
            "result": result,
            "is_error": int(is_error),
            "store_reads": list(store_reads),
            "chain": chain,
            "created_at": self._clock(),
        }
        self._submit(
            PendingWrite(
                f"record tool call {tool_call_id!r} of run {run_id!r}", {"tool_call": [row]}
            )
        )


def _graph_text(graph: list[dict[str, Any]] | None) -> JSONText | list[dict[str, Any]] | None:
    """A run's graph as canonical JSON (`canonical_json_text`), serialized once.

    The text is the column's value and is spliced into each digest of the run's record
    (`payload_sha256`); the ledger keeps it for the run's later updates instead of the
    graph's dicts and lists (three objects a task for the garbage collector to walk). A
    graph without such a text (a NaN in an output schema, a lone surrogate recorded by an
    earlier version...) is kept as it is and serialized when written, as before.
    """
    if graph is None:
        return None
    text = canonical_json_text(graph)
    return graph if text is None else text
