"""Reading a recorded run back from the ledger, to resume it.

A run records, when it starts, its team (every agent's spec, the coordinator's too), its
default model, concurrency and input folder (`Orchestrator`'s ``config``); its graph once
known; each task's latest state the moment it changes; and its messages. That is enough to
rebuild the run: completed results are kept, every other task runs again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clearance._core.errors import ClearanceError, ConfigError
from clearance._core.spec import Agent, AgentLimits, Team
from clearance._state.graph import TaskGraph
from clearance._state.ledger import RunLedger, RunRecord
from clearance._state.messages import Message, MessageBus
from clearance._state.queue import TaskStatus

__all__ = ["RecordedRun", "load_recorded_run", "restore_messages"]


@dataclass(frozen=True, kw_only=True, slots=True)
class RecordedRun:
    """What the ledger holds about a run, rebuilt as specs.

    Attributes:
        record: The run's ledger record.
        graph: Its task graph, or ``None`` if it was stopped before the coordinator planned.
        completed: Results of the tasks recorded ``completed``, by task id.
        messages: Its recorded messages, oldest first.
        team: The team rebuilt from the recorded config, or ``None`` when the run was
            recorded without agent specs (then the resuming orchestrator's team is used).
        default_model: The recorded default model id, or ``None``.
        max_concurrency: The recorded concurrency, or ``None``.
        input_root: The recorded input folder, or ``None``.
    """

    record: RunRecord
    graph: TaskGraph | None
    completed: dict[str, str]
    messages: tuple[Message, ...]
    team: Team | None
    default_model: str | None
    max_concurrency: int | None
    input_root: Path | None


def _agent(data: dict[str, Any]) -> Agent:
    limits = data.get("limits")
    return Agent(
        name=data["name"],
        instructions=data["instructions"],
        role=data.get("role", ""),
        model=data.get("model"),
        limits=AgentLimits(**limits) if isinstance(limits, dict) else AgentLimits(),
    )


def _team(record: RunRecord) -> Team | None:
    config = record.config
    agents = config.get("agents")
    if not agents or not all(isinstance(a, dict) and "limits" in a for a in agents):
        return None
    coordinator = config.get("coordinator")
    return Team(
        agents=tuple(_agent(a) for a in agents),
        coordinator=_agent(coordinator)
        if isinstance(coordinator, dict) and "limits" in coordinator
        else None,
        name=record.team,
    )


def load_recorded_run(ledger: RunLedger, run_id: str) -> RecordedRun:
    """Read a run back from the ledger.

    Args:
        ledger: The ledger the run was recorded in.
        run_id: The run's id, or a unique prefix of it.

    Returns:
        The run's record, graph, completed results, messages and recorded settings.

    Raises:
        StoreError: No run (or several) match ``run_id``, or the database failed.
        ConfigError: The recorded run cannot be rebuilt (a damaged graph or config); the
            message names the run.
    """
    record = ledger.get_run(run_id)
    try:
        graph = TaskGraph.from_dict(record.graph) if record.graph is not None else None
        team = _team(record)
        concurrency = record.config.get("max_concurrency")
        root = record.config.get("input_root")
        default = record.config.get("default_model")
    except (ClearanceError, KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"run {record.run_id} cannot be rebuilt from the ledger: {exc}", field="run"
        ) from exc
    completed = {
        t.task_id: t.result
        for t in ledger.tasks(record.run_id)
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
        team=team,
        default_model=default if isinstance(default, str) else None,
        max_concurrency=concurrency if isinstance(concurrency, int) and concurrency > 0 else None,
        input_root=Path(root) if isinstance(root, str) else None,
    )


def restore_messages(messages: tuple[Message, ...]) -> MessageBus:
    """A message bus holding exactly ``messages`` (ids, times and order kept).

    New messages sent on the bus continue the ``msg-<n>`` numbering after the restored ones.
    """
    bus = MessageBus()
    for message in messages:
        bus.restore(message)
    return bus
