"""The ledger under two writing processes at once, and after a process killed mid-write."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from clearance import RunLedger

WRITER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from clearance import MessageBus, RunLedger, Task, TaskGraph
    from clearance._state.queue import TaskQueue
    from clearance.models import Usage

    url, name, go = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    graph = TaskGraph(
        Task(id=f"t{i}", title=f"T{i}", description="d", assignee="a") for i in range(60)
    )
    queue = TaskQueue(graph)
    bus = MessageBus()
    with RunLedger(url) as ledger:
        while not go.exists():
            time.sleep(0.005)
        ledger.start_run(run_id=name, team=name, goal=None, graph=graph.to_dict())
        for task in graph:
            queue.start(task.id)
            ledger.record_task(name, queue.get(task.id))
            queue.complete(task.id, f"{name}:{task.id}")
            ledger.record_task(name, queue.get(task.id))
            bus.send("a", "b", f"{name} finished {task.id}")
            ledger.record_messages(name, bus.all())
        ledger.finish_run(name, status="completed", synthesis=name, usage=Usage(), error=None)
    """
)

CRASHER = textwrap.dedent(
    """
    import os, signal, sys
    from clearance import RunLedger, Task, TaskGraph
    from clearance._state.queue import TaskQueue

    url = sys.argv[1]
    graph = TaskGraph([Task(id="a", title="A", description="d", assignee="x")])
    queue = TaskQueue(graph)
    ledger = RunLedger(url)
    ledger.start_run(run_id="run_committed", team="t", goal=None, graph=graph.to_dict())
    queue.start("a")
    queue.complete("a", "kept")
    ledger.record_task("run_committed", queue.get("a"))
    # Die in the middle of a write transaction, with the WAL holding uncommitted pages.
    with ledger._writing("crash") as conn:
        conn.exec_driver_sql(
            "INSERT INTO runs (run_id, team, status, config, requests, prompt_tokens, "
            "completion_tokens, created_at) VALUES ('run_lost', 't', 'running', '{}', 0, 0, 0, "
            "'2026-01-01 00:00:00')"
        )
        print("in-transaction", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


def env() -> dict[str, str]:
    src = str(Path(__file__).parents[2] / "src")
    variables = dict(os.environ)
    variables["PYTHONPATH"] = os.pathsep.join(p for p in (src, variables.get("PYTHONPATH")) if p)
    return variables


def test_two_processes_write_one_ledger_at_once(tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    RunLedger(url).close()  # schema in place before the race
    go = tmp_path / "go"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, url, f"run_writer{n}", str(go)],
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in (1, 2)
    ]
    time.sleep(0.5)
    go.touch()
    for writer in writers:
        _, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err

    with RunLedger(url) as ledger:
        for name in ("run_writer1", "run_writer2"):
            run = ledger.get_run(name)
            assert run.status == "completed" and run.synthesis == name
            tasks = ledger.tasks(name)
            assert [t.task_id for t in tasks] == [f"t{i}" for i in range(60)]
            assert all(t.status == "completed" and t.result == f"{name}:{t.task_id}" for t in tasks)
            assert len(ledger.messages(name)) == 60
    with sqlite3.connect(tmp_path / "shared.db") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_database_from_a_killed_process_opens_cleanly(tmp_path):
    path = tmp_path / "crashed.db"
    url = f"sqlite:///{path}"
    proc = subprocess.run(
        [sys.executable, "-c", CRASHER, url],
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "in-transaction" in proc.stdout
    assert Path(f"{path}-wal").exists()  # the crash left the write-ahead log behind

    with RunLedger(url) as ledger:
        assert [r.run_id for r in ledger.list_runs()] == ["run_committed"]
        assert ledger.tasks("run_committed")[0].result == "kept"
        ledger.finish_run(
            "run_committed",
            status="interrupted",
            synthesis=None,
            usage=ledger.get_run("run_committed").usage,
            error="crashed",
        )
        assert ledger.get_run("run_committed").status == "interrupted"
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
