"""The public way to run a team file as ``clearance run`` does, resume it and verify it."""

from __future__ import annotations

from pathlib import Path

from clearance import (
    Orchestrator,
    RunLedger,
    RunServices,
    RunSpec,
    load_team_file,
    recorded_run_spec,
    resume_run,
    run_spec,
    run_spec_sync,
    verify_run,
)
from clearance.testing import CanaryModel

TEAM = """\
name: pair
model: test:canary
max_concurrency: 2
agents:
  - name: writer
    instructions: You write.
    sampling: {temperature: 0.7, top_p: 0.9, stop: [END]}
    limits: {max_output_tokens: 64, retries: 0}
messages:
  - {from: writer, to: writer, content: Keep it short.}
tasks:
  - {id: a, title: A, description: Write a., assignee: writer}
  - {id: b, title: B, description: Write b., assignee: writer, depends_on: [a]}
"""


def team_file(tmp_path: Path) -> Path:
    path = tmp_path / "team.yaml"
    path.write_text(TEAM, encoding="utf-8")
    return path


def test_a_team_file_runs_records_its_spec_and_verifies(tmp_path: Path) -> None:
    spec = RunSpec.from_file(team_file(tmp_path))
    model = CanaryModel()
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        result = run_spec_sync(
            spec, ledger=ledger, services=RunServices(models={"test:canary": model})
        )
        assert result.status == "completed", result.error
        assert recorded_run_spec(ledger, result.run_id) == spec
        assert verify_run(ledger, result.run_id).ok
    task_requests = [r for r in model.requests if r.prompt.manifest.subject.startswith("task:")]
    assert {(r.temperature, r.top_p, r.stop) for r in task_requests} == {(0.7, 0.9, ("END",))}
    assert load_team_file(team_file(tmp_path)).spec == spec


async def test_resume_gets_back_the_spec_it_started_with(tmp_path: Path) -> None:
    spec = RunSpec.from_file(team_file(tmp_path)).model_copy(update={"max_concurrency": 1})
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        failing = RunServices(models={"test:canary": CanaryModel(fail={"b"})})
        first = await run_spec(spec, ledger=ledger, services=failing)
        assert first.status == "failed"
        rebuilt = Orchestrator.from_run(first.run_id, ledger=ledger)
        assert rebuilt.spec == spec
        assert rebuilt.team.agent("writer").sampling.stop == ("END",)
        assert [m.content for m in rebuilt.messages.all()] == ["Keep it short."]  # not twice
        model = CanaryModel()
        services = RunServices(models={"test:canary": model})
        resumed = await resume_run(first.run_id, ledger=ledger, services=services)
        assert resumed.status == "completed", resumed.error
        assert model.requests[0].prompt.manifest.subject == "task:b"
        assert verify_run(ledger, first.run_id).ok
