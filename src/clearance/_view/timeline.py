"""The run page's timeline: each task and each of its calls as a bar on one time axis.

`build_timeline` reads only times the ledger recorded: a run's ``created_at`` and
``finished_at``, each task's ``started_at`` and ``finished_at``, each model call's
``started_at`` and ``latency_s``, and each tool call's ``created_at`` (recorded when the tool
returned) with its ``tool_started`` event's (recorded before it ran): a span from one to the
other, or a point where no start was recorded. Positions are percentages of the run's
span, ready for an SVG ``x``/``width``; nothing here is HTML, and every label stays raw
(the template escapes it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from clearance._core.event_schema import ToolStartedEvent, parse_event
from clearance._core.vocabulary import EventKind
from clearance._state.ledger import ToolCallRecord
from clearance._view.model import CallView, RunView, TaskView

__all__ = ["MIN_WIDTH_PCT", "Bar", "Timeline", "TimelineRow", "build_timeline"]

MIN_WIDTH_PCT = 0.3
"""Narrowest bar drawn (percent of the axis), so a call of a few milliseconds stays visible."""

_MIN_SPAN_S = 0.001
_TICKS = 4


@dataclass(frozen=True, kw_only=True, slots=True)
class Bar:
    """One span (or point) on the axis.

    Attributes:
        css: What it is drawn as: a task's status, or ``ok``, ``failed``, ``pending`` (a call
            with no recorded outcome) for a call, ``tool`` / ``tool-error`` for a tool call.
        start_s: Seconds from the run's start to its start.
        duration_s: Its length in seconds; ``None`` for a point (a tool call with no
            recorded start).
        left_pct: Where it starts, in percent of the axis (0-100).
        width_pct: Its width in percent of the axis, at least `MIN_WIDTH_PCT` (0 for a point).
        label: What hovering it says (raw text: ids, titles, times).
    """

    css: str
    start_s: float
    duration_s: float | None
    left_pct: float
    width_pct: float
    label: str


@dataclass(frozen=True, kw_only=True, slots=True)
class TimelineRow:
    """One task (or the coordinator) on the timeline.

    Attributes:
        key: What the page selects with it: the task's index, or ``"coordinator"``.
        name: The task's id (or ``coordinator``), raw.
        status: The task's status (``""`` for the coordinator).
        bar: The task's own span, or ``None`` if it never started (pending, skipped).
        calls: Its model calls in order, retries and failures included.
        tools: Its tool calls (spans, or points where no start was recorded).
    """

    key: str
    name: str
    status: str
    bar: Bar | None
    calls: tuple[Bar, ...]
    tools: tuple[Bar, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Timeline:
    """The whole chart.

    Attributes:
        span_s: Seconds the axis covers, from the run's start to its end (or to now while it
            runs), never below a millisecond.
        rows: One row per task in the run's order, then the coordinator's if it made calls.
        ticks: ``(percent, seconds)`` marks along the axis, 0 and the end included.
    """

    span_s: float
    rows: tuple[TimelineRow, ...]
    ticks: tuple[tuple[float, float], ...]


def build_timeline(view: RunView, *, now: datetime | None = None) -> Timeline:
    """Lay a run's recorded times out on one axis.

    Args:
        view: The run (`load_run_view`).
        now: Where the axis ends while the run is still going (aware UTC); ``None`` for the
            clock. Unused once the run has finished (its ``finished_at`` ends the axis).
            Spans still open (a running task, a call with no outcome) end there too.

    Returns:
        The chart; a bar's ``duration_s`` is its recorded time, its ``width_pct`` that time
        over ``span_s``.
    """
    origin = view.run.created_at
    end = view.run.finished_at or max(now or datetime.now(UTC), _latest(view))
    span = max((end - origin).total_seconds(), _MIN_SPAN_S)
    axis = _Axis(origin, end, span)
    rows = [_task_row(t, axis) for t in view.tasks]
    if view.coordinator_calls:
        calls = tuple(_call_bar(c, axis) for c in view.coordinator_calls)
        rows.append(
            TimelineRow(
                key="coordinator", name="coordinator", status="", bar=None, calls=calls, tools=()
            )
        )
    ticks = tuple((100.0 * i / _TICKS, span * i / _TICKS) for i in range(_TICKS + 1))
    return Timeline(span_s=span, rows=tuple(rows), ticks=ticks)


class _Axis:
    def __init__(self, origin: datetime, end: datetime, span_s: float) -> None:
        self.origin, self.end, self.span_s = origin, end, span_s

    def until(self, start: datetime, end: datetime) -> float:
        """Seconds from ``start`` to ``end`` (0 if the clock went back)."""
        return max(0.0, (end - start).total_seconds())

    def bar(self, css: str, start: datetime, duration_s: float | None, label: str) -> Bar:
        start_s = self.until(self.origin, start)
        if duration_s is None:
            return Bar(
                css=css,
                start_s=start_s,
                duration_s=None,
                left_pct=self._pct(start_s),
                width_pct=0.0,
                label=label,
            )
        duration = max(0.0, duration_s)
        left = self._pct(start_s)
        width = min(max(100.0 * duration / self.span_s, MIN_WIDTH_PCT), 100.0)
        return Bar(
            css=css,
            start_s=start_s,
            duration_s=duration,
            left_pct=min(left, 100.0 - width),
            width_pct=width,
            label=f"{label} · {_time(duration)} (from +{_time(start_s)})",
        )

    def _pct(self, seconds: float) -> float:
        return min(100.0, 100.0 * seconds / self.span_s)


def _task_row(task: TaskView, axis: _Axis) -> TimelineRow:
    bar = None
    if task.started_at is not None:
        end = task.finished_at or axis.end
        running = "" if task.finished_at is not None else ", still running"
        label = f"task {task.task_id}: {task.title} ({task.status}{running})"
        bar = axis.bar(task.status, task.started_at, axis.until(task.started_at, end), label)
    started = _tool_starts(task)
    tools = tuple(
        axis.bar(
            "tool-error" if t.is_error else "tool",
            started.get(t.tool_call_id, t.created_at),
            axis.until(started[t.tool_call_id], t.created_at)
            if t.tool_call_id in started
            else None,
            f"tool {t.name} ({t.tool_call_id}, step {t.step}{', error' if t.is_error else ''})"
            + ("" if t.tool_call_id in started else f" returned at +{_time(_offset(t, axis))}"),
        )
        for t in task.tool_calls
    )
    return TimelineRow(
        key=str(task.index),
        name=task.task_id,
        status=task.status,
        bar=bar,
        calls=tuple(_call_bar(c, axis) for c in task.calls),
        tools=tools,
    )


def _tool_starts(task: TaskView) -> dict[str, datetime]:
    """When each of a task's tool calls started, by tool call id (well-formed events only)."""
    starts: dict[str, datetime] = {}
    for event in task.events:
        if event.kind == EventKind.TOOL_STARTED and event.event_id not in task.event_problems:
            data = parse_event(event.kind, event.data)
            assert isinstance(data, ToolStartedEvent)
            starts[data.tool_call_id] = event.created_at
    return starts


def _offset(tool: ToolCallRecord, axis: _Axis) -> float:
    return (tool.created_at - axis.origin).total_seconds()


def _call_bar(view: CallView, axis: _Axis) -> Bar:
    call = view.call
    if call.pending:
        css, duration, outcome = "pending", axis.until(call.started_at, axis.end), "no answer"
        outcome += " recorded yet"
    else:
        duration = call.latency_s
        css = "failed" if call.error is not None else "ok"
        outcome = f"failed: {call.error}" if call.error is not None else "answered"
    attempt = f", retry {view.attempt - 1}" if view.attempt > 1 else ""
    label = f"model call {call.call_id} ({call.subject}{attempt}, {call.model_id}): {outcome}"
    return axis.bar(css, call.started_at, duration, label)


def _latest(view: RunView) -> datetime:
    """The last time the run's records name (the axis end while the clock is behind it)."""
    times: list[datetime] = [view.run.created_at]
    for task in view.tasks:
        times.extend(t for t in (task.started_at, task.finished_at) if t is not None)
        times.extend(t.created_at for t in task.tool_calls)
    for call in view.calls:
        times.append(_after(call.call.started_at, call.call.latency_s))
    return max(times)


def _after(moment: datetime, seconds: float) -> datetime:
    """``seconds`` after ``moment``, or the calendar's last moment when that is past it.

    A record edited by hand may say a call lasted 1e300 seconds, or started in the year 9999.
    """
    try:
        return moment + timedelta(seconds=seconds)
    except OverflowError:
        return datetime.max.replace(tzinfo=UTC)


def _time(seconds: float) -> str:
    return f"{seconds * 1000:.0f}ms" if seconds < 1 else f"{seconds:.2f}s"
