"""Spawned children that fail with hostile text: what their parent's model is shown is bounded."""

from __future__ import annotations

from clearance import Agent, AgentLimits, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance._core.reasons import MAX_FAILURE_CHARS
from clearance._core.spec import FanOut
from clearance.models import ModelRequest
from clearance.testing import FunctionModel

TEAM = Team(
    agents=(
        Agent(
            name="lead",
            instructions="You lead.",
            can_spawn=("helper",),
            limits=AgentLimits(spawn_timeout_s=5.0),
        ),
        Agent(name="helper", instructions="You help."),
    ),
    coordinator=Agent(name="editor", instructions="You edit."),
)

ERROR_BODY = "PROVIDER-ERROR-BODY " * 20_000  # 400,000 characters a server could send back


async def test_a_childs_huge_failure_reaches_its_parents_prompt_cut(tmp_path):
    parent_prompts: list[str] = []

    def answer(request: ModelRequest) -> str:
        subject = request.prompt.manifest.subject
        if subject.startswith("child:"):
            raise RuntimeError(ERROR_BODY)
        if subject == "task:parent":
            parent_prompts.append(request.prompt.text)
            return "parent summary"
        return "SYNTHESIS"

    ledger = RunLedger(f"sqlite:///{tmp_path}/runs.db")
    task = Task(id="parent", title="Parent", description="Sum up.", assignee="lead",
                fan_out=FanOut(agent="helper", goals=("look",)))  # fmt: skip
    result = await Orchestrator(
        TEAM, model=FunctionModel(answer), ledger=ledger,
        options=RunOptions(workspace_root=tmp_path / "ws"),
    ).run_tasks([task])  # fmt: skip
    assert result.tasks["parent"].status == "completed"

    (prompt,) = parent_prompts
    assert "[no result: the child failed: " in prompt
    assert prompt.count("PROVIDER-ERROR-BODY") <= MAX_FAILURE_CHARS // len("PROVIDER-ERROR-BODY ")
    assert len(prompt) < 5_000
    (child,) = [e for e in ledger.events(result.run_id) if e.kind == "child"]
    assert child.data["status"] == "failed"
    assert len(child.data["error"]) <= MAX_FAILURE_CHARS + 40
    assert "[cut: " in child.data["error"]
    assert verify_run(ledger, result.run_id).ok
