"""What the ledger says about a run, indexed for ``clearance verify``'s checks."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from clearance._context.tool_sections import tool_name
from clearance._context.verify_capabilities import runner_of
from clearance._context.verify_inflight import delegations_in_flight
from clearance._context.verify_memory import ConversationFacts, recalled_memories
from clearance._context.verify_subagents import SubagentFacts
from clearance._core.errors import ConfigError
from clearance._core.event_schema import event_problem
from clearance._core.spec import DEFAULT_COORDINATOR, Agent
from clearance._core.teamfile_models import IsolationSpec
from clearance._core.vocabulary import EventKind, RecordKind
from clearance._state.graph import TaskGraph
from clearance._state.ledger import CallRecord, EventRecord, RunLedger, RunRecord, ToolCallRecord
from clearance._state.ledger.audit import AuditRows
from clearance._state.messages import Message

if TYPE_CHECKING:
    from clearance._state.memory import MemoryRecord
    from clearance._state.store import StoreEntry

__all__ = ["MemoryLookup", "Problem", "RunFacts", "StoreLookup"]

_MAX_ROUNDS = IsolationSpec().max_rounds

MemoryLookup = Callable[[str], "MemoryRecord | None"]
"""Finds a memory record by id in the memory store, whatever its scope (for auditing)."""

StoreLookup = Callable[[str, str], "StoreEntry | None"]
"""Finds the live entry at ``(namespace, key)`` in the run's context store (for auditing)."""

Problem = tuple[str | None, str]
"""``(origin or None, reason)``: one finding about a call."""


class RunFacts:
    """What the ledger says about a run, indexed for the checks."""

    def __init__(
        self,
        ledger: RunLedger,
        run: RunRecord,
        memories: MemoryLookup | None = None,
        store: StoreLookup | None = None,
        read: AuditRows | None = None,
        positions: Mapping[tuple[str, str], int] | None = None,
    ):
        """Index ``run``'s records: ``read`` when given, else read from ``ledger``.

        ``read`` is one read of every record (`RunLedger.audit_rows`); its calls are set as
        `calls` by the caller. ``positions`` is each record's place in the run's hash chain
        by ``(kind, id)`` (`record_positions`): which session's spawn a child's records
        belong to.
        """
        if read is None:
            read = AuditRows(
                tasks=ledger.tasks(run.run_id),
                task_reasons=ledger.task_reasons(run.run_id),
                messages=ledger.messages(run.run_id),
                tool_calls=ledger.tool_calls(run.run_id),
                events=ledger.events(run.run_id),
            )
        self.run = run
        self.memories = memories
        self.store = store
        self.graph = TaskGraph.from_dict(run.graph) if run.graph else None
        records = self.tasks = read.tasks
        self.results = {t.task_id: t.result for t in records if t.result is not None}
        self.completed = {t.task_id: t.result or "" for t in records if t.status == "completed"}
        self.calls: list[CallRecord] = []
        self._indexed: list[CallRecord] | None = None
        # Every reason a task was ever recorded with: a resumed run re-runs failed tasks.
        self.errors: dict[str, set[str]] = {
            task_id: set(reasons) for task_id, reasons in read.task_reasons.items()
        }
        for t in records:
            if t.error is not None:
                self.errors.setdefault(t.task_id, set()).add(t.error)
        self.messages = {
            m["id"]: Message(
                id=m["id"],
                sender=m["sender"],
                recipient=m["recipient"],
                content=m["content"],
                created_at=m["created_at"],
            )
            for m in read.messages
        }
        config = run.config or {}
        self.instructions: dict[str, str] = {
            a["name"]: str(a.get("instructions", "")).strip() for a in config.get("agents", [])
        }
        # Tools and store grants, as the run's config recorded them (never model output).
        self.agents: dict[str, Agent] = {}
        for spec in config.get("agents", []):
            try:
                self.agents[spec["name"]] = Agent(
                    name=spec["name"],
                    instructions=str(spec.get("instructions", "")) or "-",
                    role=str(spec.get("role") or ""),
                    tools=tuple(tool_name(t) for t in spec.get("tools", ())),
                    can_delegate_to=tuple(spec.get("can_delegate_to", ())),
                    store_grants=dict(spec.get("store_grants", {})),
                    can_spawn=tuple(spec.get("can_spawn", ())),
                )
            except (ConfigError, KeyError, TypeError):
                continue
        self.tool_calls = {t.tool_call_id: t for t in read.tool_calls}
        # The tool calls of each subject, so a prompt's items never scan the whole run's.
        self.tool_calls_of: dict[str, list[ToolCallRecord]] = {}
        for tool_call in self.tool_calls.values():
            self.tool_calls_of.setdefault(tool_call.subject, []).append(tool_call)
        # Ids of the memory records each task recalled, by subject (``task:<id>``).
        self.recalled = recalled_memories(self.tool_calls.values())
        # Whether delegates and children were given only their callers' tools (a run
        # recorded before 2026-11-27 used its own: not checked there).
        self.tool_ceilings = config.get("tool_ceilings") is True
        # The format the run's prompts were built in (`PROMPT_FORMAT`); 0 for a run recorded
        # before runs named it (its synthesis summaries may carry plain labels).
        fmt = config.get("prompt_format", 0)
        if not isinstance(fmt, int) or isinstance(fmt, bool) or fmt < 0:
            raise TypeError(f"the run's recorded prompt_format is not a version: {fmt!r}")
        self.prompt_format: int = fmt
        # (agent, tool name) to the digest of the tool's description in its first prompt.
        self.tool_specs: dict[tuple[str, str], Any] = {}
        groups = config.get("memory_groups") or {}
        if isinstance(groups, list):  # a recorded `RunSpec`: entries of memory_groups
            groups = {g.get("name"): list(g.get("agents", ())) for g in groups}
        self.memory_groups: dict[str, list[str]] = dict(groups)
        coordinator = config.get("coordinator")
        if coordinator is None and "agents" in config:  # a spec without one: the default
            coordinator = {"name": DEFAULT_COORDINATOR.name,
                           "instructions": DEFAULT_COORDINATOR.instructions}  # fmt: skip
        self.coordinator: str | None = None
        if isinstance(coordinator, dict) and "instructions" in coordinator:
            self.instructions[coordinator["name"]] = str(coordinator["instructions"]).strip()
            self.coordinator = str(coordinator["name"])
        events = read.events
        # Events that do not match their kind's schema, with why (a finding each).
        self.malformed_events = [
            (event, problem)
            for event in events
            if (problem := event_problem(event.kind, event.data)) is not None
        ]
        bad = {event.event_id for event, _ in self.malformed_events}
        self.events = [event for event in events if event.event_id not in bad]
        self.subagents = SubagentFacts(self.events, positions)
        # ``hook_context`` events by subject (``task:<id>``), read once for every prompt.
        self.hook_events: dict[str, list[EventRecord]] = {}
        for e in self.events:
            if e.kind == EventKind.HOOK_CONTEXT:
                self.hook_events.setdefault(e.subject, []).append(e)
        # (subject, tool call id) of each tool result a loop compacted (``compacted`` events).
        self.compacted = {
            (e.subject, str(call_id))
            for e in self.events
            if e.kind == EventKind.COMPACTED
            for call_id in e.data.get("tool_call_ids") or ()
        }
        # Most clarification rounds of an isolated task (``isolation.max_rounds``; a config
        # recorded before the run spec named it ``clarification_rounds``); ``None``: not a cap.
        isolation = config.get("isolation")
        rounds = (
            isolation.get("max_rounds", _MAX_ROUNDS)
            if isinstance(isolation, dict)
            else config.get("clarification_rounds", _MAX_ROUNDS)
        )
        valid = isinstance(rounds, int) and not isinstance(rounds, bool) and 0 <= rounds <= 10
        self.clarification_rounds: int | None = rounds if valid else None
        chosen = config.get("synthesis_ids", config.get("synthesis_from"))
        self.synthesis_from = frozenset(chosen) if isinstance(chosen, list) else None

    def calls_of(self, subject: str) -> list[CallRecord]:
        """The calls of ``subject`` in recorded order (indexed once per list set as `calls`)."""
        if self._indexed is not self.calls:
            self._calls_of: dict[str, list[CallRecord]] = {}
            for call in self.calls:
                self._calls_of.setdefault(call.subject, []).append(call)
            self._indexed = self.calls
        return self._calls_of.get(subject, [])

    @functools.cached_property
    def review_rounds(self) -> dict[tuple[str, int, int], list[dict[str, Any]]]:
        """The ``review_round`` events' data by ``(task, round, stage)``, in recorded order."""
        rounds: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
        for e in self.events:
            if e.kind == EventKind.REVIEW_ROUND:
                key = (str(e.data.get("task_id")), int(e.data.get("round", 0)),
                       int(e.data.get("stage", 0)))  # fmt: skip
                rounds.setdefault(key, []).append(e.data)
        return rounds

    @functools.cached_property
    def delegations(self) -> dict[str, ToolCallRecord]:
        """`tool_calls`, and each delegation the run stopped inside (`delegations_in_flight`).

        For looking up whom a delegate acts for, never for what a tool call returned.
        """
        spawns = self.subagents.spawns
        assignees = {t.id: t.assignee for t in self.graph or ()}

        def runner(
            subject: str, known: Mapping[str, ToolCallRecord], event: EventRecord
        ) -> str | None:
            at = spawns.position(RecordKind.EVENT, event.event_id)
            return runner_of(subject, known, spawns, assignees, at)

        return {**delegations_in_flight(self.tool_calls, self.events, runner), **self.tool_calls}

    @functools.cached_property
    def conversation(self) -> ConversationFacts:
        """The chat conversations' turns and summaries, indexed once (after `calls` is set)."""
        fmt = (self.run.config or {}).get("chat_format", 0)
        if not isinstance(fmt, int) or isinstance(fmt, bool) or fmt < 0:
            raise TypeError(f"the run's recorded chat_format is not a version: {fmt!r}")
        return ConversationFacts.of(self.calls, self.events, fmt)
