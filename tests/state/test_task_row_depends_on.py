"""A task's ``depends_on`` column is written from its canonical JSON text, made once per list."""

from __future__ import annotations

import json

from sqlalchemy import create_engine, text

from clearance import RunLedger, Task
from clearance._context.verify import verify_run
from clearance._state.db import JSONText
from clearance._state.ledger.rows import task_row
from clearance._state.queue import TaskState, TaskStatus


def state(task_id: str, depends_on: tuple[str, ...], status: TaskStatus) -> TaskState:
    task = Task(id=task_id, title=task_id, description="d", assignee="a", depends_on=depends_on)
    return TaskState(task=task, status=status)


def test_the_column_text_is_canonical_and_shared_by_each_row_of_a_task():
    first = task_row("r", state("c", ("b", "a"), TaskStatus.RUNNING))["depends_on"]
    second = task_row("r", state("c", ("b", "a"), TaskStatus.COMPLETED))["depends_on"]
    assert type(first) is JSONText and first == '["b","a"]'  # in the task's order
    assert second is first
    assert task_row("r", state("a", (), TaskStatus.READY))["depends_on"] == "[]"


def test_a_list_orjson_refuses_stays_a_list():
    row = task_row("r", state("c", ("a",), TaskStatus.RUNNING))
    assert type(row["depends_on"]) is JSONText
    odd = ("\ud800",)  # a lone surrogate: no task id holds one, an old record might
    from clearance._state.ledger import rows

    assert rows._depends_on(odd) == ["\ud800"]
    assert odd not in rows._DEPENDS_ON


def test_recorded_task_rows_read_back_as_lists_and_verify(tmp_path):
    url = f"sqlite:///{tmp_path}/r.db"
    with RunLedger(url) as ledger:
        ledger.start_run(run_id="run_x", team="t", goal=None, graph=None)
        states = [
            state("a", (), TaskStatus.READY),
            state("b", ("a",), TaskStatus.PENDING),
            state("c", ("a", "b"), TaskStatus.PENDING),
        ]
        with ledger.write_behind():
            ledger.record_tasks("run_x", states)
            ledger.record_tasks("run_x", [state("a", (), TaskStatus.RUNNING)])
        report = verify_run(ledger, "run_x")
    assert report.ok, report
    engine = create_engine(url)
    with engine.connect() as conn:
        stored = dict(conn.execute(text("SELECT task_id, depends_on FROM tasks")).all())
    engine.dispose()
    assert {k: json.loads(v) for k, v in stored.items()} == {"a": [], "b": ["a"], "c": ["a", "b"]}
