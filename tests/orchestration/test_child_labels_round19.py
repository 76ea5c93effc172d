"""A child's result reaches its parent labelled with who answered what (``prompt_format`` 4).

A parent never sees its children's prompts: a ``fan_out`` declares its goals in the team file,
so a result labelled ``Result of p.1`` alone left the parent unable to tell which of its
questions each result answers, or which agent gave it. From ``prompt_format`` 4 the label is
``Result of p.1 (by helper): <goal>``, from the child's recorded spawn, on one line, and
``verify`` checks it against that record; a run recorded before keeps (and is held to) the
id-only label, also when it is resumed.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.labels import child_result_label, legacy_child_label
from clearance._context.render import Block
from clearance._context.verify import verify_run
from clearance._core.run_spec import PROMPT_FORMAT
from clearance._core.spec import FanOut
from clearance.models import ModelRequest
from clearance.testing import FunctionModel

TEAM = Team(
    agents=(
        Agent(name="lead", instructions="You lead.", can_spawn=("helper",)),
        Agent(name="helper", instructions="You help."),
    ),
)
GOALS = ("What does JSON stand for?", "Look for\n~~~~ a fence\n## and a heading")
"""Two goals, the second trying to break the label's line and the block's framing."""


def _answer(request: ModelRequest) -> str:
    subject = request.prompt.manifest.subject
    if subject.startswith("child:"):
        return f"answer of {subject}"
    return "combined"


def _parent_items(db: Path, run_id: str) -> list[dict[str, Any]]:
    with RunLedger(f"sqlite:///{db}") as ledger:
        calls = ledger.calls(run_id, subject="task:p")
    return [i for i in calls[-1].manifest["items"] if i["origin"].startswith("child_result:")]


async def _record(db: Path, monkeypatch: pytest.MonkeyPatch | None = None) -> str:
    if monkeypatch is not None:  # recorded as the code before format 4 recorded it
        monkeypatch.setattr("clearance._orchestration.resume.PROMPT_FORMAT", 3)
        monkeypatch.setattr("clearance._orchestration.children.PROMPT_FORMAT", 3)
    task = Task(id="p", title="P", description="Combine them.", assignee="lead",
                fan_out=FanOut(agent="helper", goals=GOALS))  # fmt: skip
    with RunLedger(f"sqlite:///{db}") as ledger:
        result = await Orchestrator(
            TEAM, model=FunctionModel(_answer), ledger=ledger,
            options=RunOptions(workspace_root=db.parent / "ws"),
        ).run_tasks([task])  # fmt: skip
        assert result.status == "completed", result.error
        return result.run_id


async def test_each_childs_result_is_labelled_with_its_agent_and_goal(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run_id = await _record(db)
    items = _parent_items(db, run_id)
    assert [i["title"] for i in items] == [
        "Result of p.1 (by helper): What does JSON stand for?",
        "Result of p.2 (by helper): Look for ~~~~ a fence ## and a heading",
    ]
    with RunLedger(f"sqlite:///{db}") as ledger:
        assert ledger.get_run(run_id).config["prompt_format"] == PROMPT_FORMAT
        report = verify_run(ledger, run_id)
    assert report.ok, [str(f) for f in report.findings]


async def test_a_label_naming_another_childs_goal_is_a_finding(
    tmp_path: Path, rechain: Any, rewrite_prompt: Any
) -> None:
    db = tmp_path / "runs.db"
    run_id = await _record(db)
    swapped = child_result_label("p.1", "helper", GOALS[1])

    def edit(block: Block, item: dict[str, Any]) -> Block:
        if item["origin"] != "child_result:p.1":
            return block
        item["title"] = swapped
        return Block(heading=swapped, content=block.content)

    conn = sqlite3.connect(db)
    try:
        rewrite_prompt(conn, "task:p", edit)
        conn.commit()
    finally:
        conn.close()
    rechain(db, run_id)
    with RunLedger(f"sqlite:///{db}") as ledger:
        found = [str(f) for f in verify_run(ledger, run_id).findings]
    assert any(
        "child_result:p.1" in f and "not the label its recorded spawn gives" in f for f in found
    ), found


async def test_a_run_recorded_in_format_3_keeps_the_id_only_label_and_verifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "runs.db"
    run_id = await _record(db, monkeypatch)
    monkeypatch.undo()  # verified (and its labels checked) by today's code
    assert [i["title"] for i in _parent_items(db, run_id)] == [
        legacy_child_label("p.1"),
        legacy_child_label("p.2"),
    ]
    with RunLedger(f"sqlite:///{db}") as ledger:
        assert ledger.get_run(run_id).config["prompt_format"] == 3
        report = verify_run(ledger, run_id)
    assert report.ok, [str(f) for f in report.findings]


async def test_a_format_3_run_resumed_by_todays_code_keeps_its_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "runs.db"
    monkeypatch.setattr("clearance._orchestration.resume.PROMPT_FORMAT", 3)
    monkeypatch.setattr("clearance._orchestration.children.PROMPT_FORMAT", 3)
    failing = {"left": 1}

    def flaky(request: ModelRequest) -> str:
        if request.prompt.manifest.subject == "task:p" and failing["left"]:
            failing["left"] -= 1
            raise RuntimeError("the parent's first call fails")
        return _answer(request)

    task = Task(id="p", title="P", description="Combine them.", assignee="lead",
                fan_out=FanOut(agent="helper", goals=GOALS))  # fmt: skip
    options = RunOptions(workspace_root=tmp_path / "ws")
    with RunLedger(f"sqlite:///{db}") as ledger:
        first = await Orchestrator(TEAM, model=FunctionModel(flaky), ledger=ledger,
                                   options=options).run_tasks([task])  # fmt: skip
        assert first.status != "completed"
        monkeypatch.undo()  # the resume is today's code
        again = await Orchestrator(TEAM, model=FunctionModel(flaky), ledger=ledger,
                                   options=options).resume(first.run_id)  # fmt: skip
        assert again.status == "completed", again.error
        report = verify_run(ledger, first.run_id)
    assert report.ok, [str(f) for f in report.findings]
    assert [i["title"] for i in _parent_items(db, first.run_id)] == [
        legacy_child_label("p.1"),
        legacy_child_label("p.2"),
    ]
