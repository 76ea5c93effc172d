"""What a task's panel says it saw matches what its recorded prompts held, on every call path.

Two claims of the page did not hold:

- an isolated task (``mode: isolated``, subject ``isolated:<id>``) is given its
  dependencies' results like any task, but the page read a task's clearance from its
  ``task:<id>`` calls only: the dependency whose result it was given was listed as "not
  cleared, nothing of it reached this task" and greyed in the graph;
- a reviewer's calls (subject ``review:<task>/<round>/<stage>``) were put under the
  coordinator, whose panel says its calls "have the full view", and left out of their
  task's calls, timeline and token counts, though a reviewer sees its task's text and the
  candidate only.
"""

from __future__ import annotations

import json
import re

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._core.review import Review
from clearance._view import load_run_view, render_run_page
from clearance.testing import FunctionModel


def panel(page: str, key: str) -> str:
    start = page.index(f'<article class="detail" id="task-{key}"')
    return page[start : page.index("</article>", start)]


def graph_json(page: str) -> dict:
    match = re.search(r'<script type="application/json" id="graph-data">(.*?)</script>', page)
    assert match is not None
    return json.loads(match[1])


async def test_an_isolated_task_is_shown_cleared_for_the_results_it_was_given(tmp_path):
    team = Team(agents=(Agent(name="worker", instructions="You work."),))
    tasks = [
        Task(id="faq", title="FAQ", description="Write.", assignee="worker"),
        Task(id="other", title="Other", description="Other.", assignee="worker"),
        Task(id="use", title="Use", description="Use it.", assignee="worker",
             depends_on=("faq",), mode="isolated"),
    ]  # fmt: skip

    def answer(request):
        if request.prompt.manifest.subject == "isolated:use":
            return "used\nSTATUS: done"
        return f"RESULT of {request.prompt.manifest.subject}"

    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        result = await Orchestrator(
            team, model=FunctionModel(answer), ledger=ledger,
            options=RunOptions(input_root=tmp_path, workspace_root=tmp_path / "ws"),
        ).run_tasks(tasks)  # fmt: skip
        assert result.status == "completed", result.error
        view = load_run_view(ledger, result.run_id)
    use = view.tasks[2]
    assert [c.call.subject for c in use.calls] == ["isolated:use"]
    assert "task_result:faq" in [i["origin"] for i in use.calls[0].items]  # it was given faq
    page = render_run_page(view)
    assert graph_json(page)["cleared"]["2"] == [0]
    section = panel(page, "2")
    assert re.findall(r'<li class="cleared">result of <code>([^<]+)</code>', section) == ["faq"]
    assert re.findall(r'<li class="not-cleared">([^ ]+) ', section) == ["other"]
    assert "RESULT of task:faq" in section  # the prompt that held it


async def test_a_reviewers_calls_belong_to_the_task_they_review(tmp_path):
    team = Team(
        agents=(Agent(name="dev", instructions="You implement."),
                Agent(name="rev", instructions="You review.")),
    )  # fmt: skip
    tasks = [
        Task(id="notes", title="Notes", description="Write notes.", assignee="dev"),
        Task(id="build", title="Build", description="Build it.", assignee="dev",
             depends_on=("notes",), review=Review(by=("rev",), rounds=2)),
    ]  # fmt: skip

    def answer(request):
        subject = request.prompt.manifest.subject
        if subject.startswith("review:"):
            return json.dumps({"verdict": "accept", "findings": "fine"})
        return f"RESULT of {subject}"

    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        result = await Orchestrator(team, model=FunctionModel(answer),
                                    ledger=ledger).run_tasks(tasks)  # fmt: skip
        assert result.status == "completed", result.error
        view = load_run_view(ledger, result.run_id)
    build = view.tasks[1]
    subjects = [c.call.subject for c in build.calls]
    assert subjects == ["task:build", "review:build/1/1"]
    assert all(not c.call.subject.startswith("review:") for c in view.coordinator_calls)
    review = build.calls[1].call.usage
    assert build.prompt_tokens == sum(c.call.usage.prompt_tokens for c in build.calls)
    assert review.prompt_tokens > 0
    page = render_run_page(view)
    assert "review:build/1/1" in panel(page, "1")
    assert "review:build/1/1" not in panel(page, "coordinator")
    # The task's clearance is its own prompt's, not the reviewer's (which admits no result).
    assert graph_json(page)["cleared"]["1"] == [0]
