"""Reading a recorded run back from the ledger, to resume it.

A run records, when it starts, its team (every agent's spec, the coordinator's too), its
default model, concurrency and input folder (`Orchestrator`'s ``config``); its graph once
known; each task's latest state the moment it changes; and its messages. That is enough to
rebuild the run: completed results are kept, every other task runs again.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clearance._agents.tools import Tool, import_function
from clearance._core.errors import ClearanceError, ConfigError
from clearance._core.memory_spec import AgentMemory, MemoryGroup, SharedConversation
from clearance._core.origins import Subject
from clearance._core.spec import Agent, AgentLimits, Team
from clearance._core.vocabulary import PromptKind
from clearance._orchestration.resume_checks import check_run_record
from clearance._orchestration.run_memory import RunMemory
from clearance._state.graph import TaskGraph
from clearance._state.lease import pid_alive
from clearance._state.ledger import RunLedger, RunRecord
from clearance._state.messages import Message, MessageBus
from clearance._state.queue import TaskStatus
from clearance._state.store import ContextStore
from clearance.models._base import Usage

__all__ = [
    "RecordedRun",
    "check_resumable",
    "load_recorded_run",
    "process_identity",
    "recorded_usage",
    "restore_messages",
    "restore_resources",
]


def process_identity() -> dict[str, Any]:
    """This process, as a run records its owner: ``{"host": hostname, "pid": pid}``."""
    return {"host": socket.gethostname(), "pid": os.getpid()}


def _refuse_live_run(record: RunRecord) -> None:
    """Refuse to resume a run whose recorded process may still be running it.

    Raises:
        ConfigError: The run is ``running`` and its process is alive on this host, or it
            was started on another host (which cannot be checked from here).
    """
    owner = record.config.get("process")
    if record.status != "running" or not isinstance(owner, dict):
        return  # stopped, or recorded before runs named their process: nothing to check
    host, pid = owner.get("host"), owner.get("pid")
    if not isinstance(pid, int) or not isinstance(host, str):
        return
    me = process_identity()
    if host == me["host"]:
        if pid != me["pid"] and pid_alive(pid):
            raise ConfigError(
                f"run {record.run_id} is still running in process {pid} on this host; "
                "stop it (Ctrl-C) or wait for it, then resume",
                field="run",
            )
        return
    raise ConfigError(
        f"run {record.run_id} is marked running by process {pid} on host {host!r}, which "
        "cannot be checked from here; if that process has stopped, resume with --force "
        "(Orchestrator.resume(..., force=True))",
        field="run",
    )


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
        tools=tuple(data.get("tools", ())),
        can_delegate_to=tuple(data.get("can_delegate_to", ())),
        can_spawn=tuple(data.get("can_spawn", ())),
        store_grants=dict(data.get("store_grants", {})),
        memory=AgentMemory(**memory) if isinstance(memory := data.get("memory"), dict) else None,
        store_read_extends_ttl_s=data.get("store_read_extends_ttl_s"),
    )


def _groups(config: dict[str, Any]) -> tuple[MemoryGroup, ...]:
    """The run's memory groups: full specs when recorded, else names and members."""
    specs = config.get("memory_group_specs")
    if isinstance(specs, list):
        groups = []
        for spec in specs:
            shared = spec.get("shared_conversation")
            groups.append(
                MemoryGroup(
                    name=spec["name"],
                    agents=tuple(spec["agents"]),
                    shared_conversation=SharedConversation(**shared) if shared else None,
                )
            )
        return tuple(groups)
    members = config.get("memory_groups") or {}
    return tuple(MemoryGroup(name=g, agents=tuple(m)) for g, m in members.items())


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
        memory_groups=_groups(config),
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
        ConfigError: The recorded run cannot be rebuilt (a damaged graph or config), fails
            its hash-chain check, or is keyed and the ledger has no key (see
            `check_run_record`); the message names the run.
    """
    record = ledger.get_run(run_id)
    check_run_record(ledger, record.run_id)  # nothing is rebuilt from unchecked records
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


def check_resumable(record: RunRecord, *, force: bool = False) -> None:
    """Refuse to resume a run that completed or that a live process may still be running.

    Raises:
        ConfigError: The run already completed, or is still running in a live process on
            this host or was started on another host (unless ``force``).
    """
    if record.status == "completed":
        raise ConfigError(f"run {record.run_id} already completed; nothing to resume", field="run")
    if not force:
        _refuse_live_run(record)


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


def _recorded_url(record: RunRecord, key: str) -> str | None:
    value = record.config.get(key)
    url = value.get("url") if isinstance(value, dict) else None
    return url if isinstance(url, str) and url else None


def restore_resources(
    record: RunRecord,
    *,
    store: ContextStore | None,
    memory: RunMemory | None,
    tools: Mapping[str, Tool | Callable[..., Any]],
) -> tuple[ContextStore | None, RunMemory | None, dict[str, Tool | Callable[..., Any]]]:
    """The store, memory and user tools a resumed run needs, as the run recorded them.

    What is given wins; otherwise the store and memory are reopened at their recorded URLs,
    and each user tool the run recorded an import path for is imported again.

    Returns:
        ``(store, memory, tools)``; the caller closes a store or memory opened here.

    Raises:
        ConfigError: A recorded URL has its password masked (give the store or memory), or
            a recorded tool cannot be imported or has no recorded path (give it in
            ``tools``).
        StoreError: A recorded store cannot be opened.
    """
    config = record.config
    if store is None and (url := _recorded_url(record, "store")) is not None:
        if "***" in url:
            raise ConfigError(
                f"run {record.run_id} used the store at {url}, whose password is not recorded; "
                "give the store (clearance resume --store URL)",
                field="store",
            )
        store = ContextStore(url)
    if memory is None and (url := _recorded_url(record, "memory")) is not None:
        if "***" in url:
            raise ConfigError(
                f"run {record.run_id} used the memory at {url}, whose password is not "
                "recorded; give the memory (clearance resume --memory URL)",
                field="memory",
            )
        on_error = config["memory"].get("on_error", "fail")
        memory = RunMemory(url, on_error=on_error if on_error == "continue" else "fail")
    restored: dict[str, Tool | Callable[..., Any]] = dict(tools)
    paths = config.get("tool_paths") or {}
    for name, path in paths.items() if isinstance(paths, dict) else ():
        if name in restored:
            continue
        if not isinstance(path, str):
            raise ConfigError(
                f"run {record.run_id} used the tool {name!r}, which has no import path; give "
                "it with tools= (or name it in the team file's tools: and resume with --team)",
                field="tools",
            )
        restored[name] = import_function(path, field=f"tools.{name}")
    return store, memory, restored
