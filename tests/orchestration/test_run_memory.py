"""Long-term memory in orchestrated runs: recall before a task, record after, never leaked."""

import asyncio
import dataclasses

import pytest

from clearance import Agent, ConfigError, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance._core.memory_spec import AgentMemory, MemoryGroup
from clearance._orchestration.run_memory import RunMemory, default_memory_url
from clearance._state.memory import memory_lookup
from clearance.testing import CanaryModel, assert_never_saw, assert_saw

RECALL_ALL = 10


def team() -> Team:
    """alice and bob share the group "research" (alice records there); carol stays private."""
    return Team(
        agents=(
            Agent(
                name="alice",
                instructions="You are Alice.",
                memory=AgentMemory(recall=RECALL_ALL, record_to="research"),
            ),
            Agent(name="bob", instructions="You are Bob.", memory=AgentMemory(recall=RECALL_ALL)),
            Agent(
                name="carol", instructions="You are Carol.", memory=AgentMemory(recall=RECALL_ALL)
            ),
        ),
        memory_groups=(MemoryGroup(name="research", agents=("alice", "bob")),),
    )


def tasks(run: int) -> list[Task]:
    return [
        Task(
            id=f"{agent[0]}{run}",
            title=f"Step {run} of {agent}",
            description="Write the result of your work; use any earlier result you have.",
            assignee=agent,
        )
        for agent in ("alice", "bob", "carol")
    ]


async def run_once(tmp_path, model, run: int, memory: RunMemory | None = None):
    memory = memory or RunMemory(f"sqlite:///{tmp_path / 'memory.db'}")
    try:
        with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
            orch = Orchestrator(
                team(),
                model=model,
                ledger=ledger,
                memory=memory,
                options=RunOptions(max_concurrency=1),
            )
            return await orch.run_tasks(tasks(run))
    finally:
        memory.close()


def test_recorded_memory_reaches_only_the_agent_and_its_group_and_survives_runs(tmp_path):
    model = CanaryModel()
    first = asyncio.run(run_once(tmp_path, model, 1))
    assert first.status == "completed", first.error
    a1, b1, c1 = (model.canary_of(t) for t in ("a1", "b1", "c1"))
    second = asyncio.run(run_once(tmp_path, model, 2))
    assert second.status == "completed", second.error

    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        # Within the first run: carol never sees what alice or bob recorded.
        for canary in (a1, b1):
            assert_never_saw(ledger, "c1", canary, run_id=first.run_id)
        # The second run recalls the first run's memory, by scope:
        # alice's group record reaches exactly the group (alice, bob) ...
        assert_saw(ledger, "a2", a1, run_id=second.run_id)
        assert_saw(ledger, "b2", a1, run_id=second.run_id)
        assert_never_saw(ledger, "c2", a1, run_id=second.run_id)
        # ... bob's private record reaches bob alone, carol's reaches carol alone.
        assert_saw(ledger, "b2", b1, run_id=second.run_id)
        assert_never_saw(ledger, "a2", b1, run_id=second.run_id)
        assert_never_saw(ledger, "c2", b1, run_id=second.run_id)
        assert_saw(ledger, "c2", c1, run_id=second.run_id)
        assert_never_saw(ledger, "a2", c1, run_id=second.run_id)
        assert_never_saw(ledger, "b2", c1, run_id=second.run_id)
        # Recalled records enter as memory: items of the manifest, and the run verifies
        # against the memory store.
        (call,) = ledger.calls(second.run_id, subject="task:c2")
        origins = [i["origin"] for i in call.manifest["items"]]
        assert any(o.startswith("memory:") for o in origins)
        report = verify_run(
            ledger, second.run_id, memories=memory_lookup(f"sqlite:///{tmp_path / 'memory.db'}")
        )
        assert report.ok, [str(f) for f in report.findings]
        config = ledger.get_run(second.run_id).config
        assert config["memory"]["url"] == f"sqlite:///{tmp_path / 'memory.db'}"
        notes = [t for t in ledger.tool_calls(second.run_id) if t.name.startswith("memory_")]
        assert {t.name for t in notes} == {"memory_recall", "memory_record"}


def test_an_agent_without_memory_settings_neither_recalls_nor_records(tmp_path):
    plain = Team(agents=(Agent(name="alice", instructions="A."),))
    memory = RunMemory(f"sqlite:///{tmp_path / 'memory.db'}")
    model = CanaryModel()

    async def go(task_id):
        with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
            orch = Orchestrator(plain, model=model, ledger=ledger, memory=memory)
            return await orch.run_tasks(
                [Task(id=task_id, title="T", description="result of work", assignee="alice")]
            )

    asyncio.run(go("t1"))
    second = asyncio.run(go("t2"))
    memory.close()
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        assert_never_saw(ledger, "t2", model.canary_of("t1"), run_id=second.run_id)
        assert not [t for t in ledger.tool_calls(second.run_id) if t.name.startswith("memory_")]


def test_agents_with_memory_settings_need_a_memory(tmp_path):
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orch = Orchestrator(team(), model=CanaryModel(), ledger=ledger)
        with pytest.raises(ConfigError, match="memory"):
            asyncio.run(orch.run_tasks(tasks(1)))


def test_record_to_a_group_the_agent_is_not_in_is_refused():
    with pytest.raises(ConfigError, match="record_to"):
        Team(
            agents=(
                Agent(name="a", instructions="A.", memory=AgentMemory(record_to="g")),
                Agent(name="b", instructions="B."),
                Agent(name="c", instructions="C."),
            ),
            memory_groups=(MemoryGroup(name="g", agents=("b", "c")),),
        )


def broken_memory(tmp_path, on_error):
    # A folder where the database file should be: every open fails.
    (tmp_path / "memory.db").mkdir()
    return RunMemory(f"sqlite:///{tmp_path / 'memory.db'}", on_error=on_error)


def test_a_failing_memory_fails_the_task_by_default_never_the_run(tmp_path):
    model = CanaryModel()
    result = asyncio.run(run_once(tmp_path, model, 1, broken_memory(tmp_path, "fail")))
    assert result.status == "failed"
    assert all(o.status == "failed" for o in result.tasks.values())
    assert "memory store" in (result.tasks["a1"].error or "")


def test_on_error_continue_runs_without_memory_and_records_that(tmp_path):
    model = CanaryModel()
    result = asyncio.run(run_once(tmp_path, model, 1, broken_memory(tmp_path, "continue")))
    assert result.status == "completed", result.error
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        notes = [t for t in ledger.tool_calls(result.run_id) if t.name == "memory_recall"]
    assert notes and all(
        t.is_error and t.result.startswith("continued without memory") for t in notes
    )


def test_default_memory_url_sits_next_to_an_sqlite_ledger(tmp_path):
    url = default_memory_url(f"sqlite:///{tmp_path / 'x' / 'runs.db'}")
    assert url == f"sqlite:///{tmp_path / 'x' / 'memory.db'}"
    pg = "postgresql+psycopg://u:secret@127.0.0.1:5432/db"
    assert default_memory_url(pg) == pg
    assert RunMemory(pg).config()["url"] == "postgresql+psycopg://u:***@127.0.0.1:5432/db"


def word_count(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())


def test_from_run_restores_memory_groups_settings_memory_and_tools_then_verifies(tmp_path):
    base = team()
    alice = dataclasses.replace(base.agents[0], tools=("word_count",))
    tooled = dataclasses.replace(base, agents=(alice, *base.agents[1:]))
    url = f"sqlite:///{tmp_path / 'memory.db'}"

    async def first():
        memory = RunMemory(url)
        with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
            orch = Orchestrator(tooled, model=CanaryModel(fail={"c1"}), ledger=ledger,
                                memory=memory, tools=[word_count])  # fmt: skip
            result = await orch.run_tasks(tasks(1))
        memory.close()
        return result

    failed = asyncio.run(first())
    assert failed.status == "failed"

    async def resumed():
        with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
            orch = Orchestrator.from_run(failed.run_id, ledger=ledger, model=CanaryModel())
            assert orch.team.memory_groups == base.memory_groups
            assert orch.team.agent("alice").memory == AgentMemory(
                recall=RECALL_ALL, record_to="research"
            )
            assert orch.memory is not None and orch.memory.url == url
            try:
                result = await orch.resume(failed.run_id)
            finally:
                orch.memory.close()
            report = verify_run(ledger, failed.run_id, memories=memory_lookup(url))
            return result, report

    result, report = asyncio.run(resumed())
    assert result.status == "completed", result.error
    assert report.ok, [str(f) for f in report.findings]


def test_from_run_names_a_tool_it_cannot_restore(tmp_path):
    plain = Team(agents=(Agent(name="alice", instructions="A.", tools=("local",)),))

    def local(text: str) -> str:
        return text

    async def go():
        with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
            orch = Orchestrator(plain, model=CanaryModel(fail={"t"}), ledger=ledger, tools=[local])
            failed = await orch.run_tasks([Task(id="t", title="T", description="D",
                                                assignee="alice")])  # fmt: skip
            with pytest.raises(ConfigError, match=r"'local'.*no import path"):
                Orchestrator.from_run(failed.run_id, ledger=ledger, model=CanaryModel())
            restored = Orchestrator.from_run(
                failed.run_id, ledger=ledger, model=CanaryModel(), tools={"local": local}
            )
            assert (await restored.resume(failed.run_id)).status == "completed"

    asyncio.run(go())
