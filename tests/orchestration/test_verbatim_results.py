"""A dependency's result reaches its dependents verbatim, and verify checks the kept forms."""

import sqlite3

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._context.render import parse_user_message
from clearance._context.verify import verify_run
from clearance.testing import FunctionModel

TEAM = Team(agents=(Agent(name="w", instructions="Work."),))
PADDED = "  \n\tindented first line\nlast line  \n\n"


def tasks():
    return [
        Task(id="a", title="A", description="Produce.", assignee="w"),
        Task(id="b", title="B", description="Use a.", assignee="w", depends_on=["a"]),
    ]


async def test_a_dependent_receives_the_answer_exactly_as_the_model_gave_it(ledger):
    model = FunctionModel(lambda r: PADDED if r.prompt.manifest.subject == "task:a" else "ok")
    result = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks(tasks())
    assert result.status == "completed"
    assert result.result("a") == PADDED
    (prompt_b,) = [r.prompt for r in model.requests if r.prompt.manifest.subject == "task:b"]
    sections, _ = parse_user_message(prompt_b.messages[1].content)
    (results,) = [s for s in sections if s.heading == "## Context from prerequisite tasks"]
    assert [b.content for b in results.blocks] == [PADDED]
    assert verify_run(ledger, result.run_id).ok


async def test_a_whitespace_only_answer_is_still_an_empty_completion(ledger):
    model = FunctionModel(lambda r: " \n\t ")
    result = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks(tasks()[:1])
    assert result.status == "failed"
    assert "empty completion" in (result.tasks["a"].error or ""), result.tasks["a"]


async def test_a_result_that_is_no_documented_form_of_the_response_is_a_finding(tmp_path):
    db = tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        model = FunctionModel(lambda r: PADDED)
        result = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks(tasks()[:1])
        assert verify_run(ledger, result.run_id).ok
    # Kept forms: verbatim, marked, or stripped (runs recorded before results were verbatim).
    for kept, ok in ((PADDED.strip(), True), (PADDED + " ", False), (" " + PADDED, False)):
        conn = sqlite3.connect(db)
        conn.execute("UPDATE tasks SET result = ? WHERE task_id = 'a'", (kept,))
        conn.commit()
        conn.close()
        with RunLedger(f"sqlite:///{db}") as ledger:
            findings = {(f.subject, f.reason) for f in verify_run(ledger, result.run_id).findings}
        wrong = ("task:a", "the task's recorded result is not the response of its last call")
        assert (wrong not in findings) is ok, (kept, findings)


def test_mark_answer_keeps_an_unmarked_answer_verbatim_and_strips_only_a_marked_one():
    from clearance._context.answers import TRUNCATED_MARK, mark_answer

    assert mark_answer(PADDED, finish_reason="stop").text == PADDED
    assert mark_answer(PADDED, finish_reason=None).text == PADDED
    cut = mark_answer(PADDED, finish_reason="length")
    assert cut.text == f"{PADDED.strip()}\n\n{TRUNCATED_MARK}" and cut.truncated
