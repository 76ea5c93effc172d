"""Verifying the prompts of isolated tasks, clarifications and spawned children.

Each clearance is derived from what the ledger recorded about the run — its graph, its
``clarification``, ``files``, ``architecture``, ``spawn`` and ``child`` events — never from
what the prompt declares about itself. Then each item's provenance is checked:

- ``arch`` is the run's recorded architectural context, headed ``Project <name>`` with the
  project recorded with that text;
- ``task:<id>`` is the task's description, ``constraint:<n>`` its n-th constraint in the graph
  (the team file);
- ``file:<path>`` has the digest recorded when the file was loaded or served;
- ``clarification:<n>`` is the n-th recorded answer to the task's questions in one run of
  the task (each run starts with its ``files`` event: a resumed or retried task asks again,
  and a person may answer differently), the prompt's answers all of that one run, and a
  prompt shows no more answers than the run's ``isolation.max_rounds`` (a subagent asks at
  most that many times);
- ``question:<id>`` is a recorded question of the task;
- ``child_result:<id>`` is what the task's own child ``<id>`` was recorded to end with (in
  one of the run's sessions: a resumed run runs a failed child again under its id), and that
  record holds: what it shows is `child_shown` of its outcome, and a result is the answer of
  a successful call of the child;
- ``child_goal:<id>`` is the goal recorded when child ``<id>`` was spawned in the prompt's
  session (a resumed session spawns it again under its id, maybe for another goal).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from clearance._context.answers import mark_answer
from clearance._context.clearance import Clearance
from clearance._context.isolated import project_heading
from clearance._context.labels import child_result_label, legacy_child_label
from clearance._context.layout import item_kinds
from clearance._context.memory_items import scope_of_title
from clearance._context.render import one_line
from clearance._context.verify_children import LABELLED_FORMAT, Spawns
from clearance._context.verify_memory import not_recalled
from clearance._core.errors import ConfigError
from clearance._core.event_schema import (
    ArchitectureEvent,
    ChildEvent,
    FileClarificationEvent,
    FilesEvent,
    IsolatedContextEvent,
    QuestionClarificationEvent,
    SpawnEvent,
    parse_event,
)
from clearance._core.origins import Origin, Subject
from clearance._core.prompt import sha256_text
from clearance._core.spec import Agent
from clearance._core.vocabulary import OriginKind, PromptKind
from clearance._state.graph import TaskGraph
from clearance._state.ledger import CallRecord, EventRecord

__all__ = [
    "SubagentFacts",
    "child_shown",
    "check_child_call",
    "check_child_result",
    "check_clarification_call",
    "check_isolated_call",
]

_DISPATCH_KINDS = item_kinds(PromptKind.ISOLATED) - {OriginKind.TASK_RESULT}
"""A controller's dispatch (no graph): an isolated prompt without prerequisite results."""

Problem = tuple[str | None, str]
"""``(origin or None, reason)``: one finding about a call."""

ItemCheck = Callable[[str, dict[str, Any]], Iterator[Problem]]
"""Checks one item (origin, manifest entry) against the run's records."""


def child_shown(status: str, result: str | None, error: str | None) -> str:
    """What a parent's prompt shows of a child: its result, or why it has none.

    A child that failed or timed out is never passed off as done.
    """
    if status == "ok":
        return result or ""
    return f"[no result: the child {status.replace('_', ' ')}: {error}]"


class SubagentFacts:
    """The run's recorded events, indexed for the checks.

    Args:
        events: Every event of the run, in the order recorded.
        positions: Each record's place in the run's hash chain, by ``(kind, id)``: which
            session's spawn a child's record belongs to (`Spawns`).
    """

    def __init__(
        self,
        events: Sequence[EventRecord],
        positions: Mapping[tuple[str, str], int] | None = None,
    ) -> None:
        self.architecture: dict[str, set[str]] = {}  # digest: the projects recorded with it
        # Each run of a task (from its ``files`` event) → the answers it was given, in order.
        self.answers: dict[str, list[list[str]]] = {}
        self.questions: dict[str, set[str]] = {}
        self.file_digests: dict[str, dict[str, set[str]]] = {}
        self.served: dict[str, set[str]] = {}
        self.spawns = Spawns(positions)  # every session's, by child id
        self.children: dict[str, dict[str, Any]] = {}
        # Every outcome shown for a child id: a resumed session runs a failed child again
        # under its id (its records are what it replays from).
        self.shown: dict[str, set[str]] = {}
        self.outcomes: dict[str, list[ChildEvent]] = {}  # every recorded outcome, by child
        self.dispatches: dict[str, list[dict[str, Any]]] = {}
        for event in events:
            try:
                data = parse_event(event.kind, event.data)
            except ConfigError:
                continue  # verify reports it as a malformed event
            task_id = event.subject.removeprefix("task:")
            if isinstance(data, ArchitectureEvent):
                self.architecture.setdefault(data.sha256, set()).add(data.project)
            elif isinstance(data, FilesEvent):
                self.answers.setdefault(task_id, []).append([])
                for path, digest in data.files.items():
                    self.file_digests.setdefault(task_id, {}).setdefault(path, set()).add(digest)
            elif isinstance(data, FileClarificationEvent | QuestionClarificationEvent):
                self._clarification(task_id, data)
            elif isinstance(data, SpawnEvent):
                self.spawns.add(event.event_id, {**data.model_dump(), "task_id": task_id})
            elif isinstance(data, ChildEvent):
                self.children[data.child_id] = {**data.model_dump(), "task_id": task_id}
                self.shown.setdefault(data.child_id, set()).add(data.shown_sha256)
                self.outcomes.setdefault(data.child_id, []).append(data)
            elif isinstance(data, IsolatedContextEvent):
                self.dispatches.setdefault(event.subject, []).append(data.model_dump())

    def _clarification(
        self, task_id: str, data: FileClarificationEvent | QuestionClarificationEvent
    ) -> None:
        if isinstance(data, QuestionClarificationEvent):
            self.questions.setdefault(task_id, set()).add(sha256_text(data.question))
        elif data.served:
            self.served.setdefault(task_id, set()).add(data.path)
            digests = self.file_digests.setdefault(task_id, {}).setdefault(data.path, set())
            digests.add(str(data.sha256))
        if data.answer is not None:
            self.answers.setdefault(task_id, [[]])[-1].append(data.answer)

    def children_shown(self, task_id: str, recorded: Any) -> list[str] | None:
        """The children a task prompt's recorded clearance names, if all are the task's own.

        Returns:
            Their ids (``[]`` when it names none), or ``None`` when one is not a recorded
            child of ``task_id``.
        """
        named = recorded.get("children", []) if isinstance(recorded, dict) else []
        if not isinstance(named, list):
            return None
        mine = {c for c, d in self.children.items() if d.get("task_id") == task_id}
        return [str(c) for c in named] if set(map(str, named)) <= mine else None


class _Facts(Protocol):
    graph: TaskGraph | None
    prompt_format: int
    clarification_rounds: int | None
    calls: list[CallRecord]
    agents: dict[str, Agent]
    memory_groups: dict[str, list[str]]
    recalled: dict[str, frozenset[str]]
    coordinator: str | None
    subagents: SubagentFacts

    def calls_of(self, subject: str) -> list[CallRecord]: ...


def check_child_result(
    task_id: str, child_id: str, item: Mapping[str, Any], facts: _Facts
) -> Iterator[Problem]:
    """A ``child_result:<id>`` item is what the task's own child was recorded to end with.

    Its label names the child's agent and goal as a spawn of it for the task recorded them
    (`child_result_label`; its id alone in runs recorded before `LABELLED_FORMAT`).
    """
    origin = f"child_result:{child_id}"
    record = facts.subagents.children.get(child_id)
    if record is None or record.get("task_id") != task_id:
        yield origin, f"{child_id!r} is not a recorded child of task {task_id!r}"
        return
    if facts.prompt_format >= LABELLED_FORMAT:
        labels = {
            child_result_label(child_id, str(s.get("agent")), str(s.get("goal")))
            for s in facts.subagents.spawns.of(child_id)
            if s.get("task_id") == task_id
        }
    else:
        labels = {legacy_child_label(child_id)}
    title = item.get("title")
    if not isinstance(title, str) or one_line(title) not in labels:
        yield origin, f"the block is titled {title!r}, not the label its recorded spawn gives"
    elif item.get("sha256") not in facts.subagents.shown.get(child_id, ()):
        yield origin, f"the content is not the recorded result of child {child_id!r}"
    else:
        subject = f"child:{child_id}"
        # Kept verbatim or marked; stripped in ledgers written before answers were verbatim.
        answers = {
            text
            for c in facts.calls_of(subject)
            if c.error is None and c.response is not None
            for marked in (mark_answer(c.response, finish_reason=c.finish_reason).text,)
            for text in (c.response, c.response.strip(), marked, marked.strip())
        }
        if not any(
            o.shown_sha256 == item.get("sha256") == sha256_text(o.shown)
            and o.shown == child_shown(o.status, o.result, o.error)
            and (o.status != "ok" or o.result in answers)
            for o in facts.subagents.outcomes.get(child_id, ())
        ):
            yield (
                origin,
                (
                    f"the recorded outcome of child {child_id!r} is not what its own calls "
                    "answered, or not what it shows"
                ),
            )


def check_isolated_call(
    call: CallRecord, items: list[dict[str, Any]], facts: _Facts, provenance: ItemCheck
) -> Iterator[Problem]:
    """An isolated task's prompt, against the clearance its recorded graph and events give."""
    task_id = Subject.parse(call.subject).id
    graph = facts.graph
    if graph is None or task_id not in graph:
        yield from _check_dispatch(call, items, facts)
        return
    task = graph.get(task_id)
    if task.mode != "isolated":
        yield None, f"task {task_id!r} of the run's recorded graph is not isolated"
        return
    if call.agent != task.assignee:
        yield None, f"the prompt was built for {call.agent!r}, not the assignee {task.assignee!r}"
    recorded = call.manifest.get("clearance") or {}
    events = facts.subagents
    children = events.children_shown(task_id, recorded)
    shown = recorded.get("clarifications")
    files = set(map(str, recorded.get("files") or ()))
    allowed_files = set(task.files) | events.served.get(task_id, set())
    # The runs of the task that were given at least as many answers as the prompt shows.
    runs = [
        a for a in events.answers.get(task_id, ()) if isinstance(shown, int) and shown <= len(a)
    ]
    if (
        children is None
        or not isinstance(shown, int)
        or shown < 0
        or (shown > 0 and not runs)
        or not files <= allowed_files
    ):
        yield None, "the recorded clearance is not one the graph and the recorded rounds give"
        return
    cap = facts.clarification_rounds
    if cap is None:
        yield None, "the run's recorded isolation.max_rounds is not a number of rounds (0 to 10)"
    elif shown > cap:
        yield None, f"the prompt shows {shown} clarifications, but isolation.max_rounds is {cap}"
    clearance = replace(
        Clearance.for_task(graph, task_id, agent=facts.agents.get(task.assignee),
                           memory_groups=facts.memory_groups),
        files=frozenset(files), clarifications=shown, children=frozenset(children),
    )  # fmt: skip
    if recorded != clearance.to_dict():
        yield None, "the recorded clearance differs from the one the graph gives"
    for item in items[1:]:
        origin = str(item.get("origin"))
        parsed = Origin.parse(origin)
        kind, ref = parsed.kind, parsed.id
        digest = item.get("sha256")
        scope = scope_of_title(str(item.get("title"))) if kind == OriginKind.MEMORY else None
        if not clearance.admits(origin, memory_scope=scope):
            yield origin, f"not in the clearance of isolated task {task_id!r}"
        elif kind == OriginKind.ARCH and digest not in events.architecture:
            yield origin, "not the run's recorded architectural context"
        elif kind == OriginKind.ARCH and one_line(str(item.get("title"))) not in {
            one_line(project_heading(p)) for p in events.architecture[str(digest)]
        }:
            headings = sorted(project_heading(p) for p in events.architecture[str(digest)])
            yield origin, f"the heading is not the recorded project's heading {headings[0]!r}"
        elif kind == OriginKind.TASK and digest != sha256_text(task.description):
            yield origin, "the task text is not the recorded task's description"
        elif kind == OriginKind.CONSTRAINT and digest != sha256_text(
            task.constraints[int(ref) - 1]
        ):
            yield origin, f"not constraint {ref} of the task in the team file"
        elif kind == OriginKind.CLARIFICATION and all(
            digest != sha256_text(a[int(ref) - 1]) for a in runs
        ):
            yield origin, f"not the recorded answer {ref} to the task's questions"
        elif kind == OriginKind.FILE and digest not in events.file_digests.get(task_id, {}).get(
            ref, ()
        ):
            yield origin, "not the content recorded when the file was loaded"
        elif kind == OriginKind.CHILD_RESULT:
            yield from check_child_result(task_id, ref, item, facts)
        elif kind in (OriginKind.TASK_RESULT, OriginKind.MEMORY):
            if kind == OriginKind.MEMORY:
                yield from not_recalled(f"task:{task_id}", ref, facts.recalled)
            yield from provenance(origin, item)
    yield from _one_run(items, runs)


def _one_run(items: list[dict[str, Any]], runs: list[list[str]]) -> Iterator[Problem]:
    """The prompt's clarifications are the answers of one run of the task, not a mix."""
    shown = {
        int(parsed.id): item.get("sha256")
        for item in items
        if (parsed := Origin.parse(str(item.get("origin")))).kind == OriginKind.CLARIFICATION
    }
    if shown and not any(
        all(0 < n <= len(a) and sha256_text(a[n - 1]) == d for n, d in shown.items()) for a in runs
    ):
        yield None, "the clarifications shown are not the answers of one run of the task"


def _check_dispatch(
    call: CallRecord, items: list[dict[str, Any]], facts: _Facts
) -> Iterator[Problem]:
    """A `ContextIsolationManager` dispatch outside a run's graph: the recorded context.

    The manager records, at each dispatch, the digest of every item of the context it was
    given; the prompt must be one of those, item for item, with the clearance
    `ContextBuilder.build_isolated_prompt` records.
    """
    task_id = Subject.parse(call.subject).id
    dispatches = facts.subagents.dispatches.get(call.subject, [])
    if not dispatches:
        yield None, f"{task_id!r} is neither a task of the run's graph nor a recorded dispatch"
        return
    mine = {str(i.get("origin")): i.get("sha256") for i in items}
    files = sorted(Origin.parse(o).id for o in mine if Origin.parse(o).kind == OriginKind.FILE)
    expected = {"task_id": task_id, "agent": call.agent, "result_task_ids": [],
                "files": files, "isolated": True}  # fmt: skip
    if call.manifest.get("clearance") != expected:
        yield None, "the recorded clearance is not the one its dispatch gives"
    for origin in mine:
        parsed = Origin.parse(origin)
        kind, ref = parsed.kind, parsed.id
        if kind == OriginKind.TASK and ref != task_id:
            yield origin, f"not the subagent's own task {task_id!r}"
        elif kind not in _DISPATCH_KINDS:
            yield origin, f"an isolated prompt may not hold {kind!r} items"
    if not any(d.get("agent") == call.agent and d.get("items") == mine for d in dispatches):
        yield None, "the prompt's items are not those of any recorded dispatch of the task"


def check_clarification_call(
    call: CallRecord, items: list[dict[str, Any]], facts: _Facts, provenance: ItemCheck
) -> Iterator[Problem]:
    """The coordinator's answer prompt: the task, its admitted results, a recorded question."""
    task_id = Subject.parse(call.subject).id
    graph = facts.graph
    if graph is None or task_id not in graph or graph.get(task_id).mode != "isolated":
        yield None, f"{task_id!r} is not an isolated task of the run's recorded graph"
        return
    if facts.coordinator is not None and call.agent != facts.coordinator:
        yield None, f"the prompt was built for {call.agent!r}, not the coordinator"
    clearance = Clearance.for_task(graph, task_id, memory_groups=facts.memory_groups)
    if call.manifest.get("clearance") != clearance.to_dict():
        yield None, "the recorded clearance differs from the one the graph gives"
    task = graph.get(task_id)
    questions = facts.subagents.questions.get(task_id, set())
    for item in items[1:]:
        origin = str(item.get("origin"))
        kind = Origin.parse(origin).kind
        digest = item.get("sha256")
        if kind not in (
            OriginKind.TASK,
            OriginKind.TASK_RESULT,
            OriginKind.QUESTION,
        ) or not clearance.admits(origin):
            yield origin, f"not in the clearance of a question about task {task_id!r}"
        elif kind == OriginKind.TASK and digest != sha256_text(task.description):
            yield origin, "the task text is not the recorded task's description"
        elif kind == OriginKind.QUESTION and digest not in questions:
            yield origin, "not a recorded question of the task's subagent"
        elif kind == OriginKind.TASK_RESULT:
            yield from provenance(origin, item)


def check_child_call(
    call: CallRecord, items: list[dict[str, Any]], facts: _Facts, tool_item: ItemCheck
) -> Iterator[Problem]:
    """A spawned child's prompt: its recorded goal and its own tools' results only."""
    child_id = Subject.parse(call.subject).id
    spawns = facts.subagents.spawns
    spawn = spawns.at(child_id, spawns.position("call", call.call_id))  # its session's
    if spawn is None:
        yield None, f"no spawn of child {child_id!r} was recorded in the run"
        return
    if call.agent != spawn.get("agent"):
        yield None, f"child {child_id!r} was spawned as {spawn.get('agent')!r}, not {call.agent!r}"
        return
    agent = facts.agents.get(call.agent)
    if agent is None:
        yield None, f"agent {call.agent!r} is not in the run's recorded config"
        return
    clearance = Clearance.for_child(child_id, agent)
    if call.manifest.get("clearance") != clearance.to_dict():
        yield None, "the recorded clearance differs from the one the spawn gives"
    for item in items[1:]:
        origin = str(item.get("origin"))
        kind = Origin.parse(origin).kind
        if not clearance.admits(origin):
            yield origin, f"not in the clearance of child {child_id!r}"
        elif kind == OriginKind.CHILD_GOAL and item.get("sha256") != sha256_text(
            str(spawn.get("goal"))
        ):
            yield origin, "the goal is not the one recorded when the child was spawned"
        elif kind in (OriginKind.TOOL, OriginKind.STORE):
            yield from tool_item(origin, item)
