import json
import re

import pytest

from clearance import (
    Agent,
    ContextBuilder,
    MessageBus,
    ModelError,
    Orchestrator,
    RunLedger,
    RunOptions,
    RunServices,
    Task,
    TaskGraph,
    TaskStatus,
    Team,
)
from clearance._state.queue import TaskQueue
from clearance.models import ModelRequest, estimate_tokens
from clearance.testing import CanaryModel, ScriptedModel, assert_never_saw, assert_saw

WORKERS = (
    Agent(name="alice", instructions="You are Alice. ALICE-SECRET"),
    Agent(name="bob", instructions="You are Bob."),
)
TEAM = Team(agents=WORKERS, coordinator=Agent(name="lead", instructions="Lead."), name="t")


def t(task_id, *deps, assignee="alice", scope="dependencies"):
    return Task(
        id=task_id,
        title=f"Title {task_id}",
        description=f"Describe {task_id}.",
        assignee=assignee,
        depends_on=deps,
        memory_scope=scope,
    )


async def run(ledger, tasks, *, fail=(), messages=None, max_concurrency=4):
    model = CanaryModel(fail=fail)
    orch = Orchestrator(
        TEAM,
        model=model,
        ledger=ledger,
        options=RunOptions(max_concurrency=max_concurrency),
        services=RunServices(messages=messages),
    )
    result = await orch.run_tasks(tasks)
    return model, result


# -- CanaryModel --------------------------------------------------------------------------


async def test_every_completion_carries_a_unique_canary(ledger):
    model, result = await run(ledger, [t("a"), t("b", "a"), t("c")])
    assert model.model_id == "test:canary"
    for task_id in "abc":
        canary = model.canary_of(task_id)
        assert re.fullmatch(rf"CANARY-{task_id}-[0-9a-f]{{8}}", canary)
        assert result.result(task_id) == f"result of {task_id} {canary}"
    assert model.canaries.keys() == {"a", "b", "c", "synthesis"}
    assert len(set(model.canaries.values())) == 4
    assert model.canary_of("synthesis") in (result.synthesis or "")
    assert (result.synthesis or "").startswith("synthesis of 3 results CANARY-synthesis-")


async def test_canaries_are_new_on_every_call(ledger):
    model = CanaryModel()
    orch = Orchestrator(TEAM, model=model, ledger=ledger)
    await orch.run_tasks([t("a")])
    first = model.canary_of("a")
    await orch.run_tasks([t("a")])
    assert model.canary_of("a") != first  # the last completion's canary


async def test_canary_of_a_task_without_completion_is_a_key_error(ledger):
    model, result = await run(ledger, [t("a"), t("b", "a"), t("c")], fail={"a"})
    assert result.tasks["a"].status is TaskStatus.FAILED
    assert "canary failure of 'a'" in (result.tasks["a"].error or "")
    assert result.tasks["b"].status is TaskStatus.SKIPPED
    with pytest.raises(KeyError, match="'a'"):
        model.canary_of("a")
    with pytest.raises(KeyError, match="'b'"):
        model.canary_of("b")
    assert model.canary_of("c")
    assert [r.prompt.manifest.subject for r in model.requests].count("task:a") == 1


async def test_failing_calls_raise_model_error_and_are_recorded():
    model = CanaryModel(fail={"x"})
    queue = TaskQueue(TaskGraph([t("x"), t("y")]))
    builder = ContextBuilder(count_tokens=estimate_tokens)
    x = builder.build_task_prompt(queue.graph.get("x"), agent=WORKERS[0], queue=queue)
    y = builder.build_task_prompt(queue.graph.get("y"), agent=WORKERS[0], queue=queue)
    with pytest.raises(ModelError, match="canary failure of 'x'"):
        await model.request(ModelRequest(prompt=x))
    response = await model.request(ModelRequest(prompt=y))
    assert response.text == f"result of y {model.canary_of('y')}"
    assert response.model_id == "test:canary" and response.usage.requests == 1
    assert [r.prompt for r in model.requests] == [x, y]
    assert "x" not in model.canaries


async def test_plan_is_a_chain_over_the_roster_carrying_the_plan_canary(ledger):
    model = CanaryModel()
    result = await Orchestrator(TEAM, model=model, ledger=ledger).run_team("Goal")
    assert result.status == "completed"
    plan = json.loads(ledger.calls(result.run_id, subject="plan")[0].response or "")
    assert [(p["id"], p["assignee"], p["depends_on"]) for p in plan["tasks"]] == [
        ("step-1", "alice", []),
        ("step-2", "bob", ["step-1"]),
    ]
    canary = model.canary_of("plan")
    assert_saw(ledger, "step-1", canary)  # the task text comes from the plan
    assert_saw(ledger, "step-2", model.canary_of("step-1"))
    assert_never_saw(ledger, "step-1", model.canary_of("step-2"))
    assert_saw(model, "synthesis", model.canary_of("step-2"))


# -- assert_saw / assert_never_saw, with a ledger ---------------------------------------


async def test_ledger_source_defaults_to_the_newest_run(ledger):
    model, first = await run(ledger, [t("a"), t("b", "a")])
    old_a = model.canary_of("a")
    assert_saw(ledger, "b", old_a)
    assert_never_saw(ledger, "a", old_a)
    model2, second = await run(ledger, [t("a"), t("b", "a")])
    # the newest run by default; an older run by id (or a unique prefix of it)
    assert_never_saw(ledger, "b", old_a)
    assert_saw(ledger, "b", model2.canary_of("a"))
    assert_saw(ledger, "b", old_a, run_id=first.run_id)
    assert_saw(ledger, "b", old_a, run_id=first.run_id[:-2])
    with pytest.raises(AssertionError):
        assert_saw(ledger, "b", old_a, run_id=second.run_id)


async def test_never_saw_fails_naming_task_text_and_origin(ledger):
    model, result = await run(ledger, [t("a"), t("b", "a")])
    canary = model.canary_of("a")
    with pytest.raises(AssertionError) as info:
        assert_never_saw(ledger, "b", canary)
    message = str(info.value)
    assert "'b'" in message and repr(canary) in message and result.run_id in message
    assert "call 1 of 1" in message and "user message" in message
    assert (
        "in the content of manifest item 'task_result:a' (titled 'Title a (by alice)')" in message
    )


async def test_never_saw_names_instructions_headings_and_layout(ledger):
    bus = MessageBus()
    bus.send("boss", "alice", "hello")
    await run(ledger, [t("a"), t("b", "a")], messages=bus)
    with pytest.raises(
        AssertionError,
        match=r"system message, in the content of manifest item "
        r"'instructions'",
    ):
        assert_never_saw(ledger, "a", "ALICE-SECRET")
    with pytest.raises(AssertionError, match=r"in the heading of manifest item 'message:"):
        assert_never_saw(ledger, "b", "From boss")
    # a result's label heads its block
    with pytest.raises(AssertionError, match=r"in the heading of manifest item 'task_result:a'"):
        assert_never_saw(ledger, "b", "(by alice)")
    with pytest.raises(AssertionError, match=r"outside any single manifest item"):
        assert_never_saw(ledger, "b", "## Context from prerequisite tasks")
    with pytest.raises(AssertionError, match=r"outside any single manifest item"):
        assert_never_saw(ledger, "a", "Reply with your result only.")


async def test_saw_fails_when_absent_or_never_reached(ledger):
    await run(ledger, [t("a"), t("b", "a"), t("c")], fail={"a"})
    with pytest.raises(AssertionError, match=r"'c' never saw 'nope'.*none of its 1 prompt"):
        assert_saw(ledger, "c", "nope")
    # a skipped task never reached a model: assert_saw fails, assert_never_saw holds
    with pytest.raises(AssertionError, match=r"'b' never reached a model in run"):
        assert_saw(ledger, "b", "Describe b.")
    assert_never_saw(ledger, "b", "Describe b.")
    # the failed task did reach a model: its prompt is recorded
    assert_saw(ledger, "a", "Describe a.")


async def test_unknown_task_or_empty_ledger_fails(ledger, tmp_path):
    with RunLedger(f"sqlite:///{tmp_path / 'empty.db'}") as empty:
        with pytest.raises(AssertionError, match="holds no runs"):
            assert_never_saw(empty, "a", "x")
        with pytest.raises(AssertionError, match="holds no runs"):
            assert_saw(empty, "a", "x")
    await run(ledger, [t("a")])
    with pytest.raises(AssertionError, match=r"has no task 'zz' \(its tasks: a\)"):
        assert_never_saw(ledger, "zz", "x")


async def test_synthesis_subject(ledger):
    model, _ = await run(ledger, [t("a"), t("b")])
    assert_saw(ledger, "synthesis", model.canary_of("a"))
    assert_saw(ledger, "synthesis", model.canary_of("b"))
    assert_never_saw(ledger, "synthesis", model.canary_of("synthesis"))
    with pytest.raises(AssertionError, match="'plan' never reached a model"):
        assert_saw(ledger, "plan", "x")


# -- with a model as source ---------------------------------------------------------------


async def test_model_source(ledger):
    bus = MessageBus()
    bus.send("lead", "bob", "PSST-bob")
    model, _ = await run(ledger, [t("a"), t("b", "a", assignee="bob"), t("c", "b")], messages=bus)
    assert_saw(model, "b", "PSST-bob")
    assert_never_saw(model, "a", "PSST-bob")
    assert_never_saw(model, "c", model.canary_of("a"))
    assert_saw(model, "c", model.canary_of("b"))
    with pytest.raises(AssertionError) as info:
        assert_never_saw(model, "b", "PSST-bob")
    assert "request 1 of 1" in str(info.value)
    assert "in the content of manifest item 'message:msg-1' (titled 'From lead (msg-1)')" in str(
        info.value
    )
    with pytest.raises(AssertionError, match="'a' never saw"):
        assert_saw(model, "a", "PSST-bob")
    with pytest.raises(AssertionError, match="'zz' never reached a model"):
        assert_saw(model, "zz", "x")
    assert_never_saw(model, "zz", "x")  # the model cannot tell an unknown task from a skipped one
    with pytest.raises(TypeError, match="run_id"):
        assert_saw(model, "a", "x", run_id="run_1")


async def test_any_recording_model_is_a_source(ledger):
    model = ScriptedModel(["A", "SYN"])
    await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks([t("a")])
    assert_saw(model, "a", "Describe a.")
    assert_saw(model, "synthesis", "A")
    with pytest.raises(AssertionError):
        assert_never_saw(model, "synthesis", "A")


async def test_every_prompt_of_a_task_is_searched(ledger):
    # a structured hand-off makes two calls for one task: the repair prompt counts too
    schema = {"type": "object", "required": ["x"]}
    task = Task(id="a", title="A", description="d", assignee="alice", output_schema=schema)
    model = ScriptedModel(["not json", '{"x": 1}', "SYN"])
    await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks([task])
    assert_saw(ledger, "a", "not json")
    with pytest.raises(AssertionError, match="call 2 of 2"):
        assert_never_saw(ledger, "a", "not json")
    with pytest.raises(AssertionError, match="request 2 of 2"):
        assert_never_saw(model, "a", "not json")
