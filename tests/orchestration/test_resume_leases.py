"""A run left ``running`` by a process of another host: its lease decides.

The owner renews its lease while it runs (`clearance._state.lease.LEASE_S`); once the lease
has lapsed the owner has stopped, and the run is taken over without ``--force``. While the
lease holds, resume is refused with one line naming the host, and nothing runs.
"""

from datetime import timedelta

import pytest
from sqlalchemy import create_engine, update

from clearance import Agent, ConfigError, Orchestrator, RunLedger, Task, Team
from clearance._core.clock import utc_now
from clearance._state.ledger.schema import RUNS
from clearance.testing import FunctionModel

TEAM = Team(
    agents=(Agent(name="v", instructions="You are V."),),
    coordinator=Agent(name="lead", instructions="You lead."),
    name="leases",
)
TASKS = [
    Task(id="a", title="A", description="do a", assignee="v"),
    Task(id="b", title="B", description="do b", assignee="v", depends_on=("a",)),
]
ELSEWHERE = {"host": "elsewhere.example", "pid": 4242}


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    return str(request.getfixturevalue("postgres_url"))


def subject(request) -> str:
    return str(request.prompt.manifest.subject)


async def left_running_elsewhere(url: str, lease_s: float) -> str:
    """A run whose task ``b`` failed, left ``running`` by a process of another host whose
    lease ends ``lease_s`` seconds from now (negative: it lapsed)."""

    def broken(request):
        if subject(request) == "task:b":
            raise ValueError("model crashed")
        return f"R-{subject(request)}"

    with RunLedger(url) as ledger:
        first = await Orchestrator(TEAM, model=FunctionModel(broken), ledger=ledger).run_tasks(
            TASKS
        )
        assert first.run_id is not None
        ledger.reopen_run(first.run_id, process=ELSEWHERE)
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                update(RUNS)
                .where(RUNS.c.run_id == first.run_id)
                .values(
                    owner="elsewhere.example:4242:1.abcd",
                    lease_expires_at=utc_now() + timedelta(seconds=lease_s),
                )
            )
    finally:
        engine.dispose()
    return first.run_id


async def test_a_lapsed_lease_of_another_host_is_taken_over_without_force(url) -> None:
    run_id = await left_running_elsewhere(url, lease_s=-1)
    model = FunctionModel(lambda r: f"R-{subject(r)}")
    with RunLedger(url) as ledger:
        resumed = await Orchestrator(TEAM, model=model, ledger=ledger).resume(run_id)
        assert resumed.status == "completed"
        assert [subject(r) for r in model.requests] == ["task:b", "synthesis"]  # a kept
        assert ledger.get_run(run_id).config["process"]["host"] != ELSEWHERE["host"]


async def test_a_live_lease_of_another_host_needs_force(url) -> None:
    run_id = await left_running_elsewhere(url, lease_s=60)
    model = FunctionModel(lambda r: f"R-{subject(r)}")
    with RunLedger(url) as ledger:
        with pytest.raises(ConfigError, match=r"on host 'elsewhere.example'.*--force"):
            await Orchestrator(TEAM, model=model, ledger=ledger).resume(run_id)
        assert model.requests == []  # refused before anything ran
        assert ledger.get_run(run_id).status == "running"
        resumed = await Orchestrator(TEAM, model=model, ledger=ledger).resume(run_id, force=True)
        assert resumed.status == "completed"
