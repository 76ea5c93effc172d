"""Plans that read two ways are sent back: two tasks of one title, a key given twice.

A task's result reaches its dependents and the synthesis under its label, ``<title> (by
<assignee>)``: two planned tasks of one title would give results no reader can tell apart
(the synthesis is asked to say which results it relied on). A plan whose JSON gives a key
twice in one object is what Python reads (the last value) but not what a person reading the
recorded answer may (the first): it is refused as every other model JSON is
(`clearance._core.json_answer`). Each test asserts on what the model actually received.
"""

from __future__ import annotations

import json

import pytest

from clearance import Agent, Orchestrator, PlanError, Team, verify_run
from clearance._orchestration.planner import parse_plan
from clearance.testing import FunctionModel

TEAM = Team(
    agents=(Agent(name="alpha", instructions="A."), Agent(name="beta", instructions="B.")),
    coordinator=Agent(name="lead", instructions="Lead."),
)


def task(tid, title, assignee="alpha"):
    return {"id": tid, "title": title, "description": f"Do {tid}.", "assignee": assignee,
            "depends_on": []}  # fmt: skip


SAME_TITLES = json.dumps({"tasks": [task("a", "Research"), task("b", "research")]})
DISTINCT = json.dumps({"tasks": [task("a", "Research sources"), task("b", "Research prices")]})
TWICE = (
    '{"tasks": [{"id": "a", "title": "A", "description": "d", "assignee": "alpha", '
    '"assignee": "beta", "depends_on": []}]}'
)


def test_two_tasks_of_one_title_are_refused_naming_both():
    with pytest.raises(ValueError, match=r"tasks 'a' and 'b' have the same title 'research'"):
        parse_plan(SAME_TITLES, agents=["alpha"])


def test_a_key_given_twice_is_refused():
    with pytest.raises(ValueError, match=r"invalid JSON: the key 'assignee' is given twice"):
        parse_plan(TWICE, agents=["alpha", "beta"])
    with pytest.raises(ValueError, match=r"invalid JSON: NaN is not valid JSON"):
        parse_plan('{"tasks": [], "x": NaN}', agents=["alpha"])


async def test_a_plan_of_one_title_twice_is_repaired_and_each_result_keeps_its_label(ledger):
    plans = iter([SAME_TITLES, DISTINCT])
    synthesis = []

    def answer(request):
        subject = request.prompt.manifest.subject
        if subject == "plan":
            return next(plans)
        if subject == "synthesis":
            synthesis.append(request.prompt.messages[1].content)
            return "final"
        return f"result of {subject}"

    orchestrator = Orchestrator(TEAM, model=FunctionModel(answer), ledger=ledger)
    result = await orchestrator.run_team("Goal")
    assert result.status == "completed"
    (repair,) = [c for c in ledger.calls(result.run_id) if c.subject == "plan"][1:]
    assert "have the same title 'research'" in repair.messages[1]["content"]
    (text,) = synthesis
    assert "### Research sources (by alpha)\n~~~~\nresult of task:a\n~~~~" in text
    assert "### Research prices (by alpha)\n~~~~\nresult of task:b\n~~~~" in text
    assert verify_run(ledger, result.run_id).ok


async def test_a_key_given_twice_twice_is_a_plan_error(ledger):
    orchestrator = Orchestrator(TEAM, model=FunctionModel(lambda r: TWICE), ledger=ledger)
    with pytest.raises(PlanError, match="the key 'assignee' is given twice in one object"):
        await orchestrator.run_team("Goal")
