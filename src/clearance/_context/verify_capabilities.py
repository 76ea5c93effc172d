"""``verify``'s capability checks: no capability was lent, every workspace record holds.

An agent acting for another — a delegate for its delegator, a child for its parent's task —
acts with at most the intersection of its own store grants and those of every agent it acts
for (see `clearance._orchestration.runtime`). From the run's records alone (its config's
grants, its tool calls' subjects, its ``spawn`` events) ``verify`` rebuilds, for each tool
call, the agents it acted for, and checks:

- every store entry a tool call read is in a namespace its own agent and each of those
  agents may read, and every store write (``store_set``, ``store_set_with_extension``,
  ``store_touch``) is in one each may write: a read or write outside the agent's own grants
  is a finding, and one outside a caller's a capability lent (the confused deputy);
- every call of a user or MCP tool by an agent acting for others that ran (recorded as
  ``tool_started``, or succeeded) is of a tool each of them may call too
  (`clearance._context.authority`; for runs recorded with ``tool_ceilings``), and so is
  every such tool it was offered (the tools its recorded calls' parameters name:
  `check_offered_tools`);
- every child was spawned by an agent whose ``can_spawn`` names the child's agent: one
  recorded under its task's own subject by the task's assignee, and one spawned by a
  delegate under that delegation (so its reads and writes
  are checked against the delegate's grants and its delegator's);
- every tool call is recorded as made by the agent its subject runs (a task's assignee, the
  delegate a ``delegate`` call named, the agent a ``spawn`` event names), so none is judged
  by another agent's grants and tools;

a child's records are judged by the spawn of their own session (`Spawns`: a resumed session
spawns a child again under its id, maybe by another spawner), and every session's spawn is
checked;
- every ``offloaded`` event names a recorded tool call of its subject whose recorded result
  (what the model was shown) is the preview that names the offloaded file's reference.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Literal

from clearance._context.authority import ceiling_tools
from clearance._context.verify_children import Spawns
from clearance._core.spec import Agent
from clearance._core.vocabulary import EventKind, PromptKind, RecordKind
from clearance._state.grants import StoreGrants
from clearance._state.ledger import CallRecord, EventRecord, ToolCallRecord

__all__ = [
    "callers_of",
    "check_capabilities",
    "check_offered_tools",
    "runner_of",
    "spawn_callers",
]

Problem = tuple[str, str | None, str]
"""``(subject, call id or None, reason)`` of one finding."""

_WRITES = ("store_set", "store_set_with_extension", "store_touch")


def callers_of(
    subject: str,
    tool_calls: Mapping[str, ToolCallRecord],
    spawns: Spawns,
    at: int | None = None,
) -> list[str] | None:
    """The agents a call of ``subject`` acts for, nearest first (``[]`` for a task's own).

    ``delegation:<tool call id>``: the delegating call's agent, then whoever that one acted
    for; ``child:<id>``: the parent agent recorded at the spawn of the record's session (the
    last spawn of the id before the record at chain position ``at``: a resumed session
    spawns it again under its id, maybe by another spawner), then whoever it acted for.

    Returns:
        The agents, or ``None`` when the records do not say (a forged or missing link).
    """
    callers: list[str] = []
    for _ in range(64):  # chains are short; a cycle in forged records ends here
        kind, _, ref = subject.partition(":")
        if kind in (PromptKind.TASK, PromptKind.ISOLATED):
            return callers
        if kind == PromptKind.DELEGATION:
            parent = tool_calls.get(ref)
            if parent is None:
                return None
            callers.append(parent.agent)
            subject, at = parent.subject, spawns.position("tool_call", ref)
        elif kind == PromptKind.CHILD:
            spawn = spawns.at(ref, at)
            if spawn is None:
                return None
            callers.append(str(spawn.get("parent_agent")))
            subject = str(spawn.get("parent_subject") or f"task:{spawn.get('task_id')}")
            at = spawns.position_of(spawn)
        else:
            return None
    return None


def spawn_callers(
    tool_calls: Mapping[str, ToolCallRecord], spawns: Spawns
) -> Callable[[EventRecord], list[str] | None]:
    """Whom the spawner of a ``spawn`` event acted for (`callers_of` its ``parent_subject``).

    ``tool_calls`` holds the delegations the run stopped inside too (`RunFacts.delegations`):
    a delegate that spawned acts for its delegators, nearest first, up to the task's
    assignee; the assignee (``parent_subject`` the task's own, or none recorded) for nobody.
    """

    def acted_for(event: EventRecord) -> list[str] | None:
        subject = event.data.get("parent_subject")
        if not isinstance(subject, str) or subject == event.subject:
            return []
        at = spawns.position(RecordKind.EVENT, event.event_id)
        return callers_of(subject, tool_calls, spawns, at)

    return acted_for


def check_capabilities(
    agents: Mapping[str, Agent],
    tool_calls: Mapping[str, ToolCallRecord],
    spawns: Spawns,
    events: list[EventRecord],
    *,
    tool_ceilings: bool = False,
    assignees: Mapping[str, str | None] | None = None,
) -> Iterator[Problem]:
    """Check that no store grant or tool was lent and that offloading records hold.

    Args:
        agents: The run's agents, as its config recorded them.
        tool_calls: The run's tool calls, by id, with each delegation the run stopped
            inside (`delegations_in_flight`: started, not answered yet).
        spawns: The run's recorded spawns, every session's (with the parent's ``task_id``).
        events: The run's events.
        tool_ceilings: Whether the run gave delegates and children only their callers'
            tools (its config's ``tool_ceilings``): a call outside is then a finding.
        assignees: Each task's assignee, from the recorded graph: it makes the task's tool
            calls, and asks for the children spawned under the task's own subject.
    """
    started = {str(e.data.get("tool_call_id")) for e in events if e.kind == EventKind.TOOL_STARTED}
    for record in tool_calls.values():
        at = spawns.position("tool_call", record.tool_call_id)
        callers = callers_of(record.subject, tool_calls, spawns, at)
        if callers is None:
            continue
        where = f"tool call {record.tool_call_id}"
        runner = runner_of(record.subject, tool_calls, spawns, assignees or {}, at)
        if runner is not None and record.agent != runner:
            yield (
                where, None,
                f"tool call {record.tool_call_id} was recorded as made by {record.agent!r}, "
                f"but {record.subject} is run by {runner!r}",
            )  # fmt: skip
        if agents:  # a run recorded without its agents has no grants to check against
            yield from _check_own_grants(where, record, agents)
        if not callers:
            continue
        ran = record.tool_call_id in started or not record.is_error
        lender = _lender(record.agent, record.name, callers, agents) if ran else None
        if tool_ceilings and lender is not None:
            yield (
                where, None,
                f"{record.agent!r} called {record.name!r} acting for {lender!r}, which may "
                "not call it (a capability lent)",
            )  # fmt: skip
        for operation, ns in _store_operations(record):
            for caller in callers:
                agent = agents.get(caller)
                grants = StoreGrants.parse(agent.store_grants) if agent else StoreGrants()
                if not grants.allows(ns, operation):
                    yield (
                        where, None,
                        f"{record.agent!r} could {operation} {ns!r} acting for {caller!r}, "
                        f"which has no {operation} grant there (a capability lent)",
                    )  # fmt: skip
                    break
    yield from _check_spawns(agents, tool_calls, spawns, assignees or {})
    yield from _check_offloads(tool_calls, events)


def runner_of(
    subject: str,
    tool_calls: Mapping[str, ToolCallRecord],
    spawns: Spawns,
    assignees: Mapping[str, str | None],
    at: int | None = None,
) -> str | None:
    """The agent that runs ``subject``: a task's assignee, a delegate, a child's agent.

    A child's is the one spawned in the session of the record at chain position ``at``.
    """
    kind, _, ref = subject.partition(":")
    if kind == PromptKind.TASK:
        return assignees.get(ref)
    if kind == PromptKind.DELEGATION and (call := tool_calls.get(ref)) is not None:
        target = call.arguments.get("agent")
        return target if isinstance(target, str) else None
    if kind == PromptKind.CHILD and (spawn := spawns.at(ref, at)) is not None:
        return str(spawn.get("agent"))
    return None


def _store_operations(record: ToolCallRecord) -> list[tuple[Literal["read", "write"], str]]:
    """The store reads (each entry read) and the write (if it succeeded) of a tool call."""
    ops: list[tuple[Literal["read", "write"], str]] = [
        ("read", str(r.get("namespace"))) for r in record.store_reads
    ]
    namespace = record.arguments.get("namespace")
    if record.name in _WRITES and not record.is_error and isinstance(namespace, str):
        ops.append(("write", namespace))
    return ops


def _check_own_grants(
    where: str, record: ToolCallRecord, agents: Mapping[str, Agent]
) -> Iterator[Problem]:
    """Each store read and write of a tool call is one its own agent's grants allow."""
    agent = agents.get(record.agent)
    grants = StoreGrants.parse(agent.store_grants) if agent else StoreGrants()
    for operation, ns in _store_operations(record):
        if not grants.allows(ns, operation):
            yield (
                where, None,
                f"{record.agent!r} could {operation} {ns!r}, which its own grants do not "
                "allow",
            )  # fmt: skip
            return


def check_offered_tools(
    agents: Mapping[str, Agent],
    calls: list[CallRecord],
    tool_calls: Mapping[str, ToolCallRecord],
    spawns: Spawns,
) -> Iterator[Problem]:
    """Check that no delegate or child was offered a tool an agent it acts for may not call.

    For runs recorded with ``tool_ceilings``: the tools each model call was offered (its
    recorded ``parameters``) that are user or MCP tools of the agent its subject runs must
    each be a tool of every agent it acts for (`callers_of`). One finding per subject and
    tool.
    """
    seen: set[tuple[str, str]] = set()
    for call in calls:
        offered = call.parameters.get("tools") if isinstance(call.parameters, dict) else None
        if not isinstance(offered, list):
            continue
        at = spawns.position("call", call.call_id)
        callers = callers_of(call.subject, tool_calls, spawns, at)
        if not callers:
            continue
        agent = runner_of(call.subject, tool_calls, spawns, {}, at) or call.agent
        for entry in offered:
            name = entry.get("name") if isinstance(entry, dict) else None
            if not isinstance(name, str) or (call.subject, name) in seen:
                continue
            if (lender := _lender(agent, name, callers, agents)) is not None:
                seen.add((call.subject, name))
                yield (
                    call.subject, call.call_id,
                    f"{agent!r} was offered {name!r} acting for {lender!r}, which may not "
                    "call it (a capability lent)",
                )  # fmt: skip


def _lender(agent: str, name: str, callers: list[str], agents: Mapping[str, Agent]) -> str | None:
    """The first caller that may not call ``agent``'s tool ``name``, or ``None``.

    Only a user or MCP tool of the acting agent's own can have run (or been offered). For a
    call, the caller checks that it ran: a user or MCP tool is recorded as started
    (``tool_started``) before it runs, so a failed call never started (refused as withheld,
    or as a repeat of a refused call) ran nothing.
    """
    own = agents.get(agent)
    if own is None or name not in ceiling_tools(own):
        return None
    for caller in callers:
        above = agents.get(caller)
        if above is None or name not in ceiling_tools(above):
            return caller
    return None


def _check_spawns(
    agents: Mapping[str, Agent],
    tool_calls: Mapping[str, ToolCallRecord],
    spawns: Spawns,
    assignees: Mapping[str, str | None],
) -> Iterator[Problem]:
    for spawn in spawns.every():  # every session's: a resumed one spawns again under its id
        child_id = spawn.get("child_id")
        where = f"task:{spawn.get('task_id')}"
        spawner, child = str(spawn.get("parent_agent")), str(spawn.get("agent"))
        agent = agents.get(spawner)
        # A run recorded without its agents (made with the ledger's own API) has no
        # can_spawn to check against.
        if agents and (agent is None or child not in agent.can_spawn):
            yield (
                where, None,
                f"child {child_id!r} of agent {child!r} was spawned by {spawner!r}, whose "
                "can_spawn does not name it (a capability lent)",
            )  # fmt: skip
        subject = spawn.get("parent_subject")
        if subject is None or subject == where:
            # Asked for by the task's assignee: any other agent named is one it acted for.
            assignee = assignees.get(str(spawn.get("task_id")))
            if assignee is not None and spawner != assignee:
                yield (
                    where, None,
                    f"child {child_id!r} was recorded as spawned by {spawner!r} under {where!r}, "
                    f"whose assignee is {assignee!r} (a capability lent)",
                )  # fmt: skip
            continue
        kind, _, ref = str(subject).partition(":")
        call = tool_calls.get(ref) if kind == PromptKind.DELEGATION else None
        if (
            call is None
            or call.arguments.get("agent") != spawner
            or callers_of(str(subject), tool_calls, spawns, spawns.position_of(spawn)) is None
            or _task_of(call.subject, tool_calls) != where
        ):
            yield (
                where, None,
                f"child {child_id!r} was recorded as spawned under {subject!r}, which is not "
                f"a delegation to {spawner!r} within {where}",
            )  # fmt: skip


def _task_of(subject: str, tool_calls: Mapping[str, ToolCallRecord]) -> str | None:
    """The ``task:<id>`` a delegation's subject comes from, following delegations."""
    for _ in range(64):
        kind, _, ref = subject.partition(":")
        if kind != PromptKind.DELEGATION:
            return subject if kind == PromptKind.TASK else None
        call = tool_calls.get(ref)
        if call is None:
            return None
        subject = call.subject
    return None


def _check_offloads(
    tool_calls: Mapping[str, ToolCallRecord], events: list[EventRecord]
) -> Iterator[Problem]:
    for event in events:
        if event.kind != EventKind.OFFLOADED:
            continue
        call_id = str(event.data.get("tool_call_id"))
        reference = str(event.data.get("reference"))
        record = tool_calls.get(call_id)
        where = f"offloaded {reference}"
        if record is None or record.subject != event.subject:
            yield (where, None, f"no tool call {call_id!r} of {event.subject} was recorded")
        elif not any(f"full text in {reference}{end}" in record.result
                     for end in ("]", "; read it with ")):  # fmt: skip
            yield (where, None, "the tool's recorded result is not the offloaded preview")
