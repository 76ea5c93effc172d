"""``verify``'s approval checks: nothing that required a person's approval ran without one.

What requires approval comes from the run's own records, never from model output: the tools
named in the run's config (``approval_tools``) and the tasks of its graph marked
``approval: required``. Requests (``awaiting_approval`` events) and decisions
(``approval_decided`` events) are ordered by the run's hash chain. The checks:

- every request is recorded once under its id, its recorded arguments match its recorded
  digest, and a tool call's request is about a call a recorded model answer asked for (the
  resumed run runs the answer's call, while ``approve`` shows the request's arguments:
  `request_problems`);
- every decision answers a recorded request, after it, about the same thing (task, agent,
  tool, arguments digest), and is the only decision on it;
- every recorded call of an approval tool has an approval of exactly that call (same task,
  agent, tool and arguments; a delegate's or child's call is one of the task it serves)
  recorded before it; a call that was denied holds the denial as
  its (error) result, not the tool's output;
- every model call of a task that requires approval (its own, its isolated dispatches',
  clarifications' and reviewers', its children's and its delegates'), and its completion,
  come after an approval of the task;
- no tool call is carried out twice without a person's decision to run it again
  (`_check_reruns`): each further ``tool_started`` of one call needs an approved ``rerun``
  decision on that call recorded between it and the start before, unless its tool was
  idempotent when it last started; a decision that names the start it reruns (``reruns``,
  recorded since rerun requests name one) counts for that start only, so one decision
  never covers a third run; and a second call run for one model answer (the answer its
  subject's loop was given last: the call's record, or its ``replayed`` event), same tool
  and arguments under another id, beyond the times that answer asked for it (a model may
  delegate one task twice in one answer), is one unless it runs under the id a
  ``replay_declined`` event of an earlier run records as its ``replacement`` (events
  recorded before that field was name the answer's first run: each is taken for one run
  recorded after it).
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from clearance._context.verify_chain import ChainedRecord
from clearance._core.errors import ConfigError
from clearance._core.event_schema import (
    ApprovalDecidedEvent,
    ApprovalRequestedEvent,
    EventData,
    ModelToolCallsEvent,
    ReplayDeclinedEvent,
    ReplayedEvent,
    SpawnEvent,
    ToolStartedEvent,
    parse_event,
)
from clearance._core.prompt import canonical_json, sha256_text
from clearance._core.vocabulary import ApprovalKind, EventKind, PromptKind, RecordKind
from clearance._state.ledger import CallRecord, EventRecord, RunRecord, ToolCallRecord

__all__ = [
    "arguments_sha256",
    "check_approvals",
    "denial_text",
    "request_problems",
]

_Approval = ApprovalRequestedEvent | ApprovalDecidedEvent

Problem = tuple[str, str | None, str]
"""``(subject, call id or None, reason)`` of one finding."""


def arguments_sha256(arguments: Mapping[str, Any]) -> str:
    """SHA-256 of a tool call's arguments in canonical JSON."""
    return sha256_text(canonical_json(dict(arguments)))


def denial_text(tool: str | None, by: str, reason: str) -> str:
    """The tool result a model gets for a call a person denied."""
    why = f": {reason}" if reason else ""
    return (
        f"error: a person ({by}) denied this call of {tool}{why}. "
        "Do not call it again with these arguments; answer without it or do something else."
    )


def _key(data: _Approval) -> tuple[Any, ...]:
    """What an approval is about: kind, task, agent, tool, arguments digest, rerun start."""
    return (data.kind, data.task_id, data.agent, data.tool, data.arguments_sha256, data.reruns)


def _parsed(event: EventRecord) -> EventData | None:
    """The event read through its schema, or ``None`` when malformed (verify's finding)."""
    try:
        return parse_event(event.kind, event.data)
    except ConfigError:
        return None


def _read(events: list[EventRecord]) -> Iterator[tuple[EventRecord, _Approval]]:
    """The approval events, read through their schema."""
    for event in events:
        if event.kind not in (EventKind.AWAITING_APPROVAL, EventKind.APPROVAL_DECIDED):
            continue
        data = _parsed(event)
        if isinstance(data, ApprovalRequestedEvent | ApprovalDecidedEvent):
            yield event, data


def request_problems(events: list[EventRecord]) -> Iterator[Problem]:
    """Approval requests edited in the ledger, one finding per request id.

    A request counts only when it is the one request bearing its id, its recorded arguments
    hash to its recorded ``arguments_sha256``, and (for a tool call, or its rerun) the
    model's recorded answers asked for exactly that call (``model_tool_calls``): the run
    runs the answer's call when the request's digest matches, while a person is shown the
    request's arguments, so they must be the same.
    """
    asked: set[tuple[str, str]] = set()
    for event in events:
        if event.kind == EventKind.MODEL_TOOL_CALLS:
            answer = _parsed(event)
            if isinstance(answer, ModelToolCallsEvent):
                asked.update((c.name, arguments_sha256(c.arguments)) for c in answer.tool_calls)
    requests = [d for _, d in _read(events) if isinstance(d, ApprovalRequestedEvent)]
    count = Counter(d.call_id for d in requests)
    reported: set[str] = set()
    for data in requests:
        if data.call_id in reported:
            continue
        digest = arguments_sha256(data.arguments) if data.arguments is not None else None
        if count[data.call_id] > 1:
            reason = "requested more than once under one id"
        elif digest != data.arguments_sha256:
            reason = "its recorded arguments do not match its recorded arguments digest"
        elif data.kind != ApprovalKind.TASK and (data.tool or "", digest or "") not in asked:
            reason = "its tool call is not one a recorded model answer asked for"
        else:
            continue
        reported.add(data.call_id)
        yield (f"approval {data.call_id}", None, reason)


def check_approvals(
    chained: Sequence[ChainedRecord],
    run: RunRecord,
    events: list[EventRecord],
    calls: list[CallRecord],
    tool_calls: Mapping[str, ToolCallRecord],
    completed: set[str],
) -> Iterator[Problem]:
    """Check a run's approvals (see the module docstring).

    Args:
        chained: The records the run's hash chain holds, in its order (`ChainReport.records`).
        run: The run's record (its config and graph say what requires approval).
        events: The run's events.
        calls: The run's model calls.
        tool_calls: The run's tool calls, by id.
        completed: Ids of the tasks recorded completed.
    """
    seq: dict[tuple[str, str], int] = {}  # (kind, subject): its first place in the chain
    last: dict[tuple[str, str], int] = {}  # (kind, subject): its latest place
    for record in chained:
        seq.setdefault((record.kind, record.subject), record.position)
        last[(record.kind, record.subject)] = record.position
    yield from request_problems(events)
    read = list(_read(events))
    requests: dict[str, tuple[int, ApprovalRequestedEvent]] = {}
    for event, data in read:
        if isinstance(data, ApprovalRequestedEvent):
            where = seq.get(("event", event.event_id), 0)
            requests.setdefault(data.call_id, (where, data))
    approvals: list[tuple[int, ApprovalDecidedEvent]] = []  # decisions that answer a request
    seen: set[str] = set()
    for event, decided in read:
        if not isinstance(decided, ApprovalDecidedEvent):
            continue
        call_id = decided.call_id
        where = seq.get(("event", event.event_id), 0)
        asked = requests.get(call_id)
        if asked is None or asked[0] >= where or _key(asked[1]) != _key(decided):
            yield (f"approval {call_id}", None, "a decision that answers no recorded request")
            continue
        if call_id in seen:
            yield (f"approval {call_id}", None, "decided more than once")
            continue
        seen.add(call_id)
        approvals.append((where, decided))
    spawns = {
        spawn.child_id: event.subject.removeprefix("task:")
        for event in events
        if event.kind == EventKind.SPAWN and isinstance(spawn := _parsed(event), SpawnEvent)
    }
    yield from _check_tool_calls(run, approvals, tool_calls, seq, spawns)
    yield from _check_reruns(chained, events, calls, tool_calls, approvals, spawns)
    call_tasks = [(call, _call_task(call.subject, tool_calls, spawns)) for call in calls]
    yield from _check_tasks(run, approvals, call_tasks, completed, seq, last)


def _task_of(
    subject: str, tool_calls: Mapping[str, ToolCallRecord], spawns: Mapping[str, str]
) -> str | None:
    """The task a tool call's subject serves: a delegate's and a child's are their caller's."""
    for _ in range(64):  # delegation chains are short; a cycle in forged records ends here
        if subject.startswith("task:"):
            return subject.removeprefix("task:")
        if subject.startswith("child:"):
            return spawns.get(subject.removeprefix("child:"))
        parent = tool_calls.get(subject.removeprefix("delegation:"))
        if not subject.startswith("delegation:") or parent is None:
            return None
        subject = parent.subject
    return None


def _call_task(
    subject: str, tool_calls: Mapping[str, ToolCallRecord], spawns: Mapping[str, str]
) -> str | None:
    """The task a model call serves, or ``None`` for none.

    A task's own calls, its isolated dispatches', clarifications' and reviewers' serve it, and
    so do its children's and delegates' (`_task_of`).
    """
    kind, _, rest = subject.partition(":")
    if kind in (PromptKind.ISOLATED, PromptKind.CLARIFICATION):
        return rest
    if kind == PromptKind.REVIEW:  # review:<task>/<round>/<stage>
        return rest.rsplit("/", 2)[0]
    return _task_of(subject, tool_calls, spawns)


def _check_tool_calls(
    run: RunRecord,
    approvals: list[tuple[int, ApprovalDecidedEvent]],
    tool_calls: Mapping[str, ToolCallRecord],
    seq: Mapping[tuple[str, str], int],
    spawns: Mapping[str, str],
) -> Iterator[Problem]:
    names = run.config.get("approval_tools") if isinstance(run.config, dict) else None
    tools = {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()
    entries = run.config.get("tools") if isinstance(run.config, dict) else None
    for name, entry in entries.items() if isinstance(entries, dict) else ():  # a `RunSpec`
        if isinstance(entry, dict) and entry.get("approval") == "required":
            tools.add(name)
    for record in tool_calls.values():
        if record.name not in tools:
            continue
        key = (ApprovalKind.TOOL, _task_of(record.subject, tool_calls, spawns), record.agent,
               record.name,
               arguments_sha256(record.arguments), None)  # fmt: skip
        where = seq.get(("tool_call", record.tool_call_id), 0)
        before = [d for s, d in approvals if s < where and _key(d) == key]
        subject = f"tool call {record.tool_call_id}"
        if not before:
            yield (subject, None, f"{record.name} ran without a recorded approval")
            continue
        decided = before[-1]
        if decided.decision != "approved":
            denial = denial_text(record.name, decided.by, decided.reason or "")
            if record.result != denial or not record.is_error:
                yield (subject, None, f"{record.name} ran though it was denied")


def _check_tasks(
    run: RunRecord,
    approvals: list[tuple[int, ApprovalDecidedEvent]],
    call_tasks: list[tuple[CallRecord, str | None]],
    completed: set[str],
    seq: Mapping[tuple[str, str], int],
    last: Mapping[tuple[str, str], int],
) -> Iterator[Problem]:
    required = [
        t for t in (run.graph or []) if isinstance(t, dict) and t.get("approval") == "required"
    ]
    for task in required:
        task_id = str(task.get("id"))
        key = (ApprovalKind.TASK, task_id, task.get("assignee"), None, None, None)
        first = min(
            (s for s, d in approvals if _key(d) == key and d.decision == "approved"),
            default=None,
        )
        for call, served in call_tasks:
            if served == task_id and (first is None or seq.get(("call", call.call_id), 0) < first):
                yield (f"task {task_id}", call.call_id, "a model call before the task's approval")
        state = last.get(("task", task_id), 0)
        if task_id in completed and (first is None or state < first):
            yield (f"task {task_id}", None, "completed without an approval recorded before")


_Start = tuple[int, str, ToolStartedEvent, str]
"""One ``tool_started`` event: its place in the chain, its subject, its data, its id."""


def _starts(
    events: list[EventRecord], places: Mapping[tuple[str, str], list[int]]
) -> dict[str, list[_Start]]:
    """Every ``tool_started`` event, by tool call id, in the chain's order."""
    starts: dict[str, list[_Start]] = {}
    for event in events:
        data = _parsed(event) if event.kind == EventKind.TOOL_STARTED else None
        where = places.get((RecordKind.EVENT, event.event_id))
        if isinstance(data, ToolStartedEvent) and where:
            starts.setdefault(data.tool_call_id, []).append(
                (where[0], event.subject, data, event.event_id)
            )
    for started in starts.values():
        started.sort(key=lambda s: s[0])
    return starts


def _check_reruns(
    chained: Sequence[ChainedRecord],
    events: list[EventRecord],
    calls: list[CallRecord],
    tool_calls: Mapping[str, ToolCallRecord],
    approvals: list[tuple[int, ApprovalDecidedEvent]],
    spawns: Mapping[str, str],
) -> Iterator[Problem]:
    """No tool call carried out twice without an approval to rerun it (module docstring)."""
    places: dict[tuple[str, str], list[int]] = {}
    for record in chained:
        places.setdefault((record.kind, record.subject), []).append(record.position)
    starts = _starts(events, places)
    reruns = [(s, d) for s, d in approvals
              if d.kind == ApprovalKind.RERUN and d.decision == "approved"]  # fmt: skip
    for call_id, started in starts.items():
        _, subject, data, _ = started[0]
        row = tool_calls.get(call_id)
        tasks = {_task_of(subject, tool_calls, spawns), subject.partition(":")[2]}
        for (since, _, before, before_id), (at, _, _, _) in itertools.pairwise(started):
            if before.idempotent:  # run again without asking, as its tool was declared
                continue
            # The decision between this start and the one before, on that start when it
            # names one (older runs' name none): each decision covers one rerun.
            if not any(
                since < s < at and d.tool == data.name and d.task_id in tasks
                and d.arguments_sha256 == data.arguments_sha256
                and (row is None or d.agent == row.agent)
                and d.reruns in (None, before_id)
                for s, d in reruns
            ):  # fmt: skip
                reason = f"{data.name} ran again without a recorded approval to rerun it"
                yield (f"tool call {call_id}", None, reason)
                break
    yield from _second_runs(starts, events, calls, places, reruns)


def _second_runs(
    starts: Mapping[str, list[_Start]],
    events: list[EventRecord],
    calls: list[CallRecord],
    places: Mapping[tuple[str, str], list[int]],
    reruns: Sequence[tuple[int, ApprovalDecidedEvent]],
) -> Iterator[Problem]:
    """Calls run again, under another id, for the model answer an earlier one ran for.

    A run after the earlier call is one too many unless it is the ``replacement`` a
    ``replay_declined`` event of an earlier run records (events recorded before that field
    was, each naming the answer's first run, are taken for one later run each), or an
    approved ``rerun`` decision recorded between them names the earlier call's start (a
    finished call run again, and that rerun stopped inside the tool: its next run is a rerun
    of the rerun).
    """
    answers: dict[str, list[tuple[int, str]]] = {}  # subject: (place, model call id) given
    for call in calls:
        for where in places.get((RecordKind.CALL, call.call_id), ()):
            answers.setdefault(call.subject, []).append((where, call.call_id))
    declined: dict[str, set[str | None]] = {}  # call: the replacements its declines name
    unnamed: dict[str, list[int]] = {}  # call: where its declines naming none were recorded
    asked: dict[str, Counter[tuple[str, str]]] = {}  # answer: how often it asked each call
    for event in events:
        if event.kind not in (EventKind.REPLAYED, EventKind.REPLAY_DECLINED,
                              EventKind.MODEL_TOOL_CALLS):  # fmt: skip
            continue
        data = _parsed(event)
        placed = places.get((RecordKind.EVENT, event.event_id))
        if isinstance(data, ReplayedEvent) and data.record == RecordKind.CALL and placed:
            answers.setdefault(event.subject, []).append((placed[0], data.original))
        elif isinstance(data, ReplayDeclinedEvent):
            declined.setdefault(data.original, set()).add(data.replacement)
            if data.replacement is None and placed:
                unnamed.setdefault(data.original, []).append(placed[0])
        elif isinstance(data, ModelToolCallsEvent):
            asked[data.call_id] = Counter(
                (c.name, arguments_sha256(c.arguments)) for c in data.tool_calls
            )
    for given in answers.values():
        given.sort()
    runs: dict[tuple[str, str, str, str], list[tuple[int, str]]] = {}
    for call_id, ((at, subject, data, _), *_) in starts.items():
        index = bisect.bisect_left(answers.get(subject, []), (at, ""))
        if index == 0:
            continue  # no recorded answer of its subject before it: nothing to compare
        answer = answers[subject][index - 1][1]
        key = (subject, answer, data.name, data.arguments_sha256)
        runs.setdefault(key, []).append((at, call_id))
    origins = {new: old for old, news in declined.items() for new in news if new is not None}
    for (_, answer, name, sha), ran in runs.items():
        ran.sort()
        # An answer that asked for one call n times (two delegations of one task) runs it
        # n times: only a run beyond those, not in a declined call's place, is one too many.
        times = max(1, asked.get(answer, Counter())[(name, sha)])
        first_at = {call: p for p, call in ran}  # each run of this call, where it started
        # Older runs' declines name no replacement (each session's names the answer's
        # first run): each is taken for one run after it, of any of this call's runs.
        spare = sorted(p for call in first_at for p in unnamed.get(call, ()))
        for (_, earlier), (at, later) in zip(ran, ran[times:], strict=False):
            began = {e: p for p, _, _, e in starts[earlier]}  # its starts: id, place
            # The recorded replacement of a call that ran before it.
            replaces = origins.get(later)
            in_place = replaces in first_at and first_at[replaces] < at
            if not in_place and spare and spare[0] < at:
                spare.pop(0)
                in_place = True
            if not in_place and not any(
                d.reruns in began and began[d.reruns] < s < at
                and d.tool == name and d.arguments_sha256 == sha
                for s, d in reruns
            ):  # fmt: skip
                reason = (f"{name} ran a second time for one model answer (first as tool call "
                          f"{earlier}), without a recorded approval to rerun it")  # fmt: skip
                yield (f"tool call {later}", None, reason)
