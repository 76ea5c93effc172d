"""A child's answer cut off at the output limit reaches its parent marked, never as whole."""

from __future__ import annotations

from dataclasses import replace

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.answers import TRUNCATED_MARK
from clearance._context.verify import verify_run
from clearance._core.spec import FanOut
from clearance.models import ModelRequest, ModelResponse
from clearance.testing import FunctionModel

CUT = "The first half of the child's finding, and then"


class CutChild(FunctionModel):
    """Every answer of a child stops at the output limit."""

    async def request(self, request: ModelRequest) -> ModelResponse:
        response = await super().request(request)
        if request.prompt.manifest.subject.startswith("child:"):
            return replace(response, finish_reason="length")
        return response


async def test_a_cut_off_child_answer_is_marked_for_its_parent(tmp_path) -> None:
    def answer(request: ModelRequest) -> str:
        subject = request.prompt.manifest.subject
        return CUT if subject.startswith("child:") else f"R-{subject}"

    model = CutChild(answer)
    team = Team(agents=(Agent(name="lead", instructions="You lead.", can_spawn=("helper",)),
                        Agent(name="helper", instructions="You help.")))  # fmt: skip
    task = Task(id="p", title="P", description="Sum up.", assignee="lead",
                fan_out=FanOut(agent="helper", goals=("look",)))  # fmt: skip
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        result = await Orchestrator(
            team, model=model, ledger=ledger, options=RunOptions(workspace_root=tmp_path / "ws")
        ).run_tasks([task])
        assert result.status == "completed", result.error
        (parent,) = [r for r in model.requests if r.prompt.manifest.subject == "task:p"]
        assert f"{CUT}\n\n{TRUNCATED_MARK}" in parent.prompt.text
        report = verify_run(ledger, result.run_id)
        assert report.ok, [str(f) for f in report.findings]
