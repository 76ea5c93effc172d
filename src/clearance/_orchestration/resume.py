"""Reading a recorded run back from the ledger, to resume it.

A run records, when it starts, its `RunSpec` (the ``config``, see `RunSpec.to_record`); its
graph once known; each task's latest state the moment it changes; and its messages. That is
enough to rebuild the run: completed results are kept, every other task runs again.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from clearance._core.errors import ClearanceError, ConfigError
from clearance._core.origins import Subject
from clearance._core.run_spec import MASK, PROMPT_FORMAT, RunSpec
from clearance._core.vocabulary import PromptKind
from clearance._orchestration.approval import check_requests
from clearance._orchestration.resume_checks import check_run_record
from clearance._orchestration.run_memory import RunMemory
from clearance._state.graph import TaskGraph
from clearance._state.lease import LEASE_S, pid_alive, start_ticks
from clearance._state.ledger import RunLedger, RunRecord, TaskRecord
from clearance._state.messages import Message, MessageBus
from clearance._state.queue import TaskStatus
from clearance._state.store import ContextStore
from clearance.models._base import Usage

__all__ = [
    "RecordedRun",
    "check_resumable",
    "load_recorded_run",
    "process_gone",
    "process_identity",
    "recorded_config",
    "recorded_spec",
    "recorded_usage",
    "restore_messages",
    "shown_status",
    "spec_resources",
]


def process_identity() -> dict[str, Any]:
    """This process, as a run records its owner: ``{"host": hostname, "pid": pid}``.

    With ``"started"`` too, the process's start time (`start_ticks`) where it can be read: a
    process id reused by a later process is not taken for the run's.
    """
    pid = os.getpid()
    started = start_ticks(pid)
    identity: dict[str, Any] = {"host": socket.gethostname(), "pid": pid}
    return identity if started is None else {**identity, "started": started}


def recorded_config(spec: RunSpec, synthesis_from: Sequence[str] | None) -> dict[str, Any]:
    """A run's configuration as recorded when it starts, and read back by `recorded_spec`.

    Its spec (`RunSpec.to_record`, with the ids of the tasks the synthesis shows, ``None``
    for all), this process (`process_identity`: `check_resumable` refuses a run whose
    process is alive), ``tool_ceilings`` (`clearance._context.authority`) and the
    ``prompt_format`` its prompts are built in (`PROMPT_FORMAT`).
    """
    ids = list(synthesis_from) if synthesis_from is not None else None
    record = spec.to_record(synthesis_ids=ids)
    return {
        **record,
        "process": process_identity(),
        "tool_ceilings": True,
        "prompt_format": PROMPT_FORMAT,
    }


def _owner(record: RunRecord) -> tuple[str, int, str | None] | None:
    """The host, process id and start ticks a ``running`` run recorded, else ``None``.

    ``None`` too for a run recorded before runs named their process: nothing to judge by.
    """
    owner = record.config.get("process")
    if record.status != "running" or not isinstance(owner, dict):
        return None
    host, pid, started = owner.get("host"), owner.get("pid"), owner.get("started")
    if not isinstance(pid, int) or not isinstance(host, str):
        return None
    return host, pid, started if isinstance(started, str) else None


def process_gone(record: RunRecord, *, now: datetime) -> bool:
    """Whether a run recorded ``running`` is run by no process any more (killed, say).

    Its recorded process (`process_identity`) is dead on this host, or its id now belongs
    to a process started at another time; a process of another host has let its lease
    lapse (`clearance._state.lease.LEASE_S`; ``now`` on the ledger's clock). A run (a chat
    session too) whose owner may be alive, or that names none, is not gone. `resume` takes
    over a run only when it is gone; `clearance runs` and `inspect` show it as gone.
    """
    owner = _owner(record)
    if owner is None:
        return False
    host, pid, started = owner
    if host == socket.gethostname():
        now_started = start_ticks(pid)
        reused = started is not None and now_started not in (None, started)
        if pid == os.getpid():  # this process: the run's only if it started as the run's
            return started is not None and now_started != started
        return reused or not pid_alive(pid)
    lease = record.lease_expires_at
    return lease is not None and lease <= now


def shown_status(record: RunRecord, *, now: datetime) -> str:
    """A run's status as listed: its recorded status, or ``running (process gone)``.

    The latter for a run `process_gone` says no process runs.
    """
    return f"{record.status} (process gone)" if process_gone(record, now=now) else record.status


def _refuse_live_run(record: RunRecord, now: datetime) -> None:
    """Refuse to resume a run whose recorded process may still be running it.

    A run of another host is refused while its owner's lease holds: the owner renews it
    while it runs (`clearance._state.lease.LEASE_S`), so a lapsed lease is a stopped owner,
    and `RunLedger.reopen_run` takes the run over (an atomic compare-and-set on its row).

    Raises:
        ConfigError: The run is ``running`` and its process is alive on this host, or it
            was started on another host and its lease has not lapsed (or it has none).
    """
    owner = _owner(record)
    if owner is None or process_gone(record, now=now):
        return  # stopped, named no process, or its process is gone: nothing to refuse
    host, pid, _ = owner
    if host == socket.gethostname():
        if pid != os.getpid():
            raise ConfigError(
                f"run {record.run_id} is still running in process {pid} on this host; "
                "stop it (Ctrl-C) or wait for it, then resume",
            )
        return
    raise ConfigError(
        f"run {record.run_id} is marked running by process {pid} on host {host!r}, which "
        f"cannot be checked from here; its lease lapses {LEASE_S:.0f} s after that process "
        "stops, or if it has stopped, resume with --force (Orchestrator.resume(..., force=True))",
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class RecordedRun:
    """What the ledger holds about a run, rebuilt as specs.

    Attributes:
        record: The run's ledger record.
        graph: Its task graph, or ``None`` if it was stopped before the coordinator planned.
        completed: Results of the tasks recorded ``completed``, by task id.
        messages: Its recorded messages, oldest first.
        tasks: Each task as the ledger reads it (`RunLedger.tasks`), by task id.
        chain_head: The run's chain head (`RunLedger.chain_heads`) read before the rest:
            `RunLedger.reopen_run` takes the run over only while it still is, so a resume
            never acts on a read another process's session made stale (``None``: unchained).
    """

    record: RunRecord
    graph: TaskGraph | None
    completed: dict[str, str]
    messages: tuple[Message, ...]
    tasks: dict[str, TaskRecord]
    chain_head: int | None = None


def recorded_spec(record: RunRecord) -> tuple[RunSpec, tuple[str, ...] | None]:
    """The spec a run recorded, and the task ids its synthesis shows (``None``: all).

    Raises:
        ConfigError: The run was recorded by an older version of Clearance (without its
            spec: resume it with ``Orchestrator(team, ...).resume(run_id)``), or its record
            is damaged.
    """
    spec = RunSpec.from_record(record.config, run_id=record.run_id)
    ids = record.config.get("synthesis_ids")
    if ids is not None and not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
        raise ConfigError(f"run {record.run_id}: its synthesis_ids are damaged")
    return spec, tuple(ids) if ids is not None else None


def load_recorded_run(ledger: RunLedger, run_id: str) -> RecordedRun:
    """Read a run back from the ledger.

    Args:
        ledger: The ledger the run was recorded in.
        run_id: The run's id, or a unique prefix of it.

    Returns:
        The run's record, graph, completed results and messages.

    Raises:
        StoreError: No run (or several) match ``run_id``, or the database failed.
        ConfigError: The recorded run cannot be rebuilt (a damaged graph or config), fails
            its hash-chain check, or is keyed and the ledger has no key (see
            `check_run_record`); the message names the run.
        MalformedRecord: An approval request of the run was edited (`check_requests`).
    """
    full_id = ledger.get_run(run_id).run_id
    head = ledger.chain_heads([full_id]).get(full_id)  # first: what is read next is as new
    record = ledger.get_run(full_id)
    check_run_record(ledger, record.run_id)  # nothing is rebuilt from unchecked records
    check_requests(ledger.events(record.run_id), record.run_id)  # approvals act as shown
    try:
        graph = TaskGraph.from_dict(record.graph) if record.graph is not None else None
    except (ClearanceError, KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"run {record.run_id} cannot be rebuilt from the ledger: {exc}") from exc
    tasks = {t.task_id: t for t in ledger.tasks(record.run_id)}
    completed = {
        t.task_id: t.result
        for t in tasks.values()
        if t.status == TaskStatus.COMPLETED.value and t.result is not None
    }
    if graph is not None:
        completed = {k: v for k, v in completed.items() if k in graph}
    messages = tuple(
        Message(
            id=m["id"],
            sender=m["sender"],
            recipient=m["recipient"],
            content=m["content"],
            created_at=m["created_at"],
        )
        for m in ledger.messages(record.run_id)
    )
    return RecordedRun(
        record=record,
        graph=graph,
        completed=completed,
        messages=messages,
        tasks=tasks,
        chain_head=head,
    )


def restore_messages(messages: tuple[Message, ...]) -> MessageBus:
    """A message bus holding exactly ``messages`` (ids, times and order kept).

    New messages sent on the bus continue the ``msg-<n>`` numbering after the restored ones.
    """
    bus = MessageBus()
    for message in messages:
        bus.restore(message)
    return bus


def check_resumable(record: RunRecord, *, now: datetime, force: bool = False) -> None:
    """Refuse to resume a run that completed or that a live process may still be running.

    ``now`` is the time on the ledger's clock (`RunLedger.server_time`), which another
    host's lease is judged by.

    Raises:
        ConfigError: The run already completed, or is still running in a live process on
            this host or was started on another host (unless ``force``).
    """
    if record.status == "completed":
        raise ConfigError(f"run {record.run_id} already completed; nothing to resume")
    if not force:
        _refuse_live_run(record, now)


def recorded_usage(ledger: RunLedger, recorded: RecordedRun) -> tuple[Usage, dict[str, int]]:
    """The usage of every recorded call of a run, and the prompt tokens of its kept tasks.

    Returns:
        ``(usage, {task id: prompt tokens})`` for the tasks recorded ``completed``.
    """
    usage = Usage()
    prompt_tokens: dict[str, int] = {}
    for call in ledger.calls(recorded.record.run_id):
        usage = usage + call.usage
        subject = Subject.parse(call.subject)
        if subject.kind == PromptKind.TASK and subject.id in recorded.completed and not call.error:
            prompt_tokens[subject.id] = int(call.manifest.get("total_tokens", 0))
    return usage, prompt_tokens


def spec_resources(
    spec: RunSpec,
    *,
    store: ContextStore | None,
    memory: RunMemory | None,
) -> tuple[ContextStore | None, RunMemory | None]:
    """The store and memory of a run: the ones given, else opened at the spec's URLs.

    Returns:
        ``(store, memory)``; the caller closes a store or memory opened here.

    Raises:
        ConfigError: A URL has its password masked (a recorded run: give the store or
            memory again).
        StoreError: The store cannot be opened.
    """
    if store is None and spec.store is not None:
        if MASK in spec.store:
            raise ConfigError(
                f"the store at {spec.store} has a password that is not recorded; give the "
                "store (clearance resume --store URL)",
                field="store",
            )
        store = ContextStore(spec.store)
    settings = spec.memory_settings
    if memory is None and settings.url is not None:
        if MASK in settings.url:
            raise ConfigError(
                f"the memory at {settings.url} has a password that is not recorded; give the "
                "memory (clearance resume --memory URL)",
                field="memory",
            )
        memory = RunMemory(settings.url, on_error=settings.on_error)
    return store, memory
