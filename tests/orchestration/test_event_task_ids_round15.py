"""Every streamed call event names the task its call serves, on every call path.

A call whose subject is not ``task:<id>`` (an isolated dispatch, a clarification, a review,
a delegate, a spawned child, a delegate of a delegate or of a child) still serves exactly
one task: its ``model_call``, ``text`` and ``tool_call`` events carry that task's id, with
the call's own subject unchanged. The plan and the synthesis serve none.
"""

from __future__ import annotations

import json

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._agents.caller import CallBudget, ModelCaller, ServingListener
from clearance._core.prompt import ChatMessage, ContextManifest, Prompt
from clearance._core.review import Review
from clearance._core.vocabulary import RunEventKind
from clearance._orchestration.result import RunEvent
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel, ScriptedModel

CALL_EVENTS = {RunEventKind.MODEL_CALL, RunEventKind.TEXT, RunEventKind.TOOL_CALL}

TEAM = Team(
    agents=(
        Agent(name="lead", instructions="You lead.", can_delegate_to=("aide",),
              can_spawn=("kid", "scout")),
        Agent(name="aide", instructions="You assist.", can_delegate_to=("deep",)),
        Agent(name="deep", instructions="You dig."),
        Agent(name="kid", instructions="You help.", can_delegate_to=("deep",)),
        Agent(name="scout", instructions="You look."),
        Agent(name="writer", instructions="You write."),
        Agent(name="critic", instructions="You review."),
    ),
    coordinator=Agent(name="editor", instructions="You edit."),
)  # fmt: skip

TASKS = [
    Task(id="lead-task", title="Lead", description="Lead the work.", assignee="lead"),
    Task(id="iso", title="Iso", description="Do it alone.", assignee="writer", mode="isolated"),
    Task(id="rev", title="Rev", description="Write the draft.", assignee="writer",
         review=Review(by=("critic",), rounds=1)),
]  # fmt: skip


def tools_seen(request: ModelRequest) -> int:
    return sum(o.startswith("tool:") for o in request.prompt.manifest.origins)


def delegate(call_id: str, to: str) -> ToolCall:
    return ToolCall(id=call_id, name="delegate", arguments={"agent": to, "task": "Dig in."})


def spawn(call_id: str, agent: str) -> ToolCall:
    return ToolCall(id=call_id, name="spawn", arguments={"agent": agent, "goal": "Help."})


def answer(request: ModelRequest) -> str | ToolCall | list[ToolCall]:
    manifest = request.prompt.manifest
    subject, agent, seen = manifest.subject, manifest.agent, tools_seen(request)
    if subject == "synthesis":
        return "the synthesis of it all"
    if subject == "isolated:iso":
        if "Clarification 1" not in request.prompt.messages[-1].content:
            return "I need the purpose.\nSTATUS: needs_context\nQUESTION: What is it for?"
        return "iso result words\nSTATUS: done"
    if subject == "clarification:iso":
        return "it is a demo"
    if subject.startswith("review:"):
        return json.dumps({"verdict": "accept", "findings": "fine"})
    if subject == "task:rev":
        return "the draft text"
    if agent == "lead":
        if seen == 0:
            return delegate("d1", "aide")
        if seen == 1:
            return [spawn("s1", "kid"), spawn("s2", "scout")]
        return "lead done now"
    if agent == "aide":
        return delegate("d2", "deep") if seen == 0 else "aide done now"
    if agent == "kid":
        return delegate("d3", "deep") if seen == 0 else "kid done now"
    if agent == "deep":
        return "deep done now"
    if agent == "scout":
        return "scout done now"
    raise AssertionError(f"unexpected call {subject} by {agent}")


def served(subject: str) -> str | None:
    """The task each subject of this run serves (what the events must say)."""
    if subject == "synthesis":
        return None
    if subject.startswith(("delegation:", "child:")):
        return "lead-task"  # aide, deep (aide's delegate and kid's), kid and scout
    kind, _, ref = subject.partition(":")
    return ref.split("/")[0] if kind == "review" else ref


def by_agent(model: FunctionModel, prefix: str) -> list[tuple[str, str]]:
    """``(agent, subject)`` of each distinct call subject starting with ``prefix``."""
    manifests = [r.prompt.manifest for r in model.requests]
    return sorted({(m.agent, m.subject) for m in manifests if m.subject.startswith(prefix)})


async def test_every_call_event_names_the_task_it_serves(tmp_path):
    model = FunctionModel(answer)
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orchestrator = Orchestrator(
            TEAM, model=model, ledger=ledger, options=RunOptions(workspace_root=tmp_path / "ws")
        )
        async with orchestrator.stream(TASKS, goal="Report.") as events:
            seen = [event async for event in events]
        result = events.result
    assert result.status == "completed", result.error
    delegations, children = by_agent(model, "delegation:"), by_agent(model, "child:")
    # aide (the lead's delegate), deep twice (aide's delegate, and kid's); kid and scout.
    assert [agent for agent, _ in delegations] == ["aide", "deep", "deep"]
    assert [agent for agent, _ in children] == ["kid", "scout"]
    calls = [e for e in seen if e.kind in CALL_EVENTS]
    subjects = {e.subject for e in calls}
    paths = {s for _, s in delegations + children} | {
        "task:lead-task", "isolated:iso", "clarification:iso", "review:rev/1/1", "task:rev",
    }  # fmt: skip
    assert subjects == paths | {"synthesis"}
    wrong = [(e.kind, e.subject, e.task_id) for e in calls if e.task_id != served(e.subject or "")]
    assert wrong == []
    # Each path's events: its attempt and its text; and the tools a delegate or child asked for.
    heard = {(e.subject, e.kind) for e in calls}
    for subject in paths:
        assert {(subject, RunEventKind.MODEL_CALL), (subject, RunEventKind.TEXT)} <= heard
    asked = [(e.subject, e.detail, e.task_id) for e in calls if e.kind == RunEventKind.TOOL_CALL
             and not (e.subject or "").startswith("task:")]  # fmt: skip
    assert sorted(asked) == sorted([
        (delegations[0][1], "delegate", "lead-task"),  # aide asks for deep
        (children[0][1], "delegate", "lead-task"),  # kid asks for deep
    ])  # fmt: skip


async def test_on_event_gets_the_same_task_ids(tmp_path):
    """The plain callback (``stream_text`` with ``on_event``) hears the same task ids."""
    from clearance import RunServices

    got: list[RunEvent] = []
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orchestrator = Orchestrator(
            TEAM, model=FunctionModel(answer), ledger=ledger,
            options=RunOptions(workspace_root=tmp_path / "ws", stream_text=True),
            services=RunServices(on_event=got.append),
        )  # fmt: skip
        result = await orchestrator.run_tasks(TASKS[:1], goal="Report.")
    assert result.status == "completed", result.error
    calls = [e for e in got if e.kind in CALL_EVENTS and e.subject != "synthesis"]
    assert len({e.subject for e in calls}) == 6  # the task, 3 delegations, 2 children
    assert {e.task_id for e in calls} == {"lead-task"}


def prompt() -> Prompt:
    return Prompt(
        messages=(ChatMessage(role="system", content="s"), ChatMessage(role="user", content="u")),
        manifest=ContextManifest(
            subject="test", agent="w", items=(), total_tokens=0, prompt_sha256="0"
        ),
    )


async def test_the_caller_tells_a_serving_listener_the_budgets_task():
    """The task comes from the call's budget, a nested one's root; subject left as it is."""
    heard: list[tuple[str, str, str | None, str]] = []
    caller = ModelCaller(listener=ServingListener(lambda *event: heard.append(event)))
    task = CallBudget(None, subject="task:t1")
    delegate = CallBudget(None, subject="delegation:d1", within=task)
    nested = CallBudget(2, subject="delegation:d2", within=delegate)
    agent = Agent(name="w", instructions="i")
    model = ScriptedModel(["one two", ToolCall(id="x", name="f", arguments={}), "plan"])
    await caller.call(subject="delegation:d1", agent=agent, model=model, prompt=prompt(),
                      budget=delegate)  # fmt: skip
    await caller.call(subject="delegation:d2", agent=agent, model=model, prompt=prompt(),
                      budget=nested)  # fmt: skip
    await caller.call(subject="plan", agent=agent, model=model, prompt=prompt(),
                      budget=CallBudget(None, subject="plan"))  # fmt: skip
    assert heard == [
        ("model_call", "delegation:d1", "t1", "attempt 1"),
        ("text", "delegation:d1", "t1", "one "),
        ("text", "delegation:d1", "t1", "two"),
        ("model_call", "delegation:d2", "t1", "attempt 1"),
        ("tool_call", "delegation:d2", "t1", "f"),
        ("model_call", "plan", None, "attempt 1"),
        ("text", "plan", None, "plan"),
    ]
    assert (task.used, delegate.used, nested.used) == (2, 2, 1)


async def test_a_plain_listener_still_hears_three_values():
    heard: list[tuple[str, ...]] = []
    caller = ModelCaller(listener=lambda *event: heard.append(event))
    agent = Agent(name="w", instructions="i")
    await caller.call(subject="isolated:t", agent=agent, model=ScriptedModel(["hi"]),
                      prompt=prompt(), budget=CallBudget(None, subject="task:t"))  # fmt: skip
    assert heard == [("model_call", "isolated:t", "attempt 1"), ("text", "isolated:t", "hi")]
