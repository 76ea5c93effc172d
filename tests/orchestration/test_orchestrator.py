import asyncio
import json

import pytest

from clearance import (
    Agent,
    AgentLimits,
    ConfigError,
    CycleError,
    MessageBus,
    Orchestrator,
    PlanError,
    RunOptions,
    RunServices,
    Task,
    TaskStatus,
    Team,
)
from clearance.testing import FunctionModel, ScriptedModel

WORKERS = (
    Agent(name="alice", role="Researcher", instructions="You are Alice.\nALICE-SECRET"),
    Agent(name="bob", instructions="You are Bob.\nBOB-SECRET"),
)
COORD = Agent(name="lead", instructions="You are the lead.")
TEAM = Team(agents=WORKERS, coordinator=COORD, name="t")


def t(task_id, *deps, assignee="alice", scope="dependencies"):
    return Task(
        id=task_id,
        title=f"Title {task_id}",
        description=f"Describe {task_id}.",
        assignee=assignee,
        depends_on=deps,
        memory_scope=scope,
    )


def subject(request):
    return request.prompt.manifest.subject


def echo_model(**kw):
    """Answers every task with RESULT-<id>; the synthesis with SYNTHESIS."""

    def answer(request):
        s = subject(request)
        return "SYNTHESIS" if s == "synthesis" else f"RESULT-{s.removeprefix('task:')}"

    return FunctionModel(answer, **kw)


def by_subject(model):
    return {subject(r): r for r in model.requests}


async def test_isolation_per_task_and_synthesis_full_view(ledger):
    model = echo_model()
    orch = Orchestrator(TEAM, model=model, ledger=ledger)
    result = await orch.run_tasks([t("a"), t("b"), t("c", "a"), t("d", "a", "b")], goal="G")
    assert result.status == "completed" and result.synthesis == "SYNTHESIS"
    seen = {s: r.prompt.text for s, r in by_subject(model).items()}
    # clean slate without dependencies
    assert "RESULT-" not in seen["task:a"] and "RESULT-" not in seen["task:b"]
    # exactly the direct dependencies
    assert "RESULT-a" in seen["task:c"] and "RESULT-b" not in seen["task:c"]
    assert "RESULT-a" in seen["task:d"] and "RESULT-b" in seen["task:d"]
    assert "RESULT-c" not in seen["task:d"]
    # synthesis: everything
    for x in "abcd":
        assert seen["synthesis"].count(f"RESULT-{x}") == 1  # once: not again in a summary
    assert result.result("d") == "RESULT-d"
    assert result.usage.requests == 5


async def test_default_scope_never_reads_shared_memory(ledger):
    model = echo_model()
    orch = Orchestrator(TEAM, model=model, ledger=ledger)
    await orch.run_tasks([t("a"), t("b"), t("c", "b")])
    c_prompt = by_subject(model)["task:c"].prompt
    assert "Shared memory" not in c_prompt.text
    assert "RESULT-a" not in c_prompt.text
    assert c_prompt.manifest.origins == ("instructions", "task:c", "task_result:b")


async def test_all_scope_is_the_opt_in_full_view(ledger):
    model = echo_model()
    orch = Orchestrator(TEAM, model=model, ledger=ledger, options=RunOptions(max_concurrency=1))
    await orch.run_tasks([t("a"), t("b"), t("z", "a", "b"), t("w", "z", scope="all")])
    w = by_subject(model)["task:w"].prompt
    assert {"task_result:a", "task_result:b", "task_result:z"} <= set(w.manifest.origins)


async def test_messages_reach_only_the_addressee(ledger):
    bus = MessageBus()
    bus.send("lead", "bob", "PSST-bob")
    model = echo_model()
    orch = Orchestrator(TEAM, model=model, ledger=ledger, services=RunServices(messages=bus))
    await orch.run_tasks([t("a", assignee="alice"), t("b", assignee="bob")])
    seen = by_subject(model)
    assert "PSST-bob" in seen["task:b"].prompt.text
    assert "PSST-bob" not in seen["task:a"].prompt.text
    assert "message:msg-1" in seen["task:b"].prompt.manifest.origins


def fail_b(request):
    """Task ``b`` raises; every other task answers ``RESULT-<subject>``, synthesis ``SYN``."""
    s = subject(request)
    if s == "task:b":
        raise RuntimeError("b exploded")
    return "SYN" if s == "synthesis" else f"RESULT-{s}"


async def test_failure_cascades_and_independent_branches_complete(ledger):
    model = FunctionModel(fail_b)
    orch = Orchestrator(TEAM, model=model, ledger=ledger)
    result = await orch.run_tasks([t("a"), t("b"), t("c", "b"), t("d", "c"), t("e", "a")])
    status = {k: v.status for k, v in result.tasks.items()}
    assert status == {
        "a": TaskStatus.COMPLETED,
        "b": TaskStatus.FAILED,
        "c": TaskStatus.SKIPPED,
        "d": TaskStatus.SKIPPED,
        "e": TaskStatus.COMPLETED,
    }
    assert "b exploded" in (result.tasks["b"].error or "")
    assert result.status == "failed" and result.synthesis == "SYN"
    synth = by_subject(model)["synthesis"].prompt.text
    assert "## Failed tasks" in synth and "b exploded" in synth
    assert "## Skipped tasks" in synth and "Title d" in synth
    assert "task:c" not in by_subject(model)  # skipped tasks never reach a model
    # the ledger keeps the finished results
    rows = {r.task_id: r for r in ledger.tasks(result.run_id)}
    assert rows["a"].result == "RESULT-task:a" and rows["d"].status == "skipped"


async def test_progress_events_name_each_step_of_the_run(ledger):
    events = []
    orch = Orchestrator(
        TEAM,
        model=FunctionModel(fail_b),
        ledger=ledger,
        services=RunServices(on_event=events.append),
    )
    result = await orch.run_tasks([t("a"), t("b"), t("c", "b")])
    assert all(e.run_id == result.run_id for e in events)
    reason = "test:function: RuntimeError: b exploded"
    seen = [(e.kind, e.task_id, e.detail) for e in events]
    assert seen[0] == ("run_started", None, "3 tasks")
    assert seen[-2:] == [("synthesis_started", None, ""), ("run_finished", None, "failed")]
    assert set(seen[1:-2]) == {
        ("task_started", "a", ""),
        ("task_started", "b", ""),
        ("task_completed", "a", ""),
        ("task_failed", "b", reason),
        ("task_skipped", "c", reason),
    }
    assert seen.index(("task_failed", "b", reason)) + 1 == seen.index(("task_skipped", "c", reason))


async def test_concurrency_overlaps_and_respects_the_limit(ledger):
    active = 0
    peak = 0
    busy_at_start: list[int] = []  # how many others were running as each task began

    async def answer(request):
        nonlocal active, peak
        if subject(request) == "synthesis":
            return "S"
        busy_at_start.append(active)
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.05)
        active -= 1
        return "r"

    model = FunctionModel(answer)
    orch = Orchestrator(TEAM, model=model, ledger=ledger, options=RunOptions(max_concurrency=3))
    await orch.run_tasks([t(f"n{i}") for i in range(9)])
    assert peak == 3
    # overlapped, not serial: counted, not timed (a loaded machine stretches the sleeps)
    assert len(busy_at_start) == 9
    assert sum(1 for others in busy_at_start if others) >= 6


async def test_dependent_starts_before_unrelated_slow_task_finishes(ledger):
    log = []

    async def answer(request):
        s = subject(request)
        log.append(("start", s))
        if s == "task:slow":
            await asyncio.sleep(0.3)
        log.append(("end", s))
        return "r"

    model = FunctionModel(answer)
    orch = Orchestrator(TEAM, model=model, ledger=ledger, options=RunOptions(max_concurrency=4))
    await orch.run_tasks([t("slow"), t("fast"), t("after_fast", "fast")])
    assert log.index(("start", "task:after_fast")) < log.index(("end", "task:slow"))


async def test_invalid_graph_and_unknown_agent_fail_before_running(ledger):
    model = echo_model()
    orch = Orchestrator(TEAM, model=model, ledger=ledger)
    with pytest.raises(CycleError):
        await orch.run_tasks([t("a", "b"), t("b", "a")])
    with pytest.raises(ConfigError, match="'a' is assigned to unknown agent 'zed'"):
        await orch.run_tasks([t("a", assignee="zed")])
    assert model.requests == []


async def test_prompt_budget_fails_the_task_not_the_run(ledger):
    tiny = Team(
        agents=(Agent(name="alice", instructions="x", limits=AgentLimits(max_prompt_tokens=3)),),
        coordinator=COORD,
    )
    model = echo_model()
    result = await Orchestrator(tiny, model=model, ledger=ledger).run_tasks([t("a")])
    assert result.tasks["a"].status is TaskStatus.FAILED
    assert "max_prompt_tokens exceeded" in (result.tasks["a"].error or "")
    assert result.synthesis == "SYNTHESIS"


async def test_timeout_is_a_limit(ledger):
    slow_team = Team(
        agents=(
            Agent(name="alice", instructions="x", limits=AgentLimits(timeout_s=0.01, retries=0)),
        ),
        coordinator=COORD,
    )

    async def answer(request):
        if subject(request) != "synthesis":
            await asyncio.sleep(1)
        return "S"

    result = await Orchestrator(slow_team, model=FunctionModel(answer), ledger=ledger).run_tasks(
        [t("a")]
    )
    assert "timeout_s exceeded" in (result.tasks["a"].error or "")


async def test_ledger_records_every_call_with_prompt_and_manifest(ledger):
    model = echo_model()
    result = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks([t("a"), t("b", "a")])
    calls = ledger.calls(result.run_id)
    assert [c.subject for c in calls] == ["task:a", "task:b", "synthesis"]
    b = calls[1]
    assert [m["content"] for m in b.messages] == [
        m.content for m in model.requests[1].prompt.messages
    ]
    assert [i["origin"] for i in b.manifest["items"]] == ["instructions", "task:b", "task_result:a"]
    run = ledger.get_run(result.run_id)
    assert run.status == "completed" and run.synthesis == "SYNTHESIS"


def plan(*tasks):
    return json.dumps({"tasks": list(tasks)})


async def test_run_team_forwards_planned_edges_exactly(ledger):
    the_plan = plan(
        {
            "id": "r1",
            "title": "Research",
            "description": "find",
            "assignee": "alice",
            "depends_on": [],
        },
        {
            "id": "r2",
            "title": "More",
            "description": "find more",
            "assignee": "bob",
            "depends_on": [],
        },
        {
            "id": "w",
            "title": "Write",
            "description": "write",
            "assignee": "bob",
            "depends_on": ["r1"],
        },
    )
    model = ScriptedModel([the_plan, "R1", "R2", "W", "FINAL"])
    orch = Orchestrator(TEAM, model=model, ledger=ledger, options=RunOptions(max_concurrency=1))
    result = await orch.run_team("Write a report")
    assert result.synthesis == "FINAL"
    assert result.usage.requests == 5  # plan, three tasks, synthesis
    graph = ledger.get_run(result.run_id).graph
    assert {g["id"]: g["depends_on"] for g in graph} == {"r1": [], "r2": [], "w": ["r1"]}
    plan_request = model.requests[0]
    assert plan_request.json_schema is not None
    plan_text = plan_request.prompt.text
    assert "Researcher" in plan_text  # a declared role
    assert "You are Bob." not in plan_text  # no role: name only, not the first line
    assert "You are Alice." not in plan_text  # roster, not instructions
    assert "ALICE-SECRET" not in plan_text and "BOB-SECRET" not in plan_text
    w_prompt = model.requests[3].prompt
    assert "R1" in w_prompt.text and "R2" not in w_prompt.text


async def test_run_team_repairs_once_then_fails_clearly(ledger):
    good = plan(
        {"id": "a", "title": "A", "description": "d", "assignee": "alice", "depends_on": []}
    )
    model = ScriptedModel(["not json at all", good, "RA", "FINAL"])
    result = await Orchestrator(TEAM, model=model, ledger=ledger).run_team("G")
    assert result.synthesis == "FINAL"
    repair = model.requests[1].prompt.text
    assert "rejected" in repair and "not json at all" in repair

    cyclic = plan(
        {"id": "a", "title": "A", "description": "d", "assignee": "alice", "depends_on": ["b"]},
        {"id": "b", "title": "B", "description": "d", "assignee": "alice", "depends_on": ["a"]},
    )
    unknown = plan(
        {"id": "a", "title": "A", "description": "d", "assignee": "zed", "depends_on": []}
    )
    model2 = ScriptedModel([cyclic, unknown])
    with pytest.raises(PlanError, match="unknown agent 'zed'"):
        await Orchestrator(TEAM, model=model2, ledger=ledger).run_team("G")
    assert "dependency cycle" in model2.requests[1].prompt.text
    failed = ledger.list_runs(limit=1)[0]
    assert failed.status == "failed" and "unknown agent" in (failed.error or "")


async def test_a_completion_that_is_not_unicode_fails_the_task_cleanly(ledger):
    from clearance.models import ModelResponse, Usage

    class LoneSurrogate(FunctionModel):
        """Returns what a JSON API can decode from "\\ud800": a lone surrogate."""

        async def request(self, request):
            self.requests.append(request)
            text = "S" if subject(request) == "synthesis" else "bad \ud800 text"
            return ModelResponse(text=text, usage=Usage(requests=1), model_id=self.model_id)

    model = LoneSurrogate(lambda r: "")
    result = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks([t("a")])
    assert result.tasks["a"].status is TaskStatus.FAILED
    assert "not valid Unicode" in (result.tasks["a"].error or "")
    assert result.synthesis == "S"
    assert "not valid Unicode" in (ledger.calls(result.run_id)[0].error or "")


async def test_a_failing_ledger_stops_the_run_with_its_error(ledger, monkeypatch):
    from clearance import StoreError

    original = ledger.record_task

    def failing(run_id, state):
        if state.status is TaskStatus.COMPLETED and state.task.id == "a":
            raise StoreError("disk full")
        original(run_id, state)

    monkeypatch.setattr(ledger, "record_task", failing)
    model = echo_model()
    orch = Orchestrator(TEAM, model=model, ledger=ledger, options=RunOptions(max_concurrency=2))
    with pytest.raises(StoreError, match="disk full"):
        await orch.run_tasks([t("a"), t("b", "a"), t("slow")])
    # The error raised from a task's done callback stopped the run: "b" never started, and
    # the run is left resumable.
    assert "task:b" not in {subject(r) for r in model.requests}
    (run,) = ledger.list_runs()
    assert run.status == "interrupted"
