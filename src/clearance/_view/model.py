"""What the run page shows, gathered from the ledger and ``verify``: no HTML here.

`load_run_view` reads one run (`RunLedger.get_run`, ``tasks``, ``calls``, ``tool_calls``,
``events``), checks it with `verify_run`, and groups everything by task (`Owners`): each
task's model calls (retries, isolated, clarification, reviewer, delegation and child calls
included), tool calls and events, and what the clearances of its prompts admitted. Each
prompt is split into segments that carry the origin of the manifest item they render, so a
page can colour every part by where it came from. All text stays raw here; escaping is the
template's job.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from clearance._context.render import PromptParseError, parse_user_message, render_block
from clearance._context.verify import Finding, verify_run
from clearance._core.errors import ClearanceError
from clearance._core.event_schema import event_problem
from clearance._core.vocabulary import EventKind, OriginKind
from clearance._orchestration.resume import shown_status
from clearance._state.ledger import CallRecord, EventRecord, RunLedger, RunRecord, ToolCallRecord
from clearance._view.checked import checked, checked_call
from clearance._view.owners import Owners

_Owners = Owners  # its earlier name here

__all__ = [
    "HIGHLIGHTED_KINDS",
    "CallView",
    "MessageView",
    "RunView",
    "Segment",
    "TaskView",
    "load_run_view",
    "segment_call",
]

HIGHLIGHTED_KINDS: tuple[str, ...] = (
    OriginKind.TASK,
    OriginKind.TASK_RESULT,
    OriginKind.MESSAGE,
    OriginKind.FILE,
    OriginKind.TOOL,
    OriginKind.STORE,
    OriginKind.MEMORY,
    OriginKind.CHILD_RESULT,
)
"""Origin kinds with their own colour; every other kind is shown as ``other``."""

_REASON_CHARS = 1000  # of a verify failure's text, as the page shows it

KIND_LABELS: dict[str, str] = {
    "task": "task",
    "task_result": "dependency result",
    "message": "message",
    "file": "file",
    "tool": "tool result",
    "store": "store",
    "memory": "memory",
    "child_result": "child result",
    "other": "other (instructions, architecture, ...)",
}
"""What the legend calls each colour."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Segment:
    """One stretch of a prompt's text.

    Attributes:
        text: The text, verbatim (raw; escape it before showing it).
        origin: The manifest item it renders (``task_result:a``...), or ``None`` for the
            prompt's own structure (section headings, blank lines, the closing instruction).
        title: The item's title, if an item.
        tokens: The item's token count, if an item.
        css: ``structure``, one of `HIGHLIGHTED_KINDS` or ``other``.
        flagged: Whether ``verify`` reported a finding for this item.
    """

    text: str
    origin: str | None = None
    title: str | None = None
    tokens: int | None = None
    css: str = "structure"
    flagged: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class MessageView:
    """One message of a prompt (``system`` or ``user``) as segments."""

    role: str
    segments: tuple[Segment, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class CallView:
    """One model call with its prompt split by origin and its verdict.

    Attributes:
        call: The recorded call.
        attempt: 1 for the first call of its subject, 2 for its first retry...
        messages: The prompt's messages as segments.
        layout_note: Why the prompt could not be split by origin (shown raw), or ``None``.
        findings: What ``verify`` found wrong in this call (empty when it passed).
        replays: How many times a resume took its answer from the record instead of
            sending it again (``replayed`` events naming it).
    """

    call: CallRecord
    attempt: int
    messages: tuple[MessageView, ...]
    layout_note: str | None
    findings: tuple[Finding, ...]
    replays: int = 0

    @property
    def items(self) -> list[dict[str, Any]]:
        """The manifest's items (``origin``, ``title``, ``tokens``...); none if malformed."""
        return _manifest_items(self.call.manifest) or []

    @property
    def total_tokens(self) -> object:
        """The manifest's ``total_tokens`` as recorded (``""`` if it has none)."""
        manifest = self.call.manifest
        return manifest.get("total_tokens", "") if isinstance(manifest, dict) else ""


@dataclass(kw_only=True, slots=True)
class TaskView:
    """One task of the graph with everything recorded about it.

    Attributes:
        index: Position in the run's task list (used for element ids, never the task id).
        task_id: The task's id.
        title: Its title.
        assignee: Its agent.
        status: Its latest status.
        depends_on: Its dependencies.
        result: Its result, if completed.
        error: Why it failed or was skipped.
        reasons: Every reason it was ever recorded with.
        duration_s: Seconds from start to finish, or ``None`` if it did not run or finish.
        started_at: When it started running (aware UTC), or ``None``.
        finished_at: When it reached a final status (aware UTC), or ``None``.
        calls: Its model calls in order (task, isolated, clarification, review, delegation,
            child).
        tool_calls: Its tool calls, delegated ones included.
        events: Its events (spawns, children, clarifications, limit breaches...).
        event_problems: Why an event does not match its kind's schema, by event id.
        cleared: Ids of the tasks whose results the clearance of any of its prompts
            admitted (or any of its prompts held), in the order first met.
    """

    index: int
    task_id: str
    title: str
    assignee: str
    status: str
    depends_on: tuple[str, ...]
    result: str | None
    error: str | None
    reasons: list[str]
    duration_s: float | None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    calls: list[CallView] = field(default_factory=list)
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    events: list[EventRecord] = field(default_factory=list)
    event_problems: dict[str, str] = field(default_factory=dict)
    cleared: tuple[str, ...] = ()

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens of all its calls."""
        return sum(c.call.usage.prompt_tokens for c in self.calls)

    @property
    def completion_tokens(self) -> int:
        """Completion tokens of all its calls."""
        return sum(c.call.usage.completion_tokens for c in self.calls)

    @property
    def finding_count(self) -> int:
        """How many ``verify`` findings its calls have."""
        return sum(len(c.findings) for c in self.calls)


@dataclass(frozen=True, kw_only=True, slots=True)
class RunView:
    """A run as the page shows it.

    Attributes:
        run: The run record.
        tasks: Its tasks, in the order first recorded.
        coordinator_calls: Calls that belong to no task (plan, synthesis, conversation...).
        findings: Every ``verify`` finding.
        calls_checked: How many calls ``verify`` checked.
        verify_error: Why ``verify`` could not run, or ``None``.
        seq: The run's last chain position when it was read (`RunLedger.chain_heads`): the
            version of the run this view shows, 0 for a run without a chain.
        status: Its status as listed (`shown_status`): ``running (process gone)`` for a run
            recorded running whose process is gone, else as recorded (``run.status``).
    """

    run: RunRecord
    tasks: list[TaskView]
    coordinator_calls: list[CallView]
    findings: tuple[Finding, ...]
    calls_checked: int
    verify_error: str | None
    seq: int = 0
    status: str

    @property
    def process_gone(self) -> bool:
        """Whether it is recorded running but its process is gone (`status` says so)."""
        return self.status != self.run.status

    @property
    def live(self) -> bool:
        """Whether it is still going (not finished, its process not gone): a page refreshes."""
        return self.run.finished_at is None and not self.process_gone

    @property
    def calls(self) -> list[CallView]:
        """Every recorded model call, the tasks' and the coordinator's, failed ones included.

        The page counts these, as ``verify`` does, not the run's usage total: that total is
        written when the run finishes and counts only answered requests.
        """
        return [c for t in self.tasks for c in t.calls] + self.coordinator_calls

    @property
    def failed_calls(self) -> int:
        """How many recorded calls failed (an error, not an answer)."""
        return sum(1 for c in self.calls if c.call.error is not None)

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens of every recorded call (up to date while the run is going)."""
        return sum(c.call.usage.prompt_tokens for c in self.calls)

    @property
    def completion_tokens(self) -> int:
        """Completion tokens of every recorded call."""
        return sum(c.call.usage.completion_tokens for c in self.calls)

    @property
    def verified(self) -> bool:
        """Whether ``verify`` ran and found nothing."""
        return self.verify_error is None and not self.findings

    @property
    def duration_s(self) -> float | None:
        """Seconds from the run's start to its finish, or ``None`` while it runs."""
        return _seconds(self.run.created_at, self.run.finished_at)

    def graph_data(self) -> dict[str, Any]:
        """The task graph as JSON-ready data for the page's layout script.

        Returns:
            ``{"nodes": [{"index", "id", "status", "label"}...], "edges": [[from, to]...],
            "cleared": {index: [indexes of tasks whose results it may see]}}``.
        """
        index = {t.task_id: t.index for t in self.tasks}
        nodes = [
            {"index": t.index, "id": t.task_id, "status": t.status, "label": _node_label(t)}
            for t in self.tasks
        ]
        edges = [[index[dep], t.index] for t in self.tasks for dep in t.depends_on if dep in index]
        cleared = {
            str(t.index): sorted(index[c] for c in t.cleared if c in index) for t in self.tasks
        }
        return {"nodes": nodes, "edges": edges, "cleared": cleared}


def load_run_view(ledger: RunLedger, run_id: str) -> RunView:
    """Read one run from the ledger and check it with ``verify``.

    Args:
        ledger: The ledger holding the run.
        run_id: A run id or a unique prefix of one.

    Returns:
        The run, grouped by task. A ``verify`` that cannot run is reported in
        ``verify_error``, not raised.

    Raises:
        StoreError: The run is unknown, the prefix is ambiguous, or the ledger cannot be read.
        MalformedRecord: A record is not of the shape the ledger writes (a call's token
            counts or latency not numbers, bytes where text belongs: `checked`).
    """
    run = ledger.get_run(run_id)
    checked(run, f"run {run.run_id!s}")
    seq = ledger.chain_heads([run.run_id]).get(run.run_id, 0)  # read first: never ahead
    findings: tuple[Finding, ...] = ()
    calls_checked = 0
    verify_error: str | None = None
    try:
        report = verify_run(ledger, run.run_id)
        findings, calls_checked = report.findings, report.calls_checked
    except ClearanceError as exc:
        verify_error = str(exc)
    except Exception as exc:  # a forged row of a type verify does not expect: still a verdict
        verify_error = f"a record is malformed ({type(exc).__name__}: {exc})"[:_REASON_CHARS]
    by_call: dict[str, list[Finding]] = {}
    for finding in findings:  # run-level findings (the chain, results) have no call id
        by_call.setdefault(finding.call_id or "", []).append(finding)
    reasons = ledger.task_reasons(run.run_id)
    records = [
        checked(t, f"task {t.task_id!s} of run {run.run_id}") for t in ledger.tasks(run.run_id)
    ]
    tasks = [
        TaskView(
            index=i,
            task_id=t.task_id,
            title=t.title,
            assignee=t.assignee,
            status=t.status,
            depends_on=t.depends_on,
            result=t.result,
            error=t.error,
            reasons=reasons.get(t.task_id, []),
            duration_s=_seconds(t.started_at, t.finished_at),
            started_at=t.started_at,
            finished_at=t.finished_at,
        )
        for i, t in enumerate(records)
    ]
    by_id = {t.task_id: t for t in tasks}
    tool_calls = [
        checked(t, f"tool call {t.tool_call_id!s}") for t in ledger.tool_calls(run.run_id)
    ]
    events = [checked(e, f"event {e.event_id!s}") for e in ledger.events(run.run_id)]
    owner = Owners(tool_calls, events)
    for tool_call in tool_calls:
        task = by_id.get(owner.task_of(tool_call.subject) or "")
        if task is not None:
            task.tool_calls.append(tool_call)
    for event in events:
        task = by_id.get(owner.task_of(event.subject) or "")
        if task is not None:
            task.events.append(event)
            problem = event_problem(event.kind, event.data)
            if problem is not None:
                task.event_problems[event.event_id] = problem
    coordinator_calls: list[CallView] = []
    attempts: dict[str, int] = {}
    replayed = [e.data for e in events if e.kind == EventKind.REPLAYED]
    replays = Counter(str(d.get("original")) for d in replayed if isinstance(d, dict))
    for call in map(checked_call, ledger.calls(run.run_id)):
        attempts[call.subject] = attempts.get(call.subject, 0) + 1
        view = segment_call(call, attempts[call.subject], by_call.get(call.call_id, ()))
        view = dataclasses.replace(view, replays=replays[call.call_id])
        task = by_id.get(owner.task_of(call.subject) or "")
        if task is None:
            coordinator_calls.append(view)
            continue
        task.calls.append(view)
        task.cleared = (*task.cleared, *(t for t in _admitted(call) if t not in task.cleared))
    return RunView(
        run=run,
        tasks=tasks,
        coordinator_calls=coordinator_calls,
        findings=findings,
        calls_checked=calls_checked,
        verify_error=verify_error,
        seq=seq,
        status=shown_status(run, now=ledger.server_time()),
    )


def segment_call(call: CallRecord, attempt: int, findings: Iterable[Finding] = ()) -> CallView:
    """Split a recorded call's prompt into segments, one per manifest item.

    The system message is the manifest's first item; the user message is parsed back into
    its fenced blocks (`parse_user_message`), which map one to one onto the remaining items.
    A prompt that does not parse or does not match its manifest is shown as one unmarked
    segment per message, with the reason in ``layout_note``.

    Args:
        call: The recorded call.
        attempt: Its attempt number for its subject (1-based).
        findings: ``verify`` findings for this call.

    Returns:
        The call's view.
    """
    found = tuple(findings)
    flagged = {f.origin for f in found if f.origin}
    items = _manifest_items(call.manifest)
    messages = call.messages if isinstance(call.messages, list) else []
    messages = [m if isinstance(m, dict) else {"content": m} for m in messages]
    roles = [str(m.get("role", "")) for m in messages]
    texts = [str(m.get("content", "")) for m in messages]
    raw = tuple(
        MessageView(role=role, segments=(Segment(text=text),))
        for role, text in zip(roles, texts, strict=True)
    )
    if roles != ["system", "user"] or not items:
        note = "the prompt is not a system and a user message with a manifest"
        return CallView(call=call, attempt=attempt, messages=raw, layout_note=note, findings=found)
    system = MessageView(role="system", segments=(_item_segment(texts[0], items[0], flagged),))
    try:
        user = _user_segments(texts[1], items[1:], flagged)
    except PromptParseError as exc:
        return CallView(
            call=call, attempt=attempt, messages=raw, layout_note=str(exc), findings=found
        )
    split = (system, MessageView(role="user", segments=user))
    return CallView(call=call, attempt=attempt, messages=split, layout_note=None, findings=found)


def _manifest_items(manifest: object) -> list[dict[str, Any]] | None:
    """A recorded manifest's items, or ``None`` when it is not a list of objects (forged)."""
    items = manifest.get("items") if isinstance(manifest, dict) else None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        return None
    return items


def _user_segments(
    text: str, items: Sequence[dict[str, Any]], flagged: set[str]
) -> tuple[Segment, ...]:
    sections, trailer = parse_user_message(text)
    blocks = [block for section in sections for block in section.blocks]
    if len(blocks) != len(items):
        raise PromptParseError(
            f"the prompt holds {len(blocks)} blocks, the manifest lists {len(items)}"
        )
    segments: list[Segment] = []
    remaining = iter(items)
    for section in sections:
        if not section.blocks:
            continue
        segments.append(Segment(text=section.heading + "\n\n"))
        for block in section.blocks:
            rendered = render_block(block.heading, block.content, on_fence=block.on_fence)
            segments.append(_item_segment(rendered, next(remaining), flagged))
            segments.append(Segment(text="\n\n"))
    segments.append(Segment(text=trailer))
    if "".join(s.text for s in segments) != text:
        raise PromptParseError("the prompt holds text outside its manifest's items")
    return tuple(segments)


def _item_segment(text: str, item: dict[str, Any], flagged: set[str]) -> Segment:
    origin = str(item.get("origin", ""))
    kind = origin.split(":", 1)[0]
    tokens = item.get("tokens")
    return Segment(
        text=text,
        origin=origin,
        title=str(item.get("title", "")),
        tokens=tokens if isinstance(tokens, int) else None,
        css=kind if kind in HIGHLIGHTED_KINDS else "other",
        flagged=origin in flagged,
    )


def _admitted(call: CallRecord) -> list[str]:
    """The tasks whose results a call's clearance admitted, or its prompt held (in order).

    Every prompt of a task counts (``task:``, ``isolated:``, a clarification's, a child's,
    a delegate's...): what its panel says the task saw is what any of them was given.
    """
    manifest = call.manifest if isinstance(call.manifest, dict) else {}
    clearance = manifest.get("clearance")
    listed = clearance.get("result_task_ids") if isinstance(clearance, dict) else None
    ids = [str(x) for x in listed] if isinstance(listed, list) else []
    for item in _manifest_items(manifest) or []:
        kind, _, ref = str(item.get("origin", "")).partition(":")
        if kind in (OriginKind.TASK_RESULT, OriginKind.TASK_STATUS):
            ids.append(ref)
    return list(dict.fromkeys(ids))


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return max(0.0, (end - start).total_seconds())


def _node_label(task: TaskView) -> str:
    parts = [task.status]
    if task.duration_s is not None:
        parts.append(f"{task.duration_s:.1f}s")
    tokens = task.prompt_tokens + task.completion_tokens
    if task.calls:
        parts.append(f"{tokens} tok")
    return " · ".join(parts)
