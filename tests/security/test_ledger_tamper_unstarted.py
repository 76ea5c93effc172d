"""Attacks on the tasks of a run that never started: they have no row, the chained graph has them.

A task gets its first ledger row when it first changes state, so a run stopped early holds
tasks with no row and no chain entry. Each edit below, made with sqlite3 on the file, is
caught: by the hash chain (the run's own record holds the graph), and, for a forger who
recomputes an unkeyed chain, by the ledger key or by the records' consistency.
"""

import asyncio
import json
import sqlite3

import pytest

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._context.verify import verify_run
from clearance._state.chain import LEDGER_KEY_ENV
from clearance.testing import FunctionModel

KEY = "7" * 64
TEAM = Team(
    agents=(Agent(name="alice", instructions="Alice."), Agent(name="bob", instructions="Bob.")),
    coordinator=Agent(name="lead", instructions="Lead."),
)
TASKS = [
    Task(id="a", title="A", description="Do a.", assignee="alice"),
    Task(id="x", title="X", description="Do x.", assignee="bob"),
    Task(id="b", title="B", description="Do b.", assignee="bob", depends_on=["a"]),
]


def stopped_run(tmp_path, keyed: bool, monkeypatch) -> tuple:
    """A run cancelled while task ``a`` is in flight: ``b`` never started."""
    if keyed:
        monkeypatch.setenv(LEDGER_KEY_ENV, KEY)
    else:
        monkeypatch.delenv(LEDGER_KEY_ENV, raising=False)
    db = tmp_path / "runs.db"

    async def run() -> str:
        in_flight = asyncio.Event()

        async def answer(request):
            if request.prompt.manifest.subject == "task:a":
                in_flight.set()
                await asyncio.sleep(3600)
            return "done"

        with RunLedger(f"sqlite:///{db}") as ledger:
            orch = Orchestrator(TEAM, model=FunctionModel(answer), ledger=ledger)
            running = asyncio.create_task(orch.run_tasks(TASKS, goal="G"))
            await in_flight.wait()
            running.cancel()
            with pytest.raises(asyncio.CancelledError):
                await running
            (run,) = ledger.list_runs()
            return run.run_id

    run_id = asyncio.run(run())
    with RunLedger(f"sqlite:///{db}", read_only=True) as ledger:
        assert [r["task_id"] for r in ledger.record_rows(run_id)["task"]] == ["a", "x"]
        assert [(t.task_id, t.status) for t in ledger.tasks(run_id)][::2] == [
            ("a", "interrupted"), ("b", "pending"),
        ]  # fmt: skip
    return db, run_id


def verify(db, run_id):
    with RunLedger(f"sqlite:///{db}", read_only=True) as ledger:
        return verify_run(ledger, run_id)


def insert_task(db, run_id, task_id, status, result):
    conn = sqlite3.connect(db)
    conn.execute(
        "INSERT INTO tasks (run_id, task_id, title, assignee, depends_on, memory_scope, status, "
        "result) VALUES (?, ?, ?, 'bob', '[]', 'dependencies', ?, ?)",
        (run_id, task_id, task_id.upper(), status, result),
    )
    conn.commit()
    conn.close()


def task_not_in_graph(db, run_id):
    insert_task(db, run_id, "z", "pending", None)


def task_removed_from_graph(db, run_id):
    conn = sqlite3.connect(db)
    (graph,) = conn.execute("SELECT graph FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    kept = [t for t in json.loads(graph) if t["id"] != "b"]
    conn.execute("UPDATE runs SET graph = ? WHERE run_id = ?", (json.dumps(kept), run_id))
    conn.commit()
    conn.close()


def forged_row_of_an_unstarted_task(db, run_id):
    insert_task(db, run_id, "b", "completed", "FORGED")


ATTACKS = {
    "a task row for a task not in the graph": (task_not_in_graph, "task z"),
    "a task removed from the graph": (task_removed_from_graph, "run"),
    "a forged row for a task that never started": (forged_row_of_an_unstarted_task, "task b"),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_each_attack_is_caught_by_the_chain_without_a_key(tmp_path, monkeypatch, attack):
    db, run_id = stopped_run(tmp_path, keyed=False, monkeypatch=monkeypatch)
    assert verify(db, run_id).ok
    edit, subject = ATTACKS[attack]
    edit(db, run_id)
    findings = [(f.subject, f.reason) for f in verify(db, run_id).findings]
    assert any(s == subject and "hash chain" in r for s, r in findings), findings


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_with_the_key_each_attack_is_caught_even_with_the_chain_recomputed(
    tmp_path, monkeypatch, attack, rechain
):
    db, run_id = stopped_run(tmp_path, keyed=True, monkeypatch=monkeypatch)
    clean = verify(db, run_id)
    assert clean.ok and clean.keyed and clean.macs_checked
    ATTACKS[attack][0](db, run_id)
    rechain(db, run_id)
    reasons = [f.reason for f in verify(db, run_id).findings]
    assert any("not keyed" in r for r in reasons), reasons


def test_a_rechained_row_of_a_task_not_in_the_graph_is_reported(tmp_path, monkeypatch, rechain):
    """Without a key a forger can recompute the chain; the row still names no graph task."""
    db, run_id = stopped_run(tmp_path, keyed=False, monkeypatch=monkeypatch)
    task_not_in_graph(db, run_id)
    rechain(db, run_id)
    findings = [(f.subject, f.reason) for f in verify(db, run_id).findings]
    reason = "the task is recorded, but it is not in the run's recorded graph"
    assert findings == [("task:z", reason)]


def test_a_rechained_forged_result_of_a_task_that_never_started_is_reported(
    tmp_path, monkeypatch, rechain
):
    db, run_id = stopped_run(tmp_path, keyed=False, monkeypatch=monkeypatch)
    forged_row_of_an_unstarted_task(db, run_id)
    rechain(db, run_id)
    findings = [(f.subject, f.reason) for f in verify(db, run_id).findings]
    assert ("task:b", "the task is recorded completed, but no successful model call of it is") in (
        findings
    )
