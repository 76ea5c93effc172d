"""A finished answer of a delegate or child without tools reaches its caller byte for byte."""

from __future__ import annotations

from test_delegation import by_agent, delegate, run_alice, scripted

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance._core.spec import FanOut
from clearance.models import ModelRequest
from clearance.testing import FunctionModel

# Leading indentation (a first line of code), a line separator and trailing blank lines:
# each is part of the answer, and `str.strip` would take the first and last away.
ANSWER = "    def f():\n        return 1\u2028\n\n  \n"


async def test_a_tool_less_delegates_answer_reaches_the_delegator_verbatim(ledger) -> None:
    plans: dict[str, list[object]] = {"alice": [delegate("bob", "Write f."), "done"],
                                      "bob": [ANSWER]}  # fmt: skip
    model = scripted(plans)
    alice = Agent(name="alice", instructions="A.", can_delegate_to=("bob",))
    result = await run_alice(ledger, model, alice, Agent(name="bob", instructions="B."))
    assert ANSWER in by_agent(model, "alice")[-1].prompt.text
    (step,) = [s for s in ledger.tool_calls(result.run_id) if s.name == "delegate"]
    assert step.result == ANSWER
    assert verify_run(ledger, result.run_id).ok


async def test_a_whitespace_only_delegate_answer_is_still_an_error(ledger) -> None:
    plans: dict[str, list[object]] = {"alice": [delegate("bob", "Write f."), "done"],
                                      "bob": [" \n\t\n"]}  # fmt: skip
    model = scripted(plans)
    alice = Agent(name="alice", instructions="A.", can_delegate_to=("bob",))
    result = await run_alice(ledger, model, alice, Agent(name="bob", instructions="B."))
    (step,) = [s for s in ledger.tool_calls(result.run_id) if s.name == "delegate"]
    assert step.is_error and "empty completion" in step.result


async def test_a_tool_less_childs_answer_reaches_its_parent_verbatim(tmp_path) -> None:
    def answer(request: ModelRequest) -> str:
        subject = request.prompt.manifest.subject
        return ANSWER if subject.startswith("child:") else f"R-{subject}"

    model = FunctionModel(answer)
    team = Team(agents=(Agent(name="lead", instructions="You lead.", can_spawn=("helper",)),
                        Agent(name="helper", instructions="You help.")))  # fmt: skip
    task = Task(id="p", title="P", description="Sum up.", assignee="lead",
                fan_out=FanOut(agent="helper", goals=("write f",)))  # fmt: skip
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        result = await Orchestrator(
            team, model=model, ledger=ledger, options=RunOptions(workspace_root=tmp_path / "ws")
        ).run_tasks([task])
        assert result.status == "completed", result.error
        (parent,) = [r for r in model.requests if r.prompt.manifest.subject == "task:p"]
        assert ANSWER in parent.prompt.text
        report = verify_run(ledger, result.run_id)
        assert report.ok, [str(f) for f in report.findings]
