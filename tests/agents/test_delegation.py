"""Delegation: immutable chains, refusals returned to the caller, fresh delegate context."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from clearance import Agent, Orchestrator, RunLedger, Task, TaskStatus, Team
from clearance._agents.delegation import DelegationChain
from clearance._context.verify import verify_run
from clearance._core.errors import ConfigError
from clearance.cli import app
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel

COORD = Agent(name="lead", instructions="You lead.")


# -- the chain ---------------------------------------------------------------------------


def test_add_step_returns_a_new_chain_and_leaves_the_original():
    chain = DelegationChain(origin="a")
    one = chain.add_step("a", "b", "task 1")
    two = one.add_step("b", "c", "task 2")
    assert chain.steps == () and chain.depth == 0
    assert one.depth == 1 and [s.to_agent for s in one.steps] == ["b"]
    assert two.agents == ("a", "b", "c")
    assert one.agents == ("a", "b")
    with pytest.raises(AttributeError):
        one.steps = ()  # type: ignore[misc]


def test_would_loop_and_max_depth():
    chain = DelegationChain().add_step("a", "b", "t")
    assert chain.would_loop("a") and chain.would_loop("b")
    assert not chain.would_loop("c")
    assert DelegationChain(origin="x").would_loop("x")
    assert not chain.is_max_depth()
    full = chain.add_step("b", "c", "t").add_step("c", "d", "t")
    assert full.is_max_depth() and full.max_depth == 3
    assert DelegationChain(max_depth=1).add_step("a", "b", "t").is_max_depth()
    with pytest.raises(ConfigError):
        DelegationChain(max_depth=0)
    assert full.to_dict()["steps"][2] == {"from": "c", "to": "d", "task": "t"}
    assert str(full) == "a -> b -> c -> d"


def test_agent_may_not_delegate_to_itself():
    with pytest.raises(ConfigError, match="itself"):
        Agent(name="a", instructions="A.", can_delegate_to=("a",))


# -- the delegate tool -------------------------------------------------------------------

A_TASK = "SECRET-TASK-TEXT-A: find the answer."
A_TOOL_RESULT = "A-PRIVATE-TOOL-RESULT"


def peek() -> str:
    """Look at something private."""
    return A_TOOL_RESULT


def tool_results(request: ModelRequest) -> list[str]:
    return [o for o in request.prompt.manifest.origins if o.startswith("tool:")]


def team_of(*agents: Agent) -> Team:
    return Team(agents=agents, coordinator=COORD)


def scripted(plans: dict[str, list[object]]):
    """Each agent answers step by step from its plan (step = tool results seen so far)."""

    def answer(request: ModelRequest):
        manifest = request.prompt.manifest
        if manifest.subject == "synthesis":
            return "SYNTH"
        plan = plans[manifest.agent]
        step = len(tool_results(request))
        return plan[min(step, len(plan) - 1)]

    return FunctionModel(answer)


def delegate(to: str, text: str) -> ToolCall:
    return ToolCall(id="d", name="delegate", arguments={"agent": to, "task": text})


async def run_alice(ledger, model, *agents):
    orch = Orchestrator(team_of(*agents), model=model, ledger=ledger, tools=[peek])
    task = Task(id="t1", title="Work", description=A_TASK, assignee="alice")
    result = await orch.run_tasks([task])
    assert result.tasks["t1"].status is TaskStatus.COMPLETED, result.tasks["t1"].error
    return result


def by_agent(model, name):
    return [r for r in model.requests if r.prompt.manifest.agent == name]


async def test_a_b_a_is_refused_and_the_reason_returned_to_the_caller(ledger):
    alice = Agent(name="alice", instructions="ALICE-INSTRUCTIONS", tools=("peek",),
                  can_delegate_to=("bob",))  # fmt: skip
    bob = Agent(name="bob", instructions="You are Bob.", can_delegate_to=("alice",))
    model = scripted(
        {
            "alice": [ToolCall(id="p", name="peek", arguments={}),
                      delegate("bob", "Summarize the weather."), "ALICE-FINAL"],
            "bob": [delegate("alice", "Do it yourself."), "BOB-DONE"],
        }
    )  # fmt: skip
    result = await run_alice(ledger, model, alice, bob)
    assert result.tasks["t1"].result == "ALICE-FINAL"

    records = {r.name + ":" + r.agent: r for r in ledger.tool_calls(result.run_id)}
    refused = records["delegate:bob"]
    assert refused.is_error
    assert "delegation refused" in refused.result
    assert "'alice' is already in the delegation chain alice -> bob" in refused.result
    assert records["delegate:alice"].result == "BOB-DONE"
    assert records["delegate:alice"].chain["steps"] == [
        {"from": "alice", "to": "bob", "task": "Summarize the weather."}
    ]
    # Bob's second prompt shows him the refusal.
    assert "already in the delegation chain" in by_agent(model, "bob")[1].prompt.text

    # The delegate's prompt holds the delegated task only: nothing of Alice's conversation.
    for request in by_agent(model, "bob"):
        text = request.prompt.text
        assert "Summarize the weather." in text
        for trace in (A_TASK, A_TOOL_RESULT, "ALICE-INSTRUCTIONS", "peek", "t1"):
            assert trace not in text
        assert request.prompt.manifest.subject.startswith("delegation:")
        origins = request.prompt.manifest.origins
        # The delegate's own tools come first (its byte-stable prefix), then the task text.
        rest = [o for o in origins if not o.startswith("tool_spec:")]
        assert origins[0] == "instructions" and rest[1].startswith("delegation:")
        assert not any(o.startswith(("task:", "task_result:", "message:")) for o in origins)
    assert verify_run(ledger, result.run_id).ok


async def test_a_b_c_a_is_refused(ledger):
    alice = Agent(name="alice", instructions="A.", can_delegate_to=("bob",))
    bob = Agent(name="bob", instructions="B.", can_delegate_to=("carol",))
    carol = Agent(name="carol", instructions="C.", can_delegate_to=("alice",))
    model = scripted(
        {
            "alice": [delegate("bob", "to bob"), "A-FINAL"],
            "bob": [delegate("carol", "to carol"), "B-DONE"],
            "carol": [delegate("alice", "back to alice"), "C-DONE"],
        }
    )
    result = await run_alice(ledger, model, alice, bob, carol)
    records = ledger.tool_calls(result.run_id)
    carols = [r for r in records if r.agent == "carol"]
    assert len(carols) == 1 and carols[0].is_error
    assert "alice -> bob -> carol" in carols[0].result
    assert [r.result for r in records if r.agent == "bob"] == ["C-DONE"]
    assert result.tasks["t1"].result == "A-FINAL"
    # Carol never ran Alice: Alice's prompts are her task's only.
    assert {r.prompt.manifest.subject for r in by_agent(model, "alice")} == {"task:t1"}
    assert verify_run(ledger, result.run_id).ok


async def test_depth_four_is_refused(ledger):
    names = ["alice", "bob", "carol", "dave", "erin"]
    agents = [
        Agent(name=n, instructions=f"{n}.", can_delegate_to=(names[i + 1],) if i < 4 else ())
        for i, n in enumerate(names)
    ]
    model = scripted(
        {n: [delegate(names[i + 1], f"to {names[i + 1]}"), f"{n}-DONE"] for i, n in
         enumerate(names[:4])} | {"erin": ["erin-DONE"]}
    )  # fmt: skip
    result = await run_alice(ledger, model, *agents)
    records = ledger.tool_calls(result.run_id)
    daves = [r for r in records if r.agent == "dave"]
    assert len(daves) == 1 and daves[0].is_error
    assert "maximum depth of 3" in daves[0].result
    assert by_agent(model, "erin") == []
    chains = [r.chain for r in records if r.chain]
    assert max(len(c["steps"]) for c in chains) == 3
    assert verify_run(ledger, result.run_id).ok


async def test_unknown_and_undeclared_targets_are_refused(ledger):
    # The team refuses a can_delegate_to naming no agent; a model may still name one.
    alice = Agent(name="alice", instructions="A.", can_delegate_to=("bob",))
    bob = Agent(name="bob", instructions="B.")
    carol = Agent(name="carol", instructions="C.")
    model = scripted(
        {
            "alice": [delegate("ghost", "x"), delegate("carol", "x"),
                      ToolCall(id="z", name="delegate", arguments={"agent": "bob"}), "A-FINAL"],
            "bob": ["never"], "carol": ["never"],
        }
    )  # fmt: skip
    result = await run_alice(ledger, model, alice, bob, carol)
    results = [r.result for r in ledger.tool_calls(result.run_id)]
    assert "there is no agent 'ghost'" in results[0]
    assert "'carol' is not in its can_delegate_to (bob)" in results[1]
    assert "needs 'agent'" in results[2]
    assert by_agent(model, "carol") == [] and by_agent(model, "bob") == []


def test_a_team_refuses_delegation_to_an_agent_it_does_not_have():
    alice = Agent(name="alice", instructions="A.", can_delegate_to=("bob", "ghost"))
    with pytest.raises(ConfigError, match=r"can_delegate_to names unknown agents \['ghost'\]"):
        Team(agents=(alice, Agent(name="bob", instructions="B.")))


def test_a_coordinator_may_not_share_a_workers_name():
    worker = Agent(name="w", instructions="W.")
    with pytest.raises(ConfigError, match=r"^coordinator.name: 'w' is a worker's name"):
        Team(agents=(worker,), coordinator=Agent(name="w", instructions="C."))


async def test_inspect_shows_chains(tmp_path):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    alice = Agent(name="alice", instructions="A.", can_delegate_to=("bob",))
    bob = Agent(name="bob", instructions="B.")
    model = scripted({"alice": [delegate("bob", "to bob"), "A-FINAL"], "bob": ["B-DONE"]})
    with RunLedger(db) as led:
        result = await run_alice(led, model, alice, bob)
    out = CliRunner().invoke(app, ["inspect", result.run_id, "--db", db, "--no-prompt"]).output
    assert "Tool calls" in out
    assert "delegation chain" in out and "alice -> bob" in out
    verify = CliRunner().invoke(app, ["verify", result.run_id, "--db", db])
    assert verify.exit_code == 0, verify.output


async def test_a_delegates_huge_failure_reaches_its_delegator_cut(ledger):
    # A model server's 200,000-character error reached the delegator's prompt whole.
    from clearance import ModelError
    from clearance._core.reasons import MAX_FAILURE_CHARS

    alice = Agent(name="alice", instructions="You are Alice.", can_delegate_to=("bob",))
    bob = Agent(name="bob", instructions="You are Bob.")
    huge = "server says: " + "x" * 200_000

    def answer(request: ModelRequest):
        manifest = request.prompt.manifest
        if manifest.subject == "synthesis":
            return "SYNTH"
        if manifest.agent == "bob":
            raise ModelError(huge, model_id="fake:x")
        return delegate("bob", "Help.") if not tool_results(request) else "ALICE-FINAL"

    model = FunctionModel(answer)
    result = await run_alice(ledger, model, alice, bob)
    (failed,) = [r for r in ledger.tool_calls(result.run_id) if r.name == "delegate"]
    assert failed.is_error and "'bob' failed: " in failed.result
    assert len(failed.result) <= MAX_FAILURE_CHARS + 40 and "[cut: " in failed.result
    last = by_agent(model, "alice")[-1].prompt.text
    assert "x" * 2000 not in last and "[cut: " in last
    report = verify_run(ledger, result.run_id)
    assert report.ok, [str(f) for f in report.findings]


async def test_a_loop_through_a_spawn_is_refused(ledger, tmp_path):
    # Alice spawns Carol, Carol delegates back to Alice: a child started a chain of its own,
    # so the loop went through (bounded only by max_children).
    from clearance import RunOptions

    alice = Agent(name="alice", instructions="A.", can_spawn=("carol",))
    carol = Agent(name="carol", instructions="C.", can_delegate_to=("alice", "dave"))
    dave = Agent(name="dave", instructions="D.")

    def answer(request: ModelRequest):
        manifest = request.prompt.manifest
        if manifest.subject == "synthesis":
            return "SYNTH"
        seen = tool_results(request)
        if manifest.agent == "alice":
            if any(o.startswith("child_result:") for o in manifest.origins):
                return "A-FINAL"
            return ToolCall(id="s", name="spawn", arguments={"agent": "carol", "goal": "help"})
        if manifest.agent == "carol":
            if not seen:
                return delegate("alice", "back to alice")
            if len(seen) == 1:
                return ToolCall(id="d2", name="delegate", arguments={"agent": "dave", "task": "x"})
            return "C-DONE"
        return "D-DONE"

    model = FunctionModel(answer)
    orch = Orchestrator(team_of(alice, carol, dave), model=model, ledger=ledger,
                        options=RunOptions(workspace_root=tmp_path / "ws"))  # fmt: skip
    task = Task(id="t1", title="Work", description=A_TASK, assignee="alice")
    result = await orch.run_tasks([task])
    assert result.tasks["t1"].status is TaskStatus.COMPLETED, result.tasks["t1"].error
    assert result.tasks["t1"].result == "A-FINAL"
    back, onward = [r for r in ledger.tool_calls(result.run_id) if r.agent == "carol"]
    assert back.is_error and "delegation refused" in back.result
    assert "'alice' is already in the delegation chain alice -> carol" in back.result
    assert not onward.is_error and onward.result == "D-DONE"  # another agent: allowed
    assert {r.prompt.manifest.subject for r in by_agent(model, "alice")} == {"task:t1"}
    report = verify_run(ledger, result.run_id)
    assert report.ok, [str(f) for f in report.findings]
