"""Recalled memory is optional context: it never makes a task's prompt overflow its budget."""

from __future__ import annotations

from clearance import Agent, AgentLimits, Orchestrator, RunLedger, Task, Team
from clearance._context.verify import verify_run
from clearance._core.memory_spec import AgentMemory
from clearance.memory import PersistentMemory, RunMemory, memory_lookup
from clearance.testing import FunctionModel

LIMITS = AgentLimits(max_prompt_tokens=300, max_output_tokens=512)


async def run_harbour(tmp_path, *, isolated: bool = False):
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    agent = Agent(name="alice", instructions="A.", memory=AgentMemory(recall=3), limits=LIMITS)
    task = Task(
        id="t",
        title="harbour",
        description="Report on the harbour.",
        assignee="alice",
        mode="isolated" if isolated else "standard",
    )
    memory = RunMemory(url)
    model = FunctionModel(lambda request: "harbour report")
    try:
        with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
            orch = Orchestrator(Team(agents=(agent,)), model=model, ledger=ledger, memory=memory)
            result = await orch.run_tasks([task])
            report = verify_run(ledger, result.run_id, memories=memory_lookup(url))
    finally:
        memory.close()
    return result, report, model


def remember(tmp_path, *notes: str) -> list[str]:
    memory = PersistentMemory(f"sqlite:///{tmp_path / 'memory.db'}", agent="alice")
    return [memory.record(note)[0].id for note in notes]


async def test_records_that_do_not_fit_are_left_out_least_relevant_first(tmp_path):
    # A recalled record larger than the prompt's room failed the task, and every later run of
    # the team with it: a first run succeeded, each one after failed with max_prompt_tokens.
    big = remember(tmp_path, "harbour report " + "word " * 250)[0]
    small = remember(tmp_path, "harbour harbour harbour: the crane is broken")[0]
    result, report, model = await run_harbour(tmp_path)
    assert result.status == "completed", result.tasks["t"].error
    assert report.ok, [str(f) for f in report.findings]
    (request,) = [r for r in model.requests if r.prompt.manifest.subject == "task:t"]
    origins = request.prompt.manifest.origins
    assert f"memory:{small}" in origins and f"memory:{big}" not in origins
    assert request.prompt.manifest.total_tokens <= LIMITS.max_prompt_tokens


async def test_an_isolated_task_leaves_out_what_does_not_fit_too(tmp_path):
    big = remember(tmp_path, "harbour report " + "word " * 250)[0]
    result, report, model = await run_harbour(tmp_path, isolated=True)
    assert result.status == "completed", result.tasks["t"].error
    assert report.ok, [str(f) for f in report.findings]
    assert all(f"memory:{big}" not in r.prompt.manifest.origins for r in model.requests)
