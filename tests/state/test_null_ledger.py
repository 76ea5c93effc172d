import pytest

from clearance import Agent, NullLedger, Orchestrator, StoreError, Task, Team
from clearance.testing import FunctionModel


async def test_run_without_a_record(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    team = Team(agents=(Agent(name="a", instructions="A."),), name="t")
    model = FunctionModel(lambda r: f"R-{r.prompt.manifest.subject}")
    ledger = NullLedger()
    orch = Orchestrator(team, model=model, ledger=ledger)
    tasks = [
        Task(id="x", title="X", description="x", assignee="a"),
        Task(id="y", title="Y", description="y", assignee="a", depends_on=("x",)),
    ]
    result = await orch.run_tasks(tasks)
    assert result.status == "completed"
    assert "R-task:x" in model.requests[1].prompt.text
    assert not (tmp_path / ".clearance").exists()
    with pytest.raises(StoreError, match="NullLedger records nothing"):
        ledger.get_run(result.run_id)
    with pytest.raises(StoreError):
        ledger.list_runs()
    ledger.close()
    assert repr(ledger) == "NullLedger()"
