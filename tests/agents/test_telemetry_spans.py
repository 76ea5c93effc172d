"""OpenTelemetry: one trace per run under an ``invoke_workflow`` root, ``execute_tool`` spans."""

import asyncio
import json
import sys
from pathlib import Path

import pytest

from clearance import (
    Agent,
    Orchestrator,
    PlanError,
    RunOptions,
    Task,
    Team,
)
from clearance._agents import telemetry
from clearance._agents.telemetry import span_id, span_ref, span_task_id
from clearance._agents.telemetry_spans import NO_TOOL_SPAN, tool_span
from clearance.models._base import ToolCall
from clearance.testing import FunctionModel

trace = pytest.importorskip("opentelemetry.trace")

TEAM = Team(
    agents=(
        Agent(name="alice", instructions="You are Alice.", tools=("lookup", "explode"),
              can_delegate_to=("bob",)),
        Agent(name="bob", instructions="You are Bob."),
    ),
    coordinator=Agent(name="lead", instructions="You lead."),
    name="crew",
)  # fmt: skip


def lookup(term: str) -> str:
    """Look a term up."""
    return f"LOOKED-UP {term}"


def explode(term: str) -> str:
    """Fail."""
    raise ValueError(f"EXPLODED {term}")


def subject(request):
    return request.prompt.manifest.subject


def tool_results(request):
    return "## Results of your tool calls" in request.prompt.messages[-1].content


def alice_uses_tools(request):
    """Task a: look up, delegate to bob, then answer; every other prompt is answered."""
    s = subject(request)
    if s == "task:a" and not tool_results(request):
        return [
            ToolCall(id="m1", name="lookup", arguments={"term": "ARG-SECRET"}),
            ToolCall(id="m2", name="delegate", arguments={"agent": "bob", "task": "Help."}),
        ]
    return "SYNTHESIS" if s == "synthesis" else f"RESULT {s}"


def by_id(finished):
    return {s.context.span_id: s for s in finished}


def parent(span, spans_by_id):
    return spans_by_id[span.parent.span_id] if span.parent is not None else None


def named(finished, name):
    return [s for s in finished if s.name == name]


async def run(ledger, answer, tasks, **options):
    orch = Orchestrator(
        TEAM, model=FunctionModel(answer), ledger=ledger, tools=[lookup, explode],
        options=RunOptions(**options),
    )  # fmt: skip
    return await orch.run_tasks(tasks)


TWO_TASKS = [
    Task(id="a", title="A", description="Do a.", assignee="alice"),
    Task(id="b", title="B", description="Do b.", assignee="bob", depends_on=("a",)),
]


async def test_a_run_is_one_trace_under_one_invoke_workflow_root(ledger, spans):
    result = await run(ledger, alice_uses_tools, TWO_TASKS)
    assert result.status == "completed", result.error
    finished = spans()
    assert len({s.context.trace_id for s in finished}) == 1  # one trace for the whole run
    (root,) = [s for s in finished if s.parent is None]
    assert root.name == "invoke_workflow crew"
    assert root.kind is trace.SpanKind.INTERNAL
    assert dict(root.attributes) == {
        "gen_ai.operation.name": "invoke_workflow",
        "gen_ai.workflow.name": "crew",
        "gen_ai.agent.name": "crew",
        "clearance.run_id": result.run_id,
        "clearance.resumed": False,
        "clearance.run.status": "completed",
        "clearance.tasks.completed": 2,
        "clearance.tasks.failed": 0,
        "clearance.tasks.skipped": 0,
        "clearance.tasks.total": 2,
    }
    ids = by_id(finished)
    (alice,) = named(finished, "invoke_agent alice")
    (task_b,) = [
        s for s in named(finished, "invoke_agent bob") if "clearance.task_id" in s.attributes
    ]
    assert parent(alice, ids) is root and parent(task_b, ids) is root
    chats = [s for s in finished if s.name.startswith("chat ")]
    by_subject = {}
    for span in chats:
        by_subject.setdefault(span.attributes["clearance.subject"], []).append(span)
    assert {parent(s, ids) for s in by_subject[span_ref("task:a")]} == {alice}
    assert [parent(s, ids) for s in by_subject["synthesis"]] == [root]

    recorded = {c.name: c.tool_call_id for c in ledger.tool_calls(result.run_id)}
    (lookup_span,) = named(finished, "execute_tool lookup")
    assert parent(lookup_span, ids) is alice
    assert lookup_span.attributes["gen_ai.operation.name"] == "execute_tool"
    assert lookup_span.attributes["gen_ai.tool.name"] == "lookup"
    assert lookup_span.attributes["gen_ai.tool.type"] == "function"
    assert lookup_span.attributes["gen_ai.tool.call.id"] == span_id(recorded["lookup"])
    assert "error.type" not in lookup_span.attributes

    # The delegate works under its call's span: execute_tool delegate > invoke_agent bob > chat.
    (delegate_span,) = named(finished, "execute_tool delegate")
    assert parent(delegate_span, ids) is alice
    (delegated,) = [s for s in named(finished, "invoke_agent bob") if s is not task_b]
    assert parent(delegated, ids) is delegate_span
    delegation = span_ref(f"delegation:{recorded['delegate']}")
    assert delegated.attributes["clearance.subject"] == delegation
    assert [parent(s, ids) for s in by_subject[delegation]] == [delegated]


async def test_tool_arguments_results_and_model_chosen_names_stay_off_by_default(
    ledger, spans, monkeypatch
):
    monkeypatch.delenv(telemetry.CAPTURE_CONTENT_ENV, raising=False)

    def answer(request):
        if subject(request) == "task:a" and not tool_results(request):
            return [ToolCall(id="m1", name="lookup", arguments={"term": "ARG-SECRET"}),
                    ToolCall(id="m2", name="exfil-4111", arguments={})]  # fmt: skip
        return "done"

    result = await run(ledger, answer, TWO_TASKS[:1])
    assert result.status == "completed", result.error
    finished = spans()
    tools = [s for s in finished if s.name.startswith("execute_tool ")]
    assert len(tools) == 2
    for span in tools:
        text = json.dumps(dict(span.attributes)) + span.name
        assert "ARG-SECRET" not in text and "LOOKED-UP" not in text and "4111" not in text
        assert "gen_ai.tool.call.arguments" not in span.attributes
        assert "gen_ai.tool.call.result" not in span.attributes
    (invented,) = [s for s in tools if s.name != "execute_tool lookup"]
    assert invented.name == f"execute_tool {span_id('exfil-4111')}"
    assert invented.attributes["error.type"] == "tool_error"  # an unknown tool: an error
    assert invented.status.status_code is trace.StatusCode.ERROR


async def test_tool_content_is_captured_when_the_user_opts_in(ledger, spans, monkeypatch):
    monkeypatch.setenv(telemetry.CAPTURE_CONTENT_ENV, "1")
    result = await run(ledger, alice_uses_tools, TWO_TASKS)
    assert result.status == "completed", result.error
    (span,) = named(spans(), "execute_tool lookup")
    (call,) = [c for c in ledger.tool_calls(result.run_id) if c.name == "lookup"]
    assert span.attributes["gen_ai.tool.call.id"] == call.tool_call_id
    assert json.loads(span.attributes["gen_ai.tool.call.arguments"]) == {"term": "ARG-SECRET"}
    assert span.attributes["gen_ai.tool.call.result"] == "LOOKED-UP ARG-SECRET"


async def test_a_failing_tool_sets_its_exception_class_and_no_message(ledger, spans):
    def answer(request):
        if subject(request) == "task:a" and not tool_results(request):
            return ToolCall(id="m1", name="explode", arguments={"term": "x"})
        return "done"

    result = await run(ledger, answer, TWO_TASKS[:1])
    assert result.status == "completed", result.error  # the model got the error as text
    (span,) = named(spans(), "execute_tool explode")
    assert span.attributes["error.type"] == "ValueError"
    assert span.status.status_code is trace.StatusCode.ERROR
    assert "EXPLODED" not in json.dumps(dict(span.attributes)) + (span.status.description or "")
    assert not span.events


async def test_a_failed_run_sets_error_type_and_counts_on_its_root(ledger, spans):
    def answer(request):
        if subject(request) == "task:a":
            raise ValueError("BOOM")
        return "done"

    tasks = [*TWO_TASKS, Task(id="c", title="C", description="Do c.", assignee="bob")]
    result = await run(ledger, answer, tasks)
    assert result.status == "failed"
    (root,) = [s for s in spans() if s.parent is None]
    assert root.attributes["error.type"] == "tasks_failed"
    assert root.status.status_code is trace.StatusCode.ERROR
    counts = {k: v for k, v in root.attributes.items() if k.startswith("clearance.tasks.")}
    assert counts == {
        "clearance.tasks.completed": 1,
        "clearance.tasks.failed": 1,
        "clearance.tasks.skipped": 1,
        "clearance.tasks.total": 3,
    }


async def test_a_planned_run_is_one_trace_with_its_plan_under_the_root(ledger, spans):
    plan = {"tasks": [{"id": "p1", "title": "P", "description": "D.", "assignee": "bob",
                       "depends_on": []}]}  # fmt: skip

    def answer(request):
        return json.dumps(plan) if subject(request).startswith("plan") else "done"

    orch = Orchestrator(TEAM, model=FunctionModel(answer), ledger=ledger, tools=[lookup, explode])
    result = await orch.run_team("GOAL")
    assert result.status == "completed", result.error
    finished = spans()
    (root,) = [s for s in finished if s.parent is None]  # `plan` inside `run_team`: no 2nd root
    assert root.name == "invoke_workflow crew"
    assert root.attributes["clearance.run_id"] == result.run_id
    assert len({s.context.trace_id for s in finished}) == 1
    (planning,) = [
        s for s in finished if s.attributes.get("clearance.subject", "").startswith("plan")
    ]
    assert planning.parent.span_id == root.context.span_id


async def test_an_exception_leaving_the_run_marks_the_root(ledger, spans):
    orch = Orchestrator(TEAM, model=FunctionModel(lambda r: "not a plan"), ledger=ledger,
                        tools=[lookup, explode])  # fmt: skip
    with pytest.raises(PlanError):
        await orch.run_team("GOAL")
    (root,) = [s for s in spans() if s.parent is None]
    assert root.attributes["error.type"] == "PlanError"
    assert root.status.status_code is trace.StatusCode.ERROR
    assert root.attributes["clearance.run_id"].startswith("run")


async def test_a_resumed_run_is_a_new_trace_naming_the_same_run(ledger, spans):
    blocked = asyncio.Event()

    async def stuck(request):
        if subject(request) == "task:b":
            blocked.set()
            await asyncio.sleep(3600)
        return "done"

    orch = Orchestrator(TEAM, model=FunctionModel(stuck), ledger=ledger, tools=[lookup, explode])
    running = asyncio.create_task(orch.run_tasks(TWO_TASKS))
    await blocked.wait()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    (first,) = [s for s in spans() if s.parent is None]
    assert first.attributes["error.type"] == "CancelledError"
    run_id = first.attributes["clearance.run_id"]

    again = Orchestrator.from_run(run_id, ledger=ledger, model=FunctionModel(lambda r: "done"),
                                  tools={"lookup": lookup, "explode": explode})  # fmt: skip
    result = await again.resume(run_id)
    assert result.status == "completed", result.error
    roots = [s for s in spans() if s.parent is None]
    assert len(roots) == 2
    second = roots[1]
    assert second.context.trace_id != first.context.trace_id
    assert second.attributes["clearance.run_id"] == run_id
    assert second.attributes["clearance.resumed"] is True
    resumed_spans = [s for s in spans() if s.context.trace_id == second.context.trace_id]
    assert {s.attributes.get("clearance.task_id") for s in resumed_spans} >= {span_task_id("b")}


SPAWNERS = Team(
    agents=(
        Agent(name="lead", instructions="You lead.", can_spawn=("helper",)),
        Agent(name="helper", instructions="You help."),
    ),
    coordinator=Agent(name="editor", instructions="You edit."),
    name="spawners",
)


async def test_spawned_children_are_under_the_callers_agent_span(ledger, spans, tmp_path):
    def answer(request):
        s = subject(request)
        if s == "task:p" and not tool_results(request):
            return [ToolCall(id=f"s{k}", name="spawn", arguments={"agent": "helper",
                                                                  "goal": f"goal {k}"})
                    for k in range(2)]  # fmt: skip
        return "done"

    orch = Orchestrator(SPAWNERS, model=FunctionModel(answer), ledger=ledger,
                        options=RunOptions(workspace_root=tmp_path / "ws"))  # fmt: skip
    result = await orch.run_tasks([Task(id="p", title="P", description="p", assignee="lead")])
    assert result.status == "completed", result.error
    finished = spans()
    assert len({s.context.trace_id for s in finished}) == 1
    ids = by_id(finished)
    (lead,) = named(finished, "invoke_agent lead")
    spawns = named(finished, "execute_tool spawn")
    children = named(finished, "invoke_agent helper")
    assert len(spawns) == 2 and len(children) == 2
    assert {parent(s, ids) for s in spawns + children} == {lead}
    recorded = {c.tool_call_id for c in ledger.tool_calls(result.run_id) if c.name == "spawn"}
    assert {s.attributes["gen_ai.tool.call.id"] for s in spawns} == set(map(span_id, recorded))
    for child in children:
        assert child.attributes["clearance.subject"].startswith("child:h")
        (call,) = [s for s in finished if s.name.startswith("chat ") and parent(s, ids) is child]
        assert call.attributes["clearance.subject"] == child.attributes["clearance.subject"]


def test_without_tracing_a_tool_call_gets_the_shared_no_op():
    call = ToolCall(id="x", name="lookup", arguments={})
    assert tool_span(False, call, "tool-1", ("lookup",)) is NO_TOOL_SPAN
    with NO_TOOL_SPAN as outcome:
        outcome(None)  # records nothing


async def test_store_and_mcp_tools_have_their_tool_types(ledger, spans, tmp_path):
    pytest.importorskip("mcp")
    from clearance import ContextStore
    from clearance._agents.mcp import load_mcp_tools
    from clearance._core.mcp_spec import McpServerSpec, McpToolRef

    server = Path(__file__).with_name("mcp_server.py")
    spec = McpServerSpec(command=[sys.executable, str(server), "stdio"], env={})
    mcp_tools = await load_mcp_tools({"docs": spec}, [McpToolRef("docs", "lookup")])
    team = Team(
        agents=(Agent(name="reader", instructions="You read.", store_grants={"notes": "read"},
                      tools=("store_get", "mcp__docs__lookup")),),
        name="readers",
    )  # fmt: skip

    def answer(request):
        if subject(request) == "task:r" and not tool_results(request):
            read = {"namespace": "notes", "key": "k"}
            return [
                ToolCall(id="m1", name="store_get", arguments=read),
                ToolCall(id="m2", name="mcp__docs__lookup", arguments={"term": "x"}),
            ]
        return "done"

    with ContextStore(f"sqlite:///{tmp_path / 'store.db'}") as store:
        orch = Orchestrator(team, model=FunctionModel(answer), ledger=ledger, store=store,
                            tools=mcp_tools)  # fmt: skip
        result = await orch.run_tasks([Task(id="r", title="R", description="r", assignee="reader")])
    assert result.status == "completed", result.error
    finished = spans()
    (store_span,) = named(finished, "execute_tool store_get")
    (mcp_span,) = named(finished, "execute_tool mcp__docs__lookup")
    assert store_span.attributes["gen_ai.tool.type"] == "datastore"
    assert mcp_span.attributes["gen_ai.tool.type"] == "extension"
    assert "error.type" not in mcp_span.attributes


async def test_each_chat_turn_is_a_trace_of_its_own_naming_the_conversation(spans):
    from clearance import AgentChat

    chat = AgentChat(agent=Agent(name="pal", instructions="You chat."),
                     model=FunctionModel(lambda r: "hello"), context_window=4096)  # fmt: skip
    assert await chat.say("hi") == "hello"
    assert await chat.say("again") == "hello"
    finished = spans()
    turns = named(finished, "invoke_agent pal")
    assert len(turns) == 2 and all(t.parent is None for t in turns)
    assert turns[0].context.trace_id != turns[1].context.trace_id
    for turn in turns:
        assert turn.attributes["gen_ai.conversation.id"] == chat.run_id
        (call,) = [s for s in finished if s.parent and s.parent.span_id == turn.context.span_id]
        assert call.name.startswith("chat ")
