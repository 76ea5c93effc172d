"""Conditional routing driven by hostile model answers, and `verify` on honest and forged runs.

An upstream's structured answer is model output: a condition must read it without crashing
and without routing wrongly (numbers compared exactly), every dependent it routes out must be
recorded so, and `clearance verify` must pass an honest run however many conditions a task
has, while a skip no recorded result explains stays a finding.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._context.verify import verify_run
from clearance._context.verify_routing import check_routing
from clearance._core.routing import ROUTED_PREFIX, EdgeCondition
from clearance._state.graph import TaskGraph
from clearance.testing import FunctionModel

TEAM = Team(agents=(Agent(name="alpha", instructions="You are Alpha."),))
SCHEMA = {"type": "object", "properties": {"v": {"type": ["string", "number"]}}}
HUGE = int("1" + "0" * 400)  # an integer beyond a float's range (JSON allows it)


def when(task: str, value: object) -> EdgeCondition:
    return EdgeCondition.of(task, {"/v": value})


def task(id: str, deps: tuple[str, ...] = (), conditions: tuple[EdgeCondition, ...] = (),
         structured: bool = False) -> Task:  # fmt: skip
    return Task(id=id, title=id.title(), description=f"Do {id}.", assignee="alpha",
                depends_on=deps, when=conditions,
                output_schema=SCHEMA if structured else None)  # fmt: skip


def answers(values: dict[str, str]):
    def answer(request):
        text = request.prompt.messages[-1].content
        for id, value in values.items():
            if f"Do {id}." in text:
                return value
        return "ok"

    return answer


async def run(tmp_path, tasks, values):
    ledger = RunLedger(f"sqlite:///{tmp_path}/runs.db")
    model = FunctionModel(answers(values))
    result = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks(tasks)
    return ledger, model, result


def test_numbers_compare_exactly_and_never_overflow():
    assert when("t", 1).unmet(json.dumps({"v": HUGE})) is not None  # no OverflowError
    assert when("t", HUGE).unmet(json.dumps({"v": HUGE})) is None
    assert when("t", 1e300).unmet(json.dumps({"v": HUGE})) is not None
    # Through floats, 2**53 + 1 would equal 2**53: a crafted answer must not route so.
    assert when("t", 2**53 + 1).unmet(json.dumps({"v": 2**53})) is not None
    assert when("t", 2**53 + 1).unmet(json.dumps({"v": 2**53 + 1})) is None
    assert when("t", 1).unmet('{"v": 1.0}') is None  # numbers as numbers
    assert when("t", 1).unmet('{"v": true}') is not None  # true is not 1
    assert when("t", [1, {"a": 0}]).unmet('{"v": [1.0, {"a": -0.0}]}') is None
    assert when("t", {"a": 1}).unmet('{"v": {"a": 1, "b": 2}}') is not None


async def test_an_answer_with_a_huge_integer_routes_and_verifies(tmp_path):
    tasks = [task("a", structured=True), task("fix", ("a",), (when("a", 1),))]
    ledger, model, result = await run(tmp_path, tasks, {"a": json.dumps({"v": HUGE})})
    assert result.status == "completed", result.error
    assert result.tasks["fix"].status == "skipped"
    assert (result.tasks["fix"].error or "").startswith(ROUTED_PREFIX + "/v of 'a' is 1000")
    assert not any("Do fix." in r.prompt.text for r in model.requests)
    assert verify_run(ledger, result.run_id).ok


async def test_every_dependent_one_result_routes_out_is_recorded(tmp_path):
    # 'c' comes first among a's dependents and depends on 'fix' too: both are routed out by
    # a's one result; each must be recorded skipped, not only the last one handled.
    tasks = [
        task("a", structured=True),
        task("c", ("fix", "a"), (when("a", "q"),)),
        task("fix", ("a",), (when("a", "q"),)),
    ]
    ledger, _, result = await run(tmp_path, tasks, {"a": '{"v": "x"}'})
    assert result.status == "completed", result.error
    recorded = {t.task_id: (t.status, t.error) for t in ledger.tasks(result.run_id)}
    reason = ROUTED_PREFIX + '/v of \'a\' is "x", not "q"'
    assert recorded["c"] == ("skipped", reason)
    assert recorded["fix"] == ("skipped", reason)
    report = verify_run(ledger, result.run_id)
    assert report.ok, report.findings


async def test_verify_passes_honest_runs_of_tasks_with_several_conditions(tmp_path):
    scenarios = {
        # One condition holds, the other routes the task out.
        "mixed": [task("a", structured=True), task("b", structured=True),
                  task("c", ("a", "b"), (when("a", "x"), when("b", "x")))],
        # Both route it out: the first upstream to finish names the reason.
        "both": [task("a", structured=True), task("b", structured=True),
                 task("c", ("a", "b"), (when("a", "q"), when("b", "q")))],
        # Its own condition fails, but a dependency routed out first skipped it.
        "cascade": [task("a", structured=True), task("fix", ("a",), (when("a", "q"),)),
                    task("c", ("fix", "a"), (when("a", "q"),))],
    }  # fmt: skip
    for name, tasks in scenarios.items():
        folder = tmp_path / name
        folder.mkdir()
        values = {"a": '{"v": "x"}', "b": '{"v": "y"}'}
        ledger, model, result = await run(folder, tasks, values)
        assert result.status == "completed", (name, result.error)
        assert result.tasks["c"].status == "skipped", name
        assert not any("Do c." in r.prompt.text for r in model.requests), name
        report = verify_run(ledger, result.run_id)
        assert report.ok, (name, report.findings)


async def test_verify_flags_a_routed_skip_no_condition_explains(tmp_path):
    tasks = [task("a", structured=True), task("b", structured=True),
             task("c", ("a", "b"), (when("a", "x"), when("b", "x"))),
             task("d", ("a",))]  # fmt: skip
    ledger, _, result = await run(tmp_path, tasks, {"a": '{"v": "x"}', "b": '{"v": "y"}'})
    graph = TaskGraph.from_dict(ledger.get_run(result.run_id).graph)
    records = ledger.tasks(result.run_id)
    assert list(check_routing(graph, records, [])) == []

    def forged(task_id: str, error: str) -> list[str]:
        edited = [dataclasses.replace(t, status="skipped", error=error)
                  if t.task_id == task_id else t for t in records]  # fmt: skip
        return [reason for _, _, reason in check_routing(graph, edited, [])]

    # c's recorded reason must be its unmet condition's, not one about a condition that holds.
    holds = ROUTED_PREFIX + '/v of \'a\' is "z", not "x"'
    assert any("with another reason" in p for p in forged("c", holds))
    # d has no condition at all: a skip "by a condition" is forged.
    assert any("recorded skipped by a condition" in p for p in forged("d", holds))


async def test_a_forged_upstream_answer_that_reroutes_is_a_finding(tmp_path, rechain):
    tasks = [task("a", structured=True), task("fix", ("a",), (when("a", "high"),)),
             task("note", ("a",), (when("a", "low"),))]  # fmt: skip
    ledger, _, result = await run(tmp_path, tasks, {"a": '{"v": "low"}'})
    assert result.tasks["fix"].status == "skipped"
    assert verify_run(ledger, result.run_id).ok
    ledger.close()
    db = tmp_path / "runs.db"
    high = json.dumps({"v": "high"}, indent=2, sort_keys=True)
    with sqlite3.connect(db) as conn:  # the forger rewrites a's answer and result
        conn.execute("UPDATE calls SET response = ? WHERE subject = 'task:a'", (high,))
        conn.execute("UPDATE tasks SET result = ? WHERE task_id = 'a'", (high,))
    rechain(db, result.run_id)
    with RunLedger(f"sqlite:///{db}") as forged:
        reasons = [f.reason for f in verify_run(forged, result.run_id).findings]
    assert any("routes the task out" in r and "recorded completed" in r for r in reasons)
    assert any("recorded skipped by a condition" in r for r in reasons)
