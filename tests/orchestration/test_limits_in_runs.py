"""Each agent limit, breached in a run: the task fails naming the limit, and it is on record."""

import pytest

from clearance import Agent, AgentLimits, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._core.spec import FanOut
from clearance.models._base import ToolCall
from clearance.testing import FunctionModel

COORD = Agent(name="editor", instructions="You edit.")


def subject(request):
    return request.prompt.manifest.subject


@pytest.fixture
def ledger(tmp_path):
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        yield ledger


async def run(team, tasks, model, ledger, tmp_path):
    orchestrator = Orchestrator(
        team, model=model, ledger=ledger, options=RunOptions(workspace_root=tmp_path / "ws")
    )
    return await orchestrator.run_tasks(tasks)


async def test_max_tokens_per_step_fails_the_task_and_caps_what_is_asked(ledger, tmp_path):
    team = Team(
        agents=(Agent(name="a", instructions="x", limits=AgentLimits(max_tokens_per_step=5)),),
        coordinator=COORD,
    )
    model = FunctionModel(lambda r: "S" if subject(r) == "synthesis" else "word " * 40)
    result = await run(team, [Task(id="t", title="T", description="d", assignee="a")], model,
                       ledger, tmp_path)  # fmt: skip
    assert "max_tokens_per_step exceeded" in (result.tasks["t"].error or "")
    assert model.requests[0].max_tokens == 5
    (call,) = [c for c in ledger.calls(result.run_id) if c.subject == "task:t"][:1]
    assert "max_tokens_per_step" in (call.error or "")


async def test_max_model_calls_bounds_a_delegation_fan_out(ledger, tmp_path):
    """A model that answers every turn with 25 delegate calls cannot make thousands of calls."""
    team = Team(
        agents=(
            Agent(
                name="boss",
                instructions="x",
                can_delegate_to=("worker",),
                limits=AgentLimits(max_model_calls=10, max_steps=50),
            ),
            Agent(name="worker", instructions="y"),
        ),
        coordinator=COORD,
    )
    counter = iter(range(10**6))

    def answer(request):
        s = subject(request)
        if s == "task:t":
            return [
                ToolCall(id=f"d{k}", name="delegate",
                         arguments={"agent": "worker", "task": f"part {next(counter)}"})
                for k in range(25)
            ]  # fmt: skip
        return "S" if s == "synthesis" else "done"

    model = FunctionModel(answer)
    result = await run(team, [Task(id="t", title="T", description="d", assignee="boss")], model,
                       ledger, tmp_path)  # fmt: skip
    assert "max_model_calls exceeded" in (result.tasks["t"].error or "")
    task_calls = [r for r in model.requests if subject(r) != "synthesis"]
    assert len(task_calls) == 10


async def test_max_children_refuses_the_spawn_past_the_cap(ledger, tmp_path):
    team = Team(
        agents=(
            Agent(name="lead", instructions="x", can_spawn=("kid",),
                  limits=AgentLimits(max_children=2, max_steps=5)),
            Agent(name="kid", instructions="y"),
        ),
        coordinator=COORD,
    )  # fmt: skip

    def answer(request):
        s = subject(request)
        if s == "task:t":
            return [ToolCall(id=f"s{k}", name="spawn", arguments={"agent": "kid", "goal": f"g{k}"})
                    for k in range(3)]  # fmt: skip
        return "S" if s == "synthesis" else "kid answer"

    result = await run(team, [Task(id="t", title="T", description="d", assignee="lead")],
                       FunctionModel(answer), ledger, tmp_path)  # fmt: skip
    assert "max_children exceeded" in (result.tasks["t"].error or "")
    breaches = [e for e in ledger.events(result.run_id) if e.kind == "limit_exceeded"]
    assert [b.data["limit"] for b in breaches] == ["max_children"]
    assert not [e for e in ledger.events(result.run_id) if e.kind == "spawn"]


async def test_max_output_size_bytes_fails_the_child_that_writes_too_much(ledger, tmp_path):
    team = Team(
        agents=(
            Agent(name="lead", instructions="x", can_spawn=("kid",)),
            Agent(name="kid", instructions="y", tools=("write_output",),
                  limits=AgentLimits(max_output_size_bytes=10)),
        ),
        coordinator=COORD,
    )  # fmt: skip

    def answer(request):
        s = subject(request)
        if s.startswith("child:"):
            return ToolCall(id="w", name="write_output",
                            arguments={"name": "big.txt", "content": "x" * 100})  # fmt: skip
        return "S" if s == "synthesis" else "lead answer"

    tasks = [Task(id="t", title="T", description="d", assignee="lead",
                  fan_out=FanOut(agent="kid", goals=("write",)))]  # fmt: skip
    result = await run(team, tasks, FunctionModel(answer), ledger, tmp_path)
    (child,) = [e for e in ledger.events(result.run_id) if e.kind == "child"]
    assert child.data["status"] == "failed"
    assert "max_output_size_bytes" in child.data["error"]
    breaches = [e for e in ledger.events(result.run_id) if e.kind == "limit_exceeded"]
    assert [b.data["limit"] for b in breaches] == ["max_output_size_bytes"]
    assert not list((tmp_path / "ws" / result.run_id / "t.1" / "outputs").iterdir())


def write(k):
    return ToolCall(id=f"c{k}", name="write_output", arguments={"name": f"{k}.txt", "content": "x"})


async def test_max_tool_calls_per_step_is_on_record_as_a_breach_of_the_task(ledger, tmp_path):
    """The task fails naming the limit, no call runs, and one ``limit_exceeded`` event says so."""
    team = Team(
        agents=(Agent(name="a", instructions="x", tools=("write_output",),
                      limits=AgentLimits(max_tool_calls_per_step=2)),),
        coordinator=COORD,
    )  # fmt: skip

    def answer(request):
        if subject(request) == "synthesis":
            return "S"
        return [write(k) for k in range(5)]

    result = await run(team, [Task(id="t", title="T", description="d", assignee="a")],
                       FunctionModel(answer), ledger, tmp_path)  # fmt: skip
    assert "max_tool_calls_per_step exceeded: 5 > 2" in (result.tasks["t"].error or "")
    assert ledger.tool_calls(result.run_id) == []
    breaches = [e for e in ledger.events(result.run_id) if e.kind == "limit_exceeded"]
    assert [(b.subject, b.data["limit"], b.data["value"], b.data["maximum"]) for b in breaches] == [
        ("task:t", "max_tool_calls_per_step", 5, 2)
    ]


async def test_max_steps_is_on_record_once_as_a_breach_of_the_task(ledger, tmp_path):
    team = Team(
        agents=(Agent(name="a", instructions="x", tools=("write_output",),
                      limits=AgentLimits(max_steps=3)),),
        coordinator=COORD,
    )  # fmt: skip
    counter = iter(range(10**6))

    def answer(request):
        if subject(request) == "synthesis":
            return "S"
        return write(next(counter))

    result = await run(team, [Task(id="t", title="T", description="d", assignee="a")],
                       FunctionModel(answer), ledger, tmp_path)  # fmt: skip
    assert "max_steps exceeded" in (result.tasks["t"].error or "")
    breaches = [e for e in ledger.events(result.run_id) if e.kind == "limit_exceeded"]
    assert [(b.subject, b.data["limit"], b.data["maximum"]) for b in breaches] == [
        ("task:t", "max_steps", 3)
    ]
