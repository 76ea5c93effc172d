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


def test_both_ledgers_are_recorders_and_the_null_one_is_no_run_ledger(tmp_path):
    from clearance._state.ledger import Recorder, RunLedger

    null = NullLedger()
    assert isinstance(null, Recorder) and not isinstance(null, RunLedger)
    with RunLedger(f"sqlite:///{tmp_path / 'r.db'}") as real:
        assert isinstance(real, Recorder)
    assert null.record_call(
        run_id="r", subject="task:x", agent="a", model_id="m", prompt=None, response=None,
        error=None, started_at=None, latency_s=0.0,
    ).startswith("call_")  # fmt: skip
    for read in (null.tasks, null.calls, null.messages, null.tool_calls, null.chain_entries):
        with pytest.raises(StoreError, match="NullLedger records nothing"):
            read("r")


async def test_resuming_from_a_null_ledger_is_refused_naming_it():
    team = Team(agents=(Agent(name="a", instructions="A."),), name="t")
    orch = Orchestrator(team, model=FunctionModel(lambda r: "x"), ledger=NullLedger())
    with pytest.raises(StoreError, match=r"run 'r1'.*NullLedger\(\) keeps no record"):
        await orch.resume("r1")
