"""A person's answer has a deadline: an approval left unanswered stays open, a question
left unanswered gets no answer, and the run goes on (`RunServices.answer_timeout_s`)."""

from __future__ import annotations

import asyncio
import time

import pytest

from clearance import (
    Agent,
    ApprovalDecision,
    ApprovalPending,
    ConfigError,
    Orchestrator,
    RunLedger,
    RunOptions,
    RunServices,
    Task,
    Team,
)
from clearance._core.vocabulary import ApprovalKind, EventKind
from clearance._orchestration.approval import ApprovalGate, ApprovalRequest
from clearance.testing import FunctionModel


@pytest.fixture
def ledger(tmp_path):
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        ledger.start_run(run_id="run_1", team="t", goal=None, graph=None, config={})
        yield ledger


def request() -> ApprovalRequest:
    return ApprovalRequest(
        call_id="", run_id="run_1", kind=ApprovalKind.TOOL, task_id="t1", agent="a", tool="rm",
        arguments={"p": "x"},
    )  # fmt: skip


async def never(request: ApprovalRequest) -> ApprovalDecision:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def test_an_unanswered_approval_stays_open_at_its_deadline(ledger):
    gate = ApprovalGate(ledger, "run_1", tools=("rm",), approver=never, timeout_s=0.2)
    started = time.monotonic()
    with pytest.raises(ApprovalPending) as caught:
        await gate._decide_all([request()])
    assert time.monotonic() - started < 2
    (call_id,) = caught.value.call_ids
    ledger.flush()
    kinds = [e.kind for e in ledger.events("run_1")]
    assert EventKind.AWAITING_APPROVAL in kinds
    assert EventKind.APPROVAL_DECIDED not in kinds, "nobody decided; nothing may say so"
    assert call_id.startswith("apr_")


async def test_an_approvers_own_timeout_is_its_failure_not_the_deadline(ledger):
    async def broken(request: ApprovalRequest) -> ApprovalDecision:
        raise TimeoutError("the approval service timed out")

    gate = ApprovalGate(ledger, "run_1", tools=("rm",), approver=broken, timeout_s=60)
    with pytest.raises(TimeoutError, match="approval service"):
        await gate._decide_all([request()])


async def test_an_answer_in_time_is_recorded_as_before(ledger):
    async def quick(request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(approved=True, by="alice")

    gate = ApprovalGate(ledger, "run_1", tools=("rm",), approver=quick, timeout_s=5)
    ((_, decision),) = await gate._decide_all([request()])
    assert decision.approved and decision.by == "alice"


@pytest.mark.parametrize("value", [0, -1, float("nan"), True, "60", 86_401])
def test_answer_deadlines_out_of_range_are_refused(ledger, value):
    with pytest.raises(ConfigError, match="answer_timeout_s"):
        RunServices(answer_timeout_s=value)
    with pytest.raises(ConfigError, match="answer_timeout_s"):
        ApprovalGate(ledger, "run_1", timeout_s=value)


TEAM = Team(
    agents=(Agent(name="worker", instructions="You review code."),),
    coordinator=Agent(name="editor", instructions="You edit."),
)


async def test_an_unanswered_question_gets_no_answer_and_the_subagent_goes_on(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "app.py").write_text("def main():\n    return 42\n")
    seen: list[str] = []

    def answer(request):
        subject, text = request.prompt.manifest.subject, request.prompt.messages[-1].content
        if subject == "isolated:review":
            seen.append(text)
            if "Clarification 1" not in text:
                return "STATUS: needs_context\nQUESTION: What is the app for?"
            return "main() returns 42.\nSTATUS: done"
        return "SYNTHESIS"

    asked: list[str] = []

    async def person(task_id: str, question: str) -> str:
        asked.append(question)
        await asyncio.Event().wait()  # nobody at the terminal
        raise AssertionError("unreachable")

    task = Task(id="review", title="Review app", description="Review app.py.",
                assignee="worker", mode="isolated", files=("app.py",))  # fmt: skip
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orch = Orchestrator(
            TEAM, model=FunctionModel(answer), ledger=ledger,
            options=RunOptions(input_root=project),
            services=RunServices(ask_person=person, answer_timeout_s=0.2),
        )  # fmt: skip
        started = time.monotonic()
        result = await orch.run_tasks([task])
        assert time.monotonic() - started < 5
        assert result.status == "completed", result.error
        assert asked == ["What is the app for?"]
        assert "(no answer was given)" in seen[-1]
        (event,) = [e for e in ledger.events(result.run_id) if e.kind == "clarification"]
        assert event.data["answer"] == "(no answer was given)"
        assert event.data["answered_by"] == "person"
