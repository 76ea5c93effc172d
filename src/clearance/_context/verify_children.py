"""Verifying how many children each task had: ``max_children``, session by session.

A run's `ChildRunner` numbers each task's children in a session: its ``n``-th child is
``<task>.<n>`` (`child_id`), n counting from 1. Tasks whose ids give one prefix (``x:y`` and
``x_y``) would share its numbers, so a new run refuses them (`child_id_problem`), and a task
that may have children and whose id leaves no room for their ids (`max_spawning_id_chars`);
a run recorded before is verified as it ran. A resumed run is a new session that counts
from 1 again, so a task that runs again spawns its children again under the same ids (and
replays their recorded calls), whichever other tasks run again. A run recorded before
``prompt_format`` 3 (`PER_TASK_FORMAT`) numbered the children of all its tasks together
(``a.1``, ``b.2``), and so does a resume of it. In one session a task has at most the
smaller of its spawner's and its assignee's ``max_children`` (the spawner is the agent a
``spawn`` event names as ``parent_agent``: the assignee, or a delegate of it); from
``prompt_format`` 5 (`CHAIN_CAP_FORMAT`), the fewest of those and of every agent a spawning
delegate acted for (its delegators, up to the assignee), as the run held it.

From the recorded ``spawn`` events, in the order recorded, `check_child_limits` finds:

- a child id that is not one its task gives (``<task>.<n>``);
- a child numbered neither one more than its task's previous child (the run's previous
  child, before format 3) nor 1 (a new session);
- a task with more children in one session than its limit (from the run's recorded config,
  never from the events);
- a task prompt whose recorded clearance shows more children than its assignee's
  ``max_children`` (all the children one prompt shows are one session's).

`check_child_events` finds a ``child`` outcome that no earlier ``spawn`` of that child (by
its agent, under the same task) stands behind: what a prompt shows of a failed child comes
from that event alone. And `check_spawn_outputs` finds a ``spawn`` tool call whose output
(``child <id> (<agent>) ended: <status>``, then the child's result for a delegate, whose
prompt has no section of children's results) is not how a recorded outcome of that child
ended.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from clearance._core.agent_spec import LIMIT_RANGES, AgentLimits
from clearance._core.event_schema import ChildEvent, SpawnEvent, parse_event
from clearance._core.origins import Subject
from clearance._core.spec import Agent, Task, Team
from clearance._core.vocabulary import EventKind, PromptKind
from clearance._state.graph import TaskGraph

if TYPE_CHECKING:  # `clearance graph` checks a team file's children without a database
    from clearance._state.ledger import CallRecord, EventRecord, ToolCallRecord

__all__ = [
    "CHAIN_CAP_FORMAT",
    "MAX_CHILD_ID_CHARS",
    "PER_TASK_FORMAT",
    "Spawns",
    "check_child_events",
    "check_child_limits",
    "check_spawn_outputs",
    "child_id",
    "child_id_problem",
    "child_prefix",
    "max_children_of",
    "max_spawning_id_chars",
]

Problem = tuple[str, str | None, str]
"""``(subject, call id or None, reason)`` of one finding."""

_SLUG = re.compile(r"[^A-Za-z0-9_.-]+")
_ENDED = re.compile(
    r"child (?P<id>\S+) \((?P<agent>[^)]*)\) ended: (?P<status>\w+)(?P<rest>.*)", re.DOTALL
)
_INLINE = "; its result:\n"
_ELSEWHERE = "; its result is under 'Results from subagents'"
_DEFAULT = AgentLimits().max_children

PER_TASK_FORMAT = 3
"""The first ``prompt_format`` whose runs number each task's children on their own."""

LABELLED_FORMAT = 4
"""The first ``prompt_format`` whose runs label a child's result with its agent and goal."""

CHAIN_CAP_FORMAT = 5
"""The first ``prompt_format`` whose runs hold a delegate's spawns to the fewest
``max_children`` of every agent it acts for (`Authority.max_children`), not only to its own
and its task's assignee's."""

ActedFor = Callable[["EventRecord"], "list[str] | None"]
"""The agents a ``spawn`` event's spawner acted for, nearest first (``[]`` for the task's
assignee; ``None`` when the records do not say)."""


def child_prefix(task_id: str) -> str:
    """What the ids of ``task_id``'s children start with (before ``.<n>``)."""
    return _SLUG.sub("_", task_id)


def child_id(task_id: str, number: int) -> str:
    """The id of the ``number``-th child (from 1) numbered in a session, spawned for ``task_id``."""
    return f"{child_prefix(task_id)}.{number}"


MAX_CHILD_ID_CHARS = 128
"""Most characters of a child's id: it is also its agent id and its workspace folder's name."""

_RESUMED_FOLDER_CHARS = len(".999")
"""What a folder's name may add to a child's id: when a folder of that name exists (a resumed
session spawns the child again) it gets a fresh one, ``<id>.<k>``, k up to 999
(`AgentRuntime.fresh`)."""


def max_spawning_id_chars(max_children: int) -> int:
    """Most characters of the id of a task that may have up to ``max_children`` children.

    Its last child's id (``<id>.<max_children>``) and that child's folder in a resumed session
    (``.<k>`` more) must fit in `MAX_CHILD_ID_CHARS`: 122 for the default 8 children.
    """
    return MAX_CHILD_ID_CHARS - len(f".{max_children}") - _RESUMED_FOLDER_CHARS


def child_id_problem(tasks: Iterable[Task], team: Team) -> tuple[str, str] | None:
    """Why ``tasks`` cannot give each its own children's ids: ``(field, reason)``, or ``None``.

    Two tasks whose ids give one `child_prefix` (``a:b`` and ``a_b``) would number their
    children together; a task that may have children (a ``fan_out``, or an assignee that may
    spawn or delegate, however deep, to an agent that may) needs an id short enough for
    them (`max_spawning_id_chars` of its assignee's ``max_children``, which bounds the
    children of every spawner of the task). A step task (``run:``) has no children.
    """
    agents = {agent.name: agent for agent in team.agents}
    owners: dict[str, str] = {}
    for task in tasks:
        prefix = child_prefix(task.id)
        other = owners.setdefault(prefix, task.id)
        if other != task.id:
            return f"tasks.{task.id}", (
                f"tasks {other!r} and {task.id!r} would number their children alike "
                f"({prefix + '.1'!r}, {prefix + '.2'!r}, ...): ':' is '_' in a child's id, "
                "so rename one"
            )
        assignee = agents.get(task.assignee) if task.run is None else None
        if assignee is None or not (task.fan_out or _may_spawn(assignee.name, agents)):
            continue
        most = assignee.limits.max_children
        if len(prefix) > (room := max_spawning_id_chars(most)):
            return f"tasks.{task.id}", (
                f"task {task.id!r} may have children, and its id has {len(task.id)} "
                f"characters: at most {room} leave room for its children's ids (up to "
                f"{child_id(task.id, most)!r}, its assignee's max_children) and their "
                "workspace folders"
            )
    return None


def _may_spawn(name: str, agents: Mapping[str, Agent]) -> bool:
    """Whether agent ``name``, or an agent it may delegate to (however deep), may spawn."""
    seen, todo = {name}, [name]
    while todo:  # each agent once: at most len(agents) rounds
        agent = agents.get(todo.pop())
        if agent is None:
            continue
        if agent.can_spawn:
            return True
        for delegate in agent.can_delegate_to:
            if delegate not in seen:
                seen.add(delegate)
                todo.append(delegate)
    return False


class Spawns:
    """Every recorded ``spawn`` of each child id, in record order, for the records of each session.

    A resumed session spawns its children again under the ids they had (``p.1`` in each), maybe
    by another spawner (a delegate of the task instead of its assignee) and for another goal.
    A record of a child (a model call, a tool call) belongs to the spawn of its session: the
    last spawn of its id committed before it or with it, in the hash chain's order
    (``positions``: the entry that first chains each record, by ``(kind, id)``; a session's
    records are all committed before the next session's first, and one transaction lists
    its records by kind, so a spawn and its child's first call may share an entry).

    Args:
        positions: The chain entry of each record, by ``(kind, id)`` (``{}``: unknown; then
            each id's last spawn stands for all its sessions).
    """

    def __init__(self, positions: Mapping[tuple[str, str], int] | None = None) -> None:
        self._positions = positions or {}
        self._of: dict[str, list[tuple[int | None, dict[str, Any]]]] = {}

    def add(self, event_id: str, data: dict[str, Any]) -> None:
        """Add one ``spawn`` event's data (with its ``task_id``), in record order."""
        where = self._positions.get(("event", event_id))
        self._of.setdefault(str(data.get("child_id")), []).append((where, data))

    def position(self, kind: str, record_id: str) -> int | None:
        """The chain entry of the record ``(kind, id)``, or ``None`` when unknown."""
        return self._positions.get((kind, record_id))

    def at(self, child_id: str, position: int | None = None) -> dict[str, Any] | None:
        """The spawn of ``child_id`` a record at chain entry ``position`` belongs to, or ``None``.

        That is the last spawn of the id committed before it or with it; the first when none
        is (a ledger rechained out of order), the last without a position.
        """
        history = self._of.get(child_id)
        if not history:
            return None
        if position is None:
            return history[-1][1]
        chosen = history[0][1]
        for where, data in history:
            if where is not None and where <= position:
                chosen = data
        return chosen

    def position_of(self, spawn: Mapping[str, Any]) -> int | None:
        """The chain entry of a spawn `at` returned."""
        for where, data in self._of.get(str(spawn.get("child_id")), ()):
            if data is spawn:
                return where
        return None

    def every(self) -> Iterator[dict[str, Any]]:
        """Every recorded spawn, each session's, in record order per child id."""
        for history in self._of.values():
            for _, data in history:
                yield data

    def of(self, child_id: str) -> list[dict[str, Any]]:
        """Every recorded spawn of ``child_id``, in record order."""
        return [data for _, data in self._of.get(child_id, ())]


def max_children_of(config: Mapping[str, Any]) -> tuple[dict[str, int], list[str]]:
    """Each recorded agent's ``max_children``, from a run's recorded config.

    Returns:
        ``(limits, problems)``: the limit of each agent whose record holds a valid one (or
        none: the default), and one line for each agent whose recorded limit is not one.
    """
    limits: dict[str, int] = {}
    problems: list[str] = []
    least, most = LIMIT_RANGES["max_children"]
    for spec in config.get("agents") or ():
        if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
            continue
        recorded = spec.get("limits") or {}
        value = recorded.get("max_children", _DEFAULT) if isinstance(recorded, Mapping) else None
        if isinstance(value, int) and not isinstance(value, bool) and least <= value <= most:
            limits[spec["name"]] = value
        else:
            problems.append(
                f"agent {spec['name']!r}'s recorded max_children is not a limit "
                f"(an integer from {least} to {most})"
            )
    return limits, problems


def check_child_limits(
    config: Mapping[str, Any],
    graph: TaskGraph | None,
    events: Sequence[EventRecord],
    calls: Sequence[CallRecord],
    acted_for: ActedFor | None = None,
) -> Iterator[Problem]:
    """Check the run's children against their tasks' ``max_children`` (see the module).

    ``acted_for`` gives whom each spawn's spawner acted for (`spawn_callers`); for runs of
    `CHAIN_CAP_FORMAT` on, their limits bound the task's children too. ``None``: not known.
    """
    limits, problems = max_children_of(config)
    yield from (("run", None, problem) for problem in problems)
    if graph is None:
        return

    def limit(agent: str | None) -> int | None:
        return limits.get(agent) if agent is not None else None

    chained = acted_for if _recorded_format(config) >= CHAIN_CAP_FORMAT else None
    per_task = _recorded_format(config) >= PER_TASK_FORMAT
    # By what numbers children (a task's prefix; "" for the whole run, before format 3):
    # its previous child's number, and its tasks' children counted in the current session
    # (and those already reported over their limit in it).
    previous: dict[str, int] = {}
    counts: dict[str, dict[str, int]] = {}
    over: dict[str, set[str]] = {}
    for event in events:
        if event.kind != EventKind.SPAWN:
            continue
        data = parse_event(event.kind, event.data)  # verify leaves malformed events out
        if not isinstance(data, SpawnEvent):
            continue
        task_id = event.subject.removeprefix("task:")
        if task_id == event.subject or task_id not in graph:
            yield event.subject, None, "a spawn recorded for no task of the run's graph"
            continue
        number = data.child_id.rpartition(".")[2]
        if (
            not number.isdecimal()
            or len(number) > 18
            or data.child_id != child_id(task_id, int(number))
        ):
            yield (
                event.subject, None,
                f"child {data.child_id!r} is not an id task {task_id!r} gives its children",
            )  # fmt: skip
            continue
        n, key = int(number), child_prefix(task_id) if per_task else ""
        last = previous.get(key, 0)
        if n == 1:  # a new session: its counts start again
            counts[key], over[key] = {}, set()
        elif n != last + 1:
            before = (
                f"(the previous child of its task was number {last})" if last
                else "(its task had no child before it)"
            ) if per_task else f"(the previous child was number {last})"  # fmt: skip
            yield (
                event.subject, None,
                f"child {data.child_id!r} is not numbered as one session spawns {before}",
            )  # fmt: skip
        previous[key] = n
        count = counts.setdefault(key, {})
        count[task_id] = count.get(task_id, 0) + 1
        bounds = [b for b in (limit(data.parent_agent), limit(graph.get(task_id).assignee))
                  if b is not None]  # fmt: skip
        bound, lender = _chain_bound(min(bounds, default=None), chained, event, limit)
        reported = over.setdefault(key, set())
        if bound is not None and count[task_id] > bound and task_id not in reported:
            reported.add(task_id)
            whose = (
                f" (that of {lender!r}, which {data.parent_agent!r} acted for)" if lender else ""
            )
            yield (
                event.subject, None,
                f"task:{task_id}: {count[task_id]} children in one session, but its "
                f"max_children is {bound}{whose}",
            )  # fmt: skip
    yield from _shown(limits, graph, calls)


def _chain_bound(
    bound: int | None,
    acted_for: ActedFor | None,
    event: EventRecord,
    limit: Callable[[str | None], int | None],
) -> tuple[int | None, str | None]:
    """``bound`` lowered to the fewest ``max_children`` of the agents the spawner acted for.

    Returns:
        The bound, and the agent acted for whose limit it is (``None`` when it is the
        spawner's or the assignee's, or nobody's).
    """
    lender: str | None = None
    for caller in (acted_for(event) or ()) if acted_for is not None else ():
        cap = limit(caller)
        if cap is not None and (bound is None or cap < bound):
            bound, lender = cap, caller
    return bound, lender


def _recorded_format(config: Mapping[str, Any]) -> int:
    """The run's recorded ``prompt_format`` (0 when it records none, or none that is one)."""
    fmt = config.get("prompt_format", 0)
    return fmt if isinstance(fmt, int) and not isinstance(fmt, bool) and fmt >= 0 else 0


def _shown(
    limits: Mapping[str, int], graph: TaskGraph, calls: Sequence[CallRecord]
) -> Iterator[Problem]:
    """A task prompt shows no more children than its assignee's ``max_children``."""
    for call in calls:
        subject = Subject.parse(call.subject)
        if subject.kind not in (PromptKind.TASK, PromptKind.ISOLATED) or subject.ref is None:
            continue
        if subject.ref not in graph:
            continue
        recorded = call.manifest.get("clearance")
        named = recorded.get("children") if isinstance(recorded, dict) else None
        if not isinstance(named, list):
            continue
        assignee = graph.get(subject.ref).assignee
        bound = limits.get(assignee) if assignee is not None else None
        shown = len(set(map(str, named)))
        if bound is not None and shown > bound:
            yield (
                call.subject, call.call_id,
                f"the prompt shows {shown} children, but the task's max_children is {bound}",
            )  # fmt: skip


def check_spawn_outputs(
    tool_calls: Mapping[str, ToolCallRecord], outcomes: Mapping[str, Sequence[ChildEvent]]
) -> Iterator[Problem]:
    """Each ``spawn`` call's output is how a recorded outcome of its child ended.

    Args:
        tool_calls: The run's tool calls by id.
        outcomes: Every recorded ``child`` outcome, by child id.

    Yields:
        ``(subject, None, reason)`` for each ``spawn`` output naming a child that has no
        such outcome (its agent, status, and for a delegate the result it was shown). An
        output that is a refusal (``error: ...``) names no child and is not checked.
    """
    for record in tool_calls.values():
        if record.name != "spawn" or record.result.startswith("error:"):
            continue
        ended = _ENDED.fullmatch(record.result)
        rest = ended.group("rest") if ended is not None else ""
        fits = ended is not None and any(
            o.agent == ended.group("agent")
            and o.status == ended.group("status")
            and record.is_error == (o.status != "ok")
            and (rest == _ELSEWHERE or rest == _INLINE + o.shown)
            for o in outcomes.get(ended.group("id"), ())
        )
        if not fits:
            yield (
                record.subject, None,
                f"the output of spawn call {record.tool_call_id!r} is not how its child ended "
                "as recorded (its child event)",
            )  # fmt: skip


def check_child_events(events: Sequence[EventRecord]) -> Iterator[Problem]:
    """Every ``child`` outcome follows a ``spawn`` of that child, as its agent, for its task.

    Yields:
        ``(subject, None, reason)`` for each outcome of a child its task never spawned (or
        spawned as another agent) before it.
    """
    spawned: dict[tuple[str, str], set[str]] = {}
    for event in events:
        if event.kind not in (EventKind.SPAWN, EventKind.CHILD):
            continue
        data = parse_event(event.kind, event.data)  # verify leaves malformed events out
        if isinstance(data, SpawnEvent):
            spawned.setdefault((event.subject, data.child_id), set()).add(data.agent)
        elif isinstance(data, ChildEvent) and data.agent not in spawned.get(
            (event.subject, data.child_id), set()
        ):
            yield (
                event.subject, None,
                f"an outcome of child {data.child_id!r}, which {event.subject} never spawned "
                f"as {data.agent!r}",
            )  # fmt: skip
