"""An isolated task's result reaches its dependents byte for byte, less only its STATUS line.

Before, the answer was split with `str.splitlines` (U+2028, form feeds, bare CRs became
``\\n``), stripped, and every ``QUESTION:`` line was dropped, also from a ``done`` answer:
an FAQ lost its questions on its way to the task that needed them.
"""

import sqlite3

import pytest

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.isolated import parse_status, subagent_result
from clearance._context.verify import verify_run
from clearance._context.verify_results import _legacy_subagent_result
from clearance.testing import FunctionModel

BODY = (
    "    def f():  # indented first line\r\n"
    "        return 1\n"
    "QUESTION: What does f return?\n"
    "Answer: 1\u2028(a line separator)\x0c(a form feed)\rbare CR\n"
    "\n"
    "Status of the build: green"
)

TEAM = Team(agents=(Agent(name="worker", instructions="You work."),))


def _tasks() -> list[Task]:
    return [
        Task(id="faq", title="FAQ", description="Write the FAQ.", assignee="worker",
             mode="isolated"),
        Task(id="use", title="Use", description="Use the FAQ.", assignee="worker",
             depends_on=("faq",)),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (f"{BODY}\nSTATUS: done\n", ("done", BODY, None, None)),
        (f"\n\n{BODY}\n\n**Status:** DONE\n  \n", ("done", BODY, None, None)),
        (f"STATUS: done\n{BODY}", ("done", BODY, None, None)),
        (f"{BODY}\nSTATUS: done_with_concerns\nSlow tests.\u2028Flaky.",
         ("done_with_concerns", BODY, None, "Slow tests.\u2028Flaky.")),
        (f"{BODY}\nSTATUS: needs_context\nQUESTION: Which DB?",
         ("needs_context", BODY, "What does f return? Which DB?", None)),
        ("Cannot.\r\nSTATUS: blocked\r\nNo access.", ("blocked", "Cannot.", None, "No access.")),
        (BODY, ("done_with_concerns", BODY, None, "the answer has no STATUS line")),
    ],
)  # fmt: skip
def test_only_the_status_line_is_taken_out(answer: str, expected: tuple) -> None:
    assert parse_status(answer) == expected


async def test_the_dependent_receives_the_isolated_answer_byte_for_byte(tmp_path) -> None:
    async def answer(request):
        if request.prompt.manifest.subject == "isolated:faq":
            return f"{BODY}\nSTATUS: done"
        return "used"

    model = FunctionModel(answer)
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        result = await Orchestrator(
            TEAM, model=model, ledger=ledger,
            options=RunOptions(input_root=tmp_path, workspace_root=tmp_path / "ws"),
        ).run_tasks(_tasks())  # fmt: skip
        assert result.status == "completed", result.error
        assert result.tasks["faq"].result == BODY
        (use,) = [r for r in model.requests if r.prompt.manifest.subject == "task:use"]
        assert BODY in use.prompt.messages[-1].content
        (item,) = [i for i in use.prompt.manifest.items if i.origin == "task_result:faq"]
        assert item.content == BODY
        report = verify_run(ledger, result.run_id)
        assert report.ok, [str(f) for f in report.findings]


async def test_a_ledger_kept_in_the_earlier_form_still_verifies(tmp_path, monkeypatch) -> None:
    """A run recorded by an earlier version (results in the earlier form) verifies."""
    import clearance._agents.isolation as isolation

    async def answer(request):
        if request.prompt.manifest.subject == "isolated:faq":
            return f"{BODY}\nSTATUS: done"
        return "used"

    legacy = _legacy_subagent_result(f"{BODY}\nSTATUS: done")
    assert legacy is not None and legacy != BODY and "QUESTION" not in legacy
    db = tmp_path / "runs.db"
    with monkeypatch.context() as patch, RunLedger(f"sqlite:///{db}") as ledger:
        patch.setattr(isolation, "subagent_result", _legacy_subagent_result)
        result = await Orchestrator(
            TEAM, model=FunctionModel(answer), ledger=ledger,
            options=RunOptions(input_root=tmp_path, workspace_root=tmp_path / "ws"),
        ).run_tasks(_tasks())  # fmt: skip
        assert result.tasks["faq"].result == legacy
    with RunLedger(f"sqlite:///{db}") as ledger:
        report = verify_run(ledger, result.run_id)
        assert report.ok, [str(f) for f in report.findings]


def test_only_the_two_forms_are_accepted(tmp_path, rechain) -> None:
    """Another text as the isolated task's result is a finding, the chain rebuilt or not."""
    import asyncio

    async def answer(request):
        if request.prompt.manifest.subject == "isolated:faq":
            return f"{BODY}\nSTATUS: done"
        return "used"

    db = tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        result = asyncio.run(Orchestrator(
            TEAM, model=FunctionModel(answer), ledger=ledger,
            options=RunOptions(input_root=tmp_path, workspace_root=tmp_path / "ws"),
        ).run_tasks([_tasks()[0]]))  # fmt: skip
    conn = sqlite3.connect(db)
    try:
        conn.execute("UPDATE tasks SET result = ? WHERE task_id = 'faq'", (BODY + "!",))
        conn.commit()
    finally:
        conn.close()
    rechain(db, result.run_id)
    with RunLedger(f"sqlite:///{db}") as ledger:
        reasons = [str(f) for f in verify_run(ledger, result.run_id).findings]
    assert any("not the response of its last call" in r for r in reasons), reasons


def test_subagent_result_keeps_concerns_after_the_verbatim_part() -> None:
    text = f"{BODY}\nSTATUS: done_with_concerns\nSlow."
    assert subagent_result(text) == f"{BODY}\n\nConcerns: Slow."
