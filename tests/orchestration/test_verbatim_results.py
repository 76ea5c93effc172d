"""A dependency's result reaches its dependents verbatim, and verify checks the kept forms."""

import sqlite3
from dataclasses import replace

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._context.answers import REPEAT_MARK, TRUNCATED_MARK, mark_answer
from clearance._context.render import parse_user_message
from clearance._context.verify import verify_run
from clearance.models import ModelRequest, ModelResponse
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


class CutOff(FunctionModel):
    """Answers every call with a loop, cut off at the output limit."""

    async def request(self, request: ModelRequest) -> ModelResponse:
        response = await super().request(request)
        return replace(response, finish_reason="length")


async def test_a_marked_result_without_its_answer_marked_event_is_a_finding(ledger, monkeypatch):
    model = CutOff(lambda r: "Answer:\n" + "again and again\n" * 20)
    result = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks(tasks()[:1])
    assert result.result("a") == f"Answer:\nagain and again\n\n{REPEAT_MARK}\n\n{TRUNCATED_MARK}"
    assert verify_run(ledger, result.run_id).ok  # marked, and the marking recorded
    # A runner that marks without recording it: the result is no longer accounted for.
    from clearance._orchestration.task_runner import TaskRunner

    def silent(self, subject, text, finish_reason):
        return mark_answer(text, finish_reason=finish_reason).text

    monkeypatch.setattr(TaskRunner, "marked", silent)
    quiet = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks(tasks()[:1])
    reasons = {(f.subject, f.reason) for f in verify_run(ledger, quiet.run_id).findings}
    assert reasons == {("task:a", "the result is marked, but no answer_marked event is")}
