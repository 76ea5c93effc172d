"""The run page of a run with tool calls and delegation: grouped under the task that made them."""

from __future__ import annotations

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._view import load_run_view, render_run_page
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel


def peek() -> str:
    """Look at something private."""
    return "PRIVATE-TOOL-RESULT"


def answer(request: ModelRequest):
    manifest = request.prompt.manifest
    if manifest.subject == "synthesis":
        return "SYNTH"
    step = sum(o.startswith("tool:") for o in manifest.origins)
    plans = {
        "alice": [
            ToolCall(id="p", name="peek", arguments={}),
            ToolCall(id="d", name="delegate", arguments={"agent": "bob", "task": "Ask <b>."}),
            "ALICE-FINAL",
        ],
        "bob": [
            ToolCall(id="d", name="delegate", arguments={"agent": "alice", "task": "No."}),
            "BOB-DONE",
        ],
    }
    plan = plans[manifest.agent]
    return plan[min(step, len(plan) - 1)]


async def test_tool_calls_and_delegations_are_shown_with_their_task(tmp_path):
    team = Team(
        agents=(
            Agent(name="alice", instructions="A.", tools=("peek",), can_delegate_to=("bob",)),
            Agent(name="bob", instructions="B.", can_delegate_to=("alice",)),
        ),
        coordinator=Agent(name="lead", instructions="You lead."),
    )
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orchestrator = Orchestrator(team, model=FunctionModel(answer), ledger=ledger, tools=[peek])
        task = Task(id="t1", title="Work", description="Find it.", assignee="alice")
        result = await orchestrator.run_tasks([task])
        view = load_run_view(ledger, result.run_id)
    assert view.verified, view.findings
    (t1,) = view.tasks
    subjects = [c.call.subject for c in t1.calls]
    assert subjects.count("task:t1") == 3
    assert any(s.startswith("delegation:") for s in subjects)  # bob's calls, under t1
    assert [c.call.subject for c in view.coordinator_calls] == ["synthesis"]
    names = sorted((t.name, t.agent, t.is_error) for t in t1.tool_calls)
    assert names == [
        ("delegate", "alice", False),
        ("delegate", "bob", True),
        ("peek", "alice", False),
    ]
    last = t1.calls[subjects.index("task:t1", 2)]
    assert "tool" in {s.css for m in last.messages for s in m.segments}

    page = render_run_page(view)
    start = page.index('<article class="detail" id="task-0"')
    panel = page[start : page.index("</article>", start)]
    assert panel.count('<section class="tool-call') == 3
    assert '<section class="tool-call failed">' in panel  # the refused delegation
    assert "delegation chain:" in panel and "Ask &lt;b&gt;." in panel
    assert 'class="seg k-tool"' in panel
    assert '<article class="detail" id="task-coordinator" hidden>' in page


def _spawn(child_id: str) -> dict[str, str]:
    return {"child_id": child_id, "agent": "helper", "goal": "g", "parent_agent": "a"}


def test_children_clarifications_and_delegations_belong_to_their_task():
    from datetime import UTC, datetime

    from clearance._state.ledger import EventRecord, ToolCallRecord
    from clearance._view.model import _Owners

    now = datetime.now(UTC)
    spawn = EventRecord(event_id="e1", run_id="r", kind="spawn", subject="task:p",
                        data=_spawn("p.1"), created_at=now)  # fmt: skip
    grandchild = EventRecord(event_id="e2", run_id="r", kind="spawn", subject="child:p.1",
                             data=_spawn("p.1.2"), created_at=now)  # fmt: skip
    tool = ToolCallRecord(tool_call_id="tc1", run_id="r", subject="child:p.1.2", agent="a",
                          step=1, name="delegate", arguments={}, result="", is_error=False,
                          store_reads=[], chain=None, created_at=now)  # fmt: skip
    owners = _Owners([tool], [spawn, grandchild])
    assert owners.task_of("child:p.1") == "p"
    assert owners.task_of("child:p.1.2") == "p"
    assert owners.task_of("delegation:tc1") == "p"
    assert owners.task_of("isolated:q") == "q" and owners.task_of("clarification:q") == "q"
    assert owners.task_of("synthesis") is None and owners.task_of("child:unknown") is None
    loop = EventRecord(event_id="e3", run_id="r", kind="spawn", subject="child:x",
                       data=_spawn("x"), created_at=now)  # fmt: skip
    assert _Owners([], [loop]).task_of("child:x") is None  # a forged cycle ends
