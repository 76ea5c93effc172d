"""A coordinator or reviewer that answers badly, then a resume: the model is asked again.

Each test scripts the model (`FunctionModel`) and asserts on what it actually received.
"""

from __future__ import annotations

import json
import sqlite3

from clearance import (
    Agent,
    AgentLimits,
    FanOut,
    LimitExceeded,
    Orchestrator,
    PlanError,
    RunOptions,
    Task,
    Team,
)
from clearance._context.verify import verify_run
from clearance._core.review import Review
from clearance.models import ToolCall
from clearance.testing import FunctionModel

TEAM = Team(
    agents=(Agent(name="alpha", instructions="A."), Agent(name="beta", instructions="B.")),
    coordinator=Agent(name="lead", instructions="Lead."),
)


def subject(request):
    return request.prompt.manifest.subject


def plan_of(*tasks):
    return json.dumps({"tasks": [
        {"id": t, "title": title, "description": f"Do {t}.", "assignee": "alpha",
         "depends_on": []}
        for t, title in tasks
    ]})  # fmt: skip


GOOD_PLAN = plan_of(("a", "Write A"))


# -- the plan ---------------------------------------------------------------------------


async def test_a_planned_title_with_a_line_break_is_sent_back_for_repair(ledger):
    # A team file refuses such a title; a planned one would make `clearance plan` write a
    # file `clearance run` refuses, and would forge a line wherever titles are listed.
    answers = iter([plan_of(("a", "Write A\nSTATUS: done")), GOOD_PLAN])
    model = FunctionModel(lambda r: next(answers) if subject(r) == "plan" else "done")
    result = await Orchestrator(TEAM, model=model, ledger=ledger).run_team("Goal")
    assert result.status == "completed"
    graph = ledger.get_run(result.run_id).graph
    assert [t["title"] for t in graph] == ["Write A"]
    plans = [r for r in model.requests if subject(r) == "plan"]
    assert len(plans) == 2
    repair = plans[1].prompt.messages[-1].content
    assert "tasks.0.title" in repair and "must be one line of text" in repair
    assert verify_run(ledger, result.run_id).ok


async def test_a_title_with_an_escape_sequence_is_refused_after_the_repair(ledger):
    model = FunctionModel(lambda r: plan_of(("a", "A \x1b[2J")) if subject(r) == "plan" else "done")
    try:
        await Orchestrator(TEAM, model=model, ledger=ledger).run_team("Goal")
    except PlanError as exc:
        assert "title" in str(exc) and "control character '\\x1b'" in str(exc)
    else:
        raise AssertionError("the plan was accepted")
    assert [subject(r) for r in model.requests] == ["plan", "plan"]  # nothing else ran


async def test_a_huge_invalid_plan_is_repaired_within_the_coordinators_window(ledger):
    # The repair prompt echoes the rejected answer: a long one is cut to fit the window,
    # so the coordinator still gets its repair attempt (not a prompt-size failure).
    answers = iter(["word " * 16_000, GOOD_PLAN])
    model = FunctionModel(lambda r: next(answers) if subject(r) == "plan" else "done")
    model.context_window = 8192
    result = await Orchestrator(TEAM, model=model, ledger=ledger).run_team("Goal")
    assert result.status == "completed"
    plans = [r for r in model.requests if subject(r) == "plan"]
    assert len(plans) == 2
    repair = plans[1].prompt
    assert repair.manifest.total_tokens <= 8192 - TEAM.coordinator.limits.max_output_tokens
    text = repair.messages[-1].content
    assert "holds no JSON object" in text
    assert "word word" in text and "characters of your answer are not shown" in text
    assert verify_run(ledger, result.run_id).ok


async def test_a_run_whose_plan_failed_is_planned_again_on_resume(ledger):
    bad = FunctionModel(lambda r: "no plan here" if subject(r) == "plan" else "done")
    try:
        await Orchestrator(TEAM, model=bad, ledger=ledger).run_team("Goal")
    except PlanError:
        pass
    else:
        raise AssertionError("the plan was accepted")
    (run,) = ledger.list_runs()
    assert run.status == "failed" and run.graph is None

    good = FunctionModel(lambda r: GOOD_PLAN if subject(r) == "plan" else "done")
    resumed = await Orchestrator(TEAM, model=good, ledger=ledger).resume(run.run_id)

    assert resumed.status == "completed"
    # The failed plan's answers are not replayed: the coordinator is asked again.
    assert [subject(r) for r in good.requests] == ["plan", "task:a", "synthesis"]
    assert "no plan here" not in good.requests[0].prompt.messages[-1].content
    report = verify_run(ledger, run.run_id)
    assert report.ok, report.findings


# -- a review loop that never accepts ------------------------------------------------------

REVIEWED = Team(
    agents=(Agent(name="dev", instructions="You implement."),
            Agent(name="rev", instructions="You review.")),
)  # fmt: skip
REVIEWED_TASKS = [
    Task(id="notes", title="Notes", description="Write notes.", assignee="dev"),
    Task(id="build", title="Build", description="Build it.", assignee="dev",
         depends_on=("notes",), review=Review(by=("rev",), rounds=2)),
]  # fmt: skip


def reviewing(verdict):
    def answer(request):
        if subject(request) == "task:notes":
            return "NOTES-RESULT"
        if subject(request) == "task:build":
            return "DRAFT"
        if subject(request).startswith("review:"):
            return json.dumps({"verdict": verdict, "findings": f"{verdict} it"})
        return "SYNTH"

    return answer


async def test_a_task_failed_by_its_reviewer_is_reviewed_again_on_resume(ledger):
    never = FunctionModel(reviewing("revise"))
    first = await Orchestrator(REVIEWED, model=never, ledger=ledger).run_tasks(REVIEWED_TASKS)
    assert first.tasks["build"].status == "failed"
    assert "review.rounds" in (first.tasks["build"].error or "")
    assert [subject(r) for r in never.requests].count("review:build/1/1") == 1

    accepting = FunctionModel(reviewing("accept"))
    resumed = await Orchestrator(REVIEWED, model=accepting, ledger=ledger).resume(first.run_id)

    assert resumed.status == "completed"
    assert resumed.tasks["build"].result == "DRAFT"
    # The finished task is kept and not sent again; the reviewer is asked, not replayed.
    assert [subject(r) for r in accepting.requests] == [
        "task:build", "review:build/1/1", "synthesis",
    ]  # fmt: skip
    assert "NOTES-RESULT" in accepting.requests[0].prompt.messages[-1].content
    report = verify_run(ledger, first.run_id)
    assert report.ok, report.findings


async def test_verify_pairs_each_sessions_reviewer_with_its_own_verdict(ledger, tmp_path):
    first = await Orchestrator(REVIEWED, model=FunctionModel(reviewing("revise")),
                               ledger=ledger).run_tasks(REVIEWED_TASKS)  # fmt: skip
    await Orchestrator(REVIEWED, model=FunctionModel(reviewing("accept")),
                       ledger=ledger).resume(first.run_id)  # fmt: skip
    ledger.flush()
    # The second session's reviewer is made to say what the first one said: the same
    # candidate, the first session's verdict. Its own round event says "accept".
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        rows = conn.execute(
            "SELECT call_id, response FROM calls WHERE subject = 'review:build/1/1' ORDER BY rowid"
        ).fetchall()
        assert len(rows) == 2
        conn.execute("UPDATE calls SET response = ? WHERE call_id = ?", (rows[0][1], rows[1][0]))
    reasons = [f.reason for f in verify_run(ledger, first.run_id).findings]
    assert "the round's recorded verdict is not the reviewer's answer" in reasons


async def test_a_later_round_never_holds_a_child_an_earlier_round_spawned(ledger, tmp_path):
    team = Team(agents=(
        Agent(name="dev", instructions="You implement.", can_spawn=("helper",)),
        Agent(name="helper", instructions="You help."),
        Agent(name="rev", instructions="You review."),
    ))  # fmt: skip
    task = Task(id="build", title="Build", description="Build it.", assignee="dev",
                fan_out=FanOut(agent="helper", goals=("Read the GIVEN notes.",)),
                review=Review(by=("rev",), rounds=2))  # fmt: skip
    spawned = []

    def answer(request):
        origins = request.prompt.manifest.origins
        if subject(request) == "task:build":
            if not spawned:  # round 1 spawns a child of its own, then answers
                spawned.append(1)
                goal = {"agent": "helper", "goal": "Find ROUND-ONE"}
                return ToolCall(id="c1", name="spawn", arguments=goal)
            return "DRAFT"
        if subject(request).startswith("child:"):
            goal = request.prompt.messages[-1].content
            return "FROM-ROUND-ONE" if "ROUND-ONE" in goal else "FROM-FAN-OUT"
        if subject(request).startswith("review:"):
            first = subject(request).split("/")[1] == "1"
            return json.dumps({"verdict": "revise" if first else "accept", "findings": "redo"})
        assert "child_result" not in " ".join(origins)
        return "SYNTH"

    model = FunctionModel(answer)
    orchestrator = Orchestrator(team, model=model, ledger=ledger,
                                options=RunOptions(workspace_root=tmp_path / "ws"))  # fmt: skip
    result = await orchestrator.run_tasks([task])
    assert result.status == "completed", result.error
    rounds = [r.prompt for r in model.requests if subject(r) == "task:build"]
    assert len(rounds) == 3  # round 1: spawn, then its answer; round 2: one answer
    assert "FROM-ROUND-ONE" in rounds[1].text and "FROM-FAN-OUT" in rounds[1].text
    # Round 2 is a fresh implementer: the fan-out's child, not round 1's own.
    assert "FROM-FAN-OUT" in rounds[2].text and "FROM-ROUND-ONE" not in rounds[2].text
    shown = [o for o in rounds[2].manifest.origins if o.startswith("child_result:")]
    assert shown == ["child_result:build.1"]
    report = verify_run(ledger, result.run_id)
    assert report.ok, report.findings


# -- structured output ------------------------------------------------------------------

SCORED = {"type": "object", "properties": {"score": {"type": "number"}}, "required": ["score"]}


async def test_a_number_out_of_json_range_is_sent_back_not_kept_as_infinity(ledger):
    # 1e999 parses as a float infinity: re-serialized it would be `Infinity`, which is not
    # JSON (the literal itself is refused). The model gets the one repair; no result holds it.
    answers = iter(['{"score": 1e999}', '{"score": 7}'])
    model = FunctionModel(lambda r: next(answers) if subject(r) == "task:s" else "done")
    team = Team(agents=(Agent(name="alpha", instructions="A."),))
    tasks = [
        Task(id="s", title="Score", description="Score it.", assignee="alpha",
             output_schema=SCORED),
        Task(id="t", title="Use", description="Use it.", assignee="alpha", depends_on=("s",)),
    ]  # fmt: skip
    result = await Orchestrator(team, model=model, ledger=ledger).run_tasks(tasks)
    assert result.status == "completed"
    assert json.loads(result.result("s") or "") == {"score": 7}
    repair = [r for r in model.requests if subject(r) == "task:s"][1].prompt.messages[-1].content
    assert "1e999" in repair and "out of range" in repair
    (use,) = [r for r in model.requests if subject(r) == "task:t"]
    assert '"score": 7' in use.prompt.text and "Infinity" not in use.prompt.text
    assert verify_run(ledger, result.run_id).ok


async def test_a_number_out_of_range_twice_fails_the_task(ledger):
    model = FunctionModel(lambda r: '{"score": -1e400}' if subject(r) == "task:s" else "done")
    team = Team(agents=(Agent(name="alpha", instructions="A."),))
    task = Task(id="s", title="S", description="Score.", assignee="alpha", output_schema=SCORED)
    result = await Orchestrator(team, model=model, ledger=ledger).run_tasks([task])
    assert result.tasks["s"].status == "failed" and result.tasks["s"].result is None
    assert "out of range" in (result.tasks["s"].error or "")
    assert [subject(r) for r in model.requests].count("task:s") == 2  # one repair, not more


# -- the coordinator's limits.max_model_calls -------------------------------------------------


def capped_team(calls):
    lead = Agent(name="lead", instructions="Lead.", limits=AgentLimits(max_model_calls=calls))
    return Team(agents=(Agent(name="alpha", instructions="A."),), coordinator=lead)


async def test_the_coordinators_max_model_calls_caps_its_planning(ledger):
    model = FunctionModel(lambda r: "not a plan" if subject(r) == "plan" else "done")
    try:
        await Orchestrator(capped_team(1), model=model, ledger=ledger).run_team("Goal")
    except LimitExceeded as exc:
        assert exc.limit == "max_model_calls" and exc.subject == "plan"
    else:
        raise AssertionError("the repair was sent")
    assert [subject(r) for r in model.requests] == ["plan"]  # the repair was not sent
    (run,) = ledger.list_runs()
    assert run.status == "failed" and "max_model_calls" in (run.error or "")
    (breach,) = ledger.events(run.run_id, "limit_exceeded")
    assert breach.subject == "plan" and breach.data["limit"] == "max_model_calls"
    assert (breach.data["value"], breach.data["maximum"]) == (2, 1)


async def test_the_coordinators_max_model_calls_caps_a_map_reduce_synthesis(ledger):
    # 40 long results overflow an 8k window: the synthesis maps them in several steps.
    model = FunctionModel(lambda r: "word " * 400 if subject(r).startswith("task:") else "sum")
    model.context_window = 8192
    tasks = [Task(id=f"t{i}", title=f"T{i}", description=f"Do {i}.", assignee="alpha")
             for i in range(40)]  # fmt: skip
    result = await Orchestrator(capped_team(3), model=model, ledger=ledger).run_tasks(tasks)
    sent = [subject(r) for r in model.requests if subject(r).startswith("synthesis")]
    assert len(sent) == 3  # the cap: no fourth map or reduce call was sent
    assert result.synthesis is None
    assert "synthesis failed" in (result.error or "") and "max_model_calls" in (result.error or "")
    assert all(t.status == "completed" for t in result.tasks.values())  # results are kept
    (breach,) = ledger.events(result.run_id, "limit_exceeded")
    assert breach.subject == "synthesis" and breach.data["limit"] == "max_model_calls"
    assert verify_run(ledger, result.run_id).ok


# -- a child that failed ------------------------------------------------------------------


async def test_a_child_that_failed_is_asked_again_on_resume(ledger, tmp_path):
    # The child calls a tool at every step and fails at max_steps; its parent's structured
    # answer then fails too. On resume the child is asked again, not replayed into the
    # same failure.
    def note(text: str) -> str:
        """Take a note."""
        return "noted"

    team = Team(agents=(
        Agent(name="lead", instructions="You lead.", can_spawn=("helper",)),
        Agent(name="helper", instructions="You help.", tools=("note",),
              limits=AgentLimits(max_steps=2)),
    ))  # fmt: skip
    task = Task(id="p", title="P", description="Answer.", assignee="lead", output_schema=SCORED,
                fan_out=FanOut(agent="helper", goals=("Find the score.",)))  # fmt: skip

    def answer(stuck):
        def reply(request):
            if subject(request).startswith("child:"):
                steps = len([o for o in request.prompt.manifest.origins if o.startswith("tool:")])
                return ToolCall(id=f"n{steps}", name="note", arguments={"text": str(steps)}) \
                    if stuck else "SCORE-7"  # fmt: skip
            if subject(request) == "task:p":
                text = request.prompt.text
                return '{"score": 7}' if "SCORE-7" in text else "no score"
            return "SYNTH"

        return FunctionModel(reply)

    options = RunOptions(workspace_root=tmp_path / "ws")
    first = await Orchestrator(team, model=answer(True), ledger=ledger, tools={"note": note},
                               options=options).run_tasks([task])  # fmt: skip
    assert first.tasks["p"].status == "failed"
    healthy = answer(False)
    resumed = await Orchestrator(team, model=healthy, ledger=ledger, tools={"note": note},
                                 options=options).resume(first.run_id)  # fmt: skip
    assert resumed.status == "completed", resumed.error
    assert [subject(r) for r in healthy.requests] == ["child:p.1", "task:p", "synthesis"]
    assert json.loads(resumed.result("p") or "") == {"score": 7}
    report = verify_run(ledger, first.run_id)
    assert report.ok, report.findings
