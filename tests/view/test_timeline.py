"""The timeline: every bar from recorded times, retries and failures included, escaped."""

from __future__ import annotations

import dataclasses
import re
from datetime import timedelta

import pytest

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._view import load_run_view, render_run_page
from clearance._view.timeline import MIN_WIDTH_PCT, build_timeline
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel


def view_of(recorded):
    with RunLedger(recorded.db) as ledger:
        return load_run_view(ledger, recorded.run_id)


def pct(seconds: float, span: float) -> float:
    return max(100.0 * seconds / span, MIN_WIDTH_PCT)


async def test_every_bar_is_its_recorded_time_on_one_axis(recorded):
    view = view_of(recorded)
    timeline = build_timeline(view)
    run = view.run
    assert run.finished_at is not None
    span = (run.finished_at - run.created_at).total_seconds()
    assert timeline.span_s == pytest.approx(span)
    assert [r.name for r in timeline.rows] == [*(t.task_id for t in view.tasks), "coordinator"]
    for task, row in zip(view.tasks, timeline.rows, strict=False):
        if task.started_at is None:
            assert row.bar is None
            continue
        assert row.bar is not None and task.finished_at is not None
        start = (task.started_at - run.created_at).total_seconds()
        duration = (task.finished_at - task.started_at).total_seconds()
        assert row.bar.start_s == pytest.approx(start)
        assert row.bar.duration_s == pytest.approx(duration)
        assert row.bar.left_pct == pytest.approx(100 * start / span)
        assert row.bar.width_pct == pytest.approx(pct(duration, span))
        assert row.bar.css == task.status
        for call, bar in zip(task.calls, row.calls, strict=True):
            assert bar.duration_s == pytest.approx(call.call.latency_s)
            offset = (call.call.started_at - run.created_at).total_seconds()
            assert bar.start_s == pytest.approx(offset)
            assert bar.width_pct == pytest.approx(pct(call.call.latency_s, span))
            assert bar.left_pct >= 0 and bar.left_pct + bar.width_pct <= 100 + 1e-9
    assert [row.bar is None for row in timeline.rows] == [False] * 6 + [True, True]
    assert [t[0] for t in timeline.ticks] == [0, 25, 50, 75, 100]
    assert timeline.ticks[-1][1] == pytest.approx(span)


async def test_a_failed_call_and_its_retry_are_two_bars(recorded):
    timeline = build_timeline(view_of(recorded))
    flaky = next(r for r in timeline.rows if r.name == "flaky")
    assert [b.css for b in flaky.calls] == ["failed", "ok"]
    failed, retried = flaky.calls
    assert "503 service unavailable" in failed.label and "retry" not in failed.label
    assert "retry 1" in retried.label
    assert retried.start_s >= failed.start_s + (failed.duration_s or 0) - 1e-6
    broken = next(r for r in timeline.rows if r.name == "broken")
    assert broken.status == "failed" and [b.css for b in broken.calls] == ["failed"]
    assert broken.bar is not None and broken.bar.css == "failed"


async def test_a_run_still_going_ends_the_axis_now_and_open_spans_there(recorded):
    view = view_of(recorded)
    run = dataclasses.replace(view.run, finished_at=None)
    spec = view.tasks[0]
    assert spec.started_at is not None
    running = dataclasses.replace(spec, status="running", finished_at=None)
    pending = dataclasses.replace(
        spec.calls[0], call=dataclasses.replace(spec.calls[0].call, pending=True, latency_s=0.0)
    )
    running.calls = [pending]
    going = dataclasses.replace(view, run=run, tasks=[running, *view.tasks[1:]])
    now = run.created_at + timedelta(seconds=10)
    timeline = build_timeline(going, now=now)
    assert timeline.span_s == pytest.approx(10)
    row = timeline.rows[0]
    assert row.bar is not None and row.bar.css == "running"
    assert row.bar.duration_s == pytest.approx((now - spec.started_at).total_seconds())
    assert "still running" in row.bar.label
    (call,) = row.calls
    assert call.css == "pending" and "no answer recorded yet" in call.label
    assert call.left_pct + call.width_pct == pytest.approx(100)
    # The clock behind the records (another machine's clock): the axis ends at the last one.
    early = build_timeline(going, now=run.created_at)
    ends = [t.finished_at for t in view.tasks if t.finished_at is not None]
    ends += [c.call.started_at + timedelta(seconds=c.call.latency_s) for c in view.calls]
    assert early.span_s == pytest.approx((max(ends) - run.created_at).total_seconds())


async def test_the_timeline_is_drawn_escaped_with_a_title_per_bar(recorded):
    view = view_of(recorded)
    page = render_run_page(view)
    section = page[page.index('<details class="timeline"') : page.index("</details>")]
    assert section.count('class="tl-task ') == 6  # every task that ran; "after" was skipped
    assert section.count('class="tl-call ') == 8
    assert section.count("<title>") == 6 + 8
    assert "task evil: Untrusted &lt;b&gt;task&lt;/b&gt; (completed)" in section
    assert "<b>" not in section
    bar = r'class="tl-task status-\w+" x="([\d.]+)%" y="1" width="([\d.]+)%"'
    widths = re.findall(bar, section)
    assert len(widths) == 6 and all(float(x) + float(w) <= 100.001 for x, w in widths)
    assert 'data-task="coordinator"' in section


async def test_hostile_ids_in_the_timeline_are_text(recorded, tamper):
    tampered = tamper(recorded)  # a status holding markup: a class attribute and a title
    page = render_run_page(view_of(recorded))
    section = page[page.index('<details class="timeline"') : page.index("</details>")]
    assert tampered not in section
    assert "&lt;script&gt;window.__pwned = 4" in section


def peek() -> str:
    """Look at something."""
    return "SEEN"


async def test_a_tool_call_is_a_span_from_its_start_to_its_result(tmp_path):
    def answer(request: ModelRequest):
        if request.prompt.manifest.subject == "synthesis":
            return "SYNTH"
        used = any(o.startswith("tool:") for o in request.prompt.manifest.origins)
        return "DONE" if used else ToolCall(id="p", name="peek", arguments={})

    team = Team(agents=(Agent(name="a", instructions="A.", tools=("peek",)),))
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orchestrator = Orchestrator(team, model=FunctionModel(answer), ledger=ledger, tools=[peek])
        task = Task(id="t", title="T", description="Peek.", assignee="a")
        result = await orchestrator.run_tasks([task])
        view = load_run_view(ledger, result.run_id)
        started = [e for e in ledger.events(result.run_id) if e.kind == "tool_started"]
    (tool_call,) = view.tasks[0].tool_calls
    (event,) = started
    (bar,) = build_timeline(view).rows[0].tools
    assert bar.css == "tool" and "tool peek" in bar.label
    ran = (tool_call.created_at - event.created_at).total_seconds()
    assert bar.duration_s == pytest.approx(ran)
    assert bar.start_s == pytest.approx((event.created_at - view.run.created_at).total_seconds())
    assert [c.css for c in build_timeline(view).rows[0].calls] == ["ok", "ok"]
