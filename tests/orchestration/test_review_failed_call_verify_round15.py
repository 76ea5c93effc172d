"""A reviewer's model call that fails ends its task with no round recorded; verify agrees.

Before, `clearance verify` flagged every such run: the failed call's candidate had no
``review_round`` event to match ("the candidate is not the one the round recorded"), though
the loop records a round only for an answer it could read, as it already allowed for an
answer that is no review.
"""

from __future__ import annotations

from pathlib import Path

from clearance import Agent, AgentLimits, ModelError, Orchestrator, RunLedger, Task, Team
from clearance._context.verify import verify_run
from clearance._core.review import Review
from clearance._core.vocabulary import EventKind
from clearance.models._base import ModelRequest, Usage
from clearance.testing import FunctionModel

TEAM = Team(
    agents=(
        Agent(name="writer", instructions="You write."),
        Agent(name="critic", instructions="You review.", limits=AgentLimits(retries=0)),
    )
)
TASK = Task(id="draft", title="Draft", description="Write a draft.", assignee="writer",
            review=Review(by=("critic",), rounds=2))  # fmt: skip


def _answer(request: ModelRequest) -> str:
    if request.prompt.manifest.subject.startswith("review:"):
        raise ModelError("the answer was refused", model_id="test:function",
                         paid=Usage(requests=1, prompt_tokens=3, completion_tokens=4))  # fmt: skip
    return "a draft"


async def test_a_failed_reviewer_call_verifies(tmp_path: Path) -> None:
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        result = await Orchestrator(TEAM, model=FunctionModel(_answer), ledger=ledger).run_tasks(
            [TASK]
        )
        assert result.tasks["draft"].status == "failed"
        assert result.tasks["draft"].error == "test:function: the answer was refused"
        (review,) = ledger.calls(result.run_id, subject="review:draft/1/1")
        assert review.error == "attempt 1 of 1: test:function: the answer was refused"
        assert not ledger.events(result.run_id, EventKind.REVIEW_ROUND)
        report = verify_run(ledger, result.run_id)
        assert report.ok, [str(f) for f in report.findings]
