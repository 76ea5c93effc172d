"""Orchestrator.resume: completed results are kept, everything else runs again."""

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clearance import (
    Agent,
    AgentLimits,
    ConfigError,
    MessageBus,
    Orchestrator,
    RunOptions,
    RunServices,
    StoreError,
    Task,
    TaskStatus,
    Team,
)
from clearance._context.verify import verify_run
from clearance.testing import FakeModel, FunctionModel

TEAM = Team(
    agents=(
        Agent(name="v", instructions="You are V.", role="Vetter", limits=AgentLimits(retries=1)),
        Agent(name="w", instructions="You are W."),
    ),
    coordinator=Agent(name="lead", instructions="You lead."),
    name="resumers",
)
TASKS = [
    Task(id="a", title="A", description="do a", assignee="v"),
    Task(id="b", title="B", description="do b", assignee="w"),
    Task(id="c", title="C", description="do c", assignee="v", depends_on=("a",)),
    Task(id="d", title="D", description="do d", assignee="w", depends_on=("b", "c")),
]


def subject(request):
    return request.prompt.manifest.subject


def results(result):
    return {k: (v.status, v.result) for k, v in result.tasks.items()}


def bus():
    messages = MessageBus()
    messages.send("w", "v", "note for v")
    return messages


async def test_a_cancelled_run_resumes_to_the_uninterrupted_results(ledger):
    reference = await Orchestrator(
        TEAM, model=FakeModel("x"), ledger=ledger, services=RunServices(messages=bus())
    ).run_tasks(TASKS, goal="G")

    fake = FakeModel("x")
    blocked = asyncio.Event()

    async def answer(request):
        if subject(request) == "task:c":
            blocked.set()
            await asyncio.sleep(3600)
        return fake.answer(request)

    orchestrator = Orchestrator(
        TEAM,
        model=FunctionModel(answer),
        ledger=ledger,
        options=RunOptions(max_concurrency=1),
        services=RunServices(messages=bus()),
    )
    run = asyncio.create_task(orchestrator.run_tasks(TASKS, goal="G"))
    await blocked.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    run_id = ledger.list_runs(limit=1)[0].run_id
    assert ledger.get_run(run_id).status == "interrupted"
    recorded = {t.task_id: t.status for t in ledger.tasks(run_id)}
    assert recorded == {"a": "completed", "b": "completed", "c": "interrupted", "d": "pending"}

    again = FakeModel("x")
    resumed = await Orchestrator.from_run(run_id, ledger=ledger, model=again).resume(run_id[:-3])
    assert resumed.run_id == run_id
    assert results(resumed) == results(reference)
    assert resumed.synthesis == reference.synthesis
    assert sorted(subject(r) for r in again.requests) == ["synthesis", "task:c", "task:d"]
    assert ledger.get_run(run_id).status == "completed"
    assert resumed.usage.requests == len([c for c in ledger.calls(run_id) if c.error is None])
    assert verify_run(ledger, run_id).ok


async def test_failed_and_skipped_tasks_run_again(ledger):
    def broken(request):
        if subject(request) == "task:c":
            raise ValueError("model crashed")
        return f"R-{subject(request)}"

    first = await Orchestrator(TEAM, model=FunctionModel(broken), ledger=ledger).run_tasks(TASKS)
    assert first.tasks["c"].status is TaskStatus.FAILED
    assert first.tasks["d"].status is TaskStatus.SKIPPED

    healthy = FunctionModel(lambda r: f"R-{subject(r)}")
    resumed = await Orchestrator(TEAM, model=healthy, ledger=ledger).resume(first.run_id)
    assert resumed.status == "completed"
    assert {k: v.result for k, v in resumed.tasks.items()} == {
        "a": "R-task:a",
        "b": "R-task:b",
        "c": "R-task:c",
        "d": "R-task:d",
    }
    assert sorted(subject(r) for r in healthy.requests) == ["synthesis", "task:c", "task:d"]
    assert resumed.tasks["a"].prompt_tokens == first.tasks["a"].prompt_tokens > 0
    report = verify_run(ledger, first.run_id)
    assert report.ok, report.findings


async def test_from_run_rebuilds_team_settings_and_messages(ledger):
    first = await Orchestrator(
        TEAM,
        model=FakeModel("x"),
        ledger=ledger,
        options=RunOptions(max_concurrency=3),
        services=RunServices(messages=bus()),
    ).run_tasks(TASKS)
    ledger.finish_run(
        first.run_id, status="interrupted", synthesis=None, usage=first.usage, error=None
    )
    rebuilt = Orchestrator.from_run(first.run_id, ledger=ledger)
    assert rebuilt.team == TEAM
    assert rebuilt.options.max_concurrency == 3
    assert [(m.id, m.content) for m in rebuilt.messages.all()] == [("msg-1", "note for v")]
    assert rebuilt.messages.send("v", "w", "later").id == "msg-2"


async def test_resuming_a_completed_or_unknown_run_is_refused(ledger):
    done = await Orchestrator(TEAM, model=FakeModel("x"), ledger=ledger).run_tasks(TASKS)
    with pytest.raises(ConfigError, match="already completed"):
        await Orchestrator(TEAM, model=FakeModel("x"), ledger=ledger).resume(done.run_id)
    with pytest.raises(StoreError, match="unknown run"):
        await Orchestrator(TEAM, model=FakeModel("x"), ledger=ledger).resume("run_nope")


async def test_resume_with_a_team_lacking_an_assignee_is_refused_before_anything_runs(ledger):
    def broken(request):
        raise ValueError("down")

    first = await Orchestrator(TEAM, model=FunctionModel(broken), ledger=ledger).run_tasks(TASKS)
    other = Team(agents=(Agent(name="v", instructions="x"),))
    with pytest.raises(ConfigError, match="unknown agent 'w'"):
        await Orchestrator(other, model=FakeModel("x"), ledger=ledger).resume(first.run_id)
    assert ledger.get_run(first.run_id).status == "failed"


async def test_a_run_stopped_before_planning_is_planned_on_resume(ledger):
    plan = (
        '{"tasks": [{"id": "p", "title": "P", "description": "d", "assignee": "v", '
        '"depends_on": []}]}'
    )
    ledger.start_run(run_id="run_planless", team="resumers", goal="Goal", graph=None, config={})
    model = FunctionModel(lambda r: plan if subject(r) == "plan" else "done")
    resumed = await Orchestrator(TEAM, model=model, ledger=ledger).resume("run_planless")
    assert resumed.status == "completed"
    assert [subject(r) for r in model.requests] == ["plan", "task:p", "synthesis"]


async def stopped_as_running(ledger, process):
    """A run whose tasks failed, recorded as if its process were still running it."""

    def broken(request):
        if subject(request) == "task:c":
            raise ValueError("model crashed")
        return f"R-{subject(request)}"

    first = await Orchestrator(TEAM, model=FunctionModel(broken), ledger=ledger).run_tasks(TASKS)
    assert first.run_id and ledger.get_run(first.run_id).config["process"]["pid"] == os.getpid()
    ledger.reopen_run(first.run_id, process=process)  # "running", owned by `process`
    return first.run_id


@pytest.fixture
def sleeper():
    """A live process on this host (killed and reaped at teardown)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def zombie():
    """A killed child process not reaped yet (it still answers signal 0)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    proc.kill()
    stat = Path(f"/proc/{proc.pid}/stat")
    deadline = time.monotonic() + 10
    while stat.read_text().rsplit(")", 1)[-1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the child did not die"
        time.sleep(0.01)
    os.kill(proc.pid, 0)  # no error: signal 0 alone would call it alive
    yield proc
    proc.wait()


async def test_a_run_whose_process_is_alive_is_not_resumed(ledger, sleeper):
    run_id = await stopped_as_running(ledger, {"host": socket.gethostname(), "pid": sleeper.pid})
    model = FunctionModel(lambda r: f"R-{subject(r)}")
    with pytest.raises(ConfigError, match=rf"still running in process {sleeper.pid}"):
        await Orchestrator(TEAM, model=model, ledger=ledger).resume(run_id)
    assert model.requests == []  # refused before anything ran
    assert ledger.get_run(run_id).status == "running"
    # Once the process is gone (killed and reaped), the run resumes.
    sleeper.kill()
    sleeper.wait()
    resumed = await Orchestrator(TEAM, model=model, ledger=ledger).resume(run_id)
    assert resumed.status == "completed"
    from clearance._state.lease import start_ticks

    recorded = ledger.get_run(run_id).config["process"]
    assert {k: recorded[k] for k in ("host", "pid")} == {
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
    assert recorded.get("started") == start_ticks(os.getpid())  # None where /proc is not


async def test_a_process_id_reused_by_another_process_does_not_block_resume(ledger, sleeper):
    """A live process holds the recorded id, but started at another time: not the run's."""
    from clearance._state.lease import start_ticks

    started = start_ticks(sleeper.pid)
    if started is None:
        pytest.skip("no /proc")
    process = {"host": socket.gethostname(), "pid": sleeper.pid, "started": str(int(started) - 1)}
    run_id = await stopped_as_running(ledger, process)
    model = FunctionModel(lambda r: f"R-{subject(r)}")
    resumed = await Orchestrator(TEAM, model=model, ledger=ledger).resume(run_id)
    assert resumed.status == "completed"


async def test_a_killed_but_unreaped_process_does_not_block_resume(ledger, zombie):
    run_id = await stopped_as_running(ledger, {"host": socket.gethostname(), "pid": zombie.pid})
    model = FunctionModel(lambda r: f"R-{subject(r)}")
    resumed = await Orchestrator(TEAM, model=model, ledger=ledger).resume(run_id)
    assert resumed.status == "completed"


async def test_a_run_of_another_host_needs_force(ledger):
    run_id = await stopped_as_running(ledger, {"host": "elsewhere.example", "pid": 4242})
    model = FunctionModel(lambda r: f"R-{subject(r)}")
    with pytest.raises(ConfigError, match=r"process 4242 on host 'elsewhere.example'.*--force"):
        await Orchestrator(TEAM, model=model, ledger=ledger).resume(run_id)
    resumed = await Orchestrator(TEAM, model=model, ledger=ledger).resume(run_id, force=True)
    assert resumed.status == "completed"
