"""A PostgreSQL ledger and store whose server ends connections or goes away mid-run.

A backend the server ended while its pooled connection sat idle (``pg_terminate_backend``
by an administrator, an idle timeout, a server restarted) failed the next write on it: one
terminated connection failed a run at its next ledger write. Pooled connections are now
pinged before use, and one the server ended is replaced with nothing sent on it. A server
that is gone ends the run within its deadlines with one line naming the database (password
masked); ``clearance resume`` once it is back completes the run and ``verify`` passes. A group
of ledger writes whose connection was lost while it committed (perhaps committed) is not
written again one write at a time: that recorded states twice and failed on duplicates.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from clearance import ContextStore, RunLedger
from clearance._context.verify_chain import check_chain
from clearance._core.errors import StoreError
from clearance._state.queue import TaskQueue

sys.path.insert(0, str(Path(__file__).parent))
from freezing_proxy import FreezingProxy

pytestmark = pytest.mark.network

SRC = Path(__file__).resolve().parents[2] / "src"

TEAM = """\
name: pgfail
agents:
  - {name: writer, instructions: "You write."}
tasks:
  - {id: first, title: First, description: "FIRST: write one.", assignee: writer}
  - {id: second, title: Second, description: "SECOND: write two.", assignee: writer,
     depends_on: [first]}
  - {id: third, title: Third, description: "THIRD: write three.", assignee: writer,
     depends_on: [second]}
"""


def terminate_backends(url: str, *, application: str | None = None) -> int:
    """End every other session of the database (``pg_terminate_backend``); how many."""
    admin = create_engine(url)
    try:
        with admin.connect() as conn:
            count = conn.execute(
                text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).scalar()
            conn.commit()
    finally:
        admin.dispose()
    return int(count or 0)


class CuttingProxy(FreezingProxy):
    """A proxy that can also `cut`: close every connection and refuse new ones until `restore`.

    Stands for a server that was stopped (and later started again) mid-run. After
    `lose_next_commit_answer`, the connection that next sends ``COMMIT`` is closed once the
    server has answered it, before the answer reaches the client: a transaction committed
    whose client cannot know it was.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.refusing = threading.Event()
        self._commit_armed = False
        self._losing_answer = False
        super().__init__(target)

    def lose_next_commit_answer(self) -> None:
        self._commit_armed = True

    def cut(self) -> None:
        self.refusing.set()
        for sock in list(self._sockets):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._sockets.clear()

    def restore(self) -> None:
        self.refusing.clear()

    def _admits(self) -> bool:
        return not self.refusing.is_set()

    def _passes(self, data: bytes, source: socket.socket, sink: socket.socket) -> bool:
        if self._losing_answer and b"COMMIT" in data:  # the server's answer
            self._losing_answer = False
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            return False
        if self._commit_armed and b"COMMIT" in data:  # the client's
            self._commit_armed = False
            self._losing_answer = True
        return True


def through_proxy(url: str, proxy: FreezingProxy, password: str | None = None) -> str:
    parsed = make_url(url).set(port=proxy.port)
    if password is not None:
        parsed = parsed.set(password=password)
    return parsed.render_as_string(hide_password=False)


# -- the library: connections ended while idle ---------------------------------------------


def test_ledger_and_store_writes_survive_their_idle_connections_being_terminated(
    postgres_url: str,
) -> None:
    run_id = f"run_{uuid.uuid4().hex[:8]}"
    with RunLedger(postgres_url) as ledger, ContextStore(postgres_url) as store:
        ledger.start_run(run_id=run_id, team="t", goal=None, graph=None, config={})
        ledger.flush()
        store.set("ns", "k0", "v0", "a")
        for n in range(1, 4):  # once and again: each time every pooled connection is ended
            assert terminate_backends(postgres_url) >= 2
            ledger.start_run(run_id=f"{run_id}_{n}", team="t", goal=None, graph=None, config={})
            ledger.flush()
            assert store.get("ns", f"k{n - 1}") is not None
            store.set("ns", f"k{n}", f"v{n}", "a")
        ids = {run.run_id for run in ledger.list_runs()}
    assert {run_id, f"{run_id}_1", f"{run_id}_2", f"{run_id}_3"} <= ids


def test_a_group_whose_commit_answer_is_lost_is_not_written_again(postgres_url: str) -> None:
    # The group was committed, the answer lost with the connection: its writes were each
    # sent again, recording its tasks' states twice in the chain and failing on the call's
    # row as a duplicate (UniqueViolation), an error that hid what had happened.
    from test_write_behind import GRAPH, T0, a_prompt, new_run

    from clearance.models import ModelResponse, Usage

    parsed = make_url(postgres_url)
    proxy = CuttingProxy((parsed.host or "127.0.0.1", parsed.port or 5432))
    try:
        ledger = RunLedger(through_proxy(postgres_url, proxy))
        run_id = new_run(ledger)
        ledger.flush()
        queue = TaskQueue(GRAPH)
        with pytest.raises(StoreError) as caught, ledger.write_behind():
            proxy.lose_next_commit_answer()
            ledger.record_tasks(run_id, queue.states())
            queue.start("a")
            ledger.record_task(run_id, queue.get("a"))
            ledger.record_call(
                run_id=run_id, subject="task:a", agent="worker", model_id="fake:x",
                prompt=a_prompt("a"), error=None, started_at=T0, latency_s=0.1,
                response=ModelResponse(text="r", model_id="fake:x", usage=Usage(requests=1)),
            )  # fmt: skip
        ledger.close()
    finally:
        proxy.close()
    message = str(caught.value)
    assert "\n" not in message
    assert "the connection was lost while committing, so it may have been committed" in message
    assert "UniqueViolation" not in message
    with RunLedger(postgres_url, read_only=True) as reader:
        assert [(t.task_id, t.status) for t in reader.tasks(run_id)] == [
            ("a", "running"), ("b", "pending"),
        ]  # fmt: skip
        assert len(reader.calls(run_id)) == 1  # committed, once
        report = check_chain(reader, run_id, None)
    assert report.problems == ()
    assert report.entries == 5  # the run, two tasks, a's new state, the call: none twice


# -- the CLI: a run whose server ends its connections, or goes away, mid-run ------------------


def clearance(tmp: Path, model_url: str, *args: str, timeout: float = 60) -> tuple[int, str, float]:
    environ = {
        **os.environ,
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": "test",
        "PYTHONPATH": str(SRC),
        "COLUMNS": "250",
    }
    for name in ("CLEARANCE_DB", "CLEARANCE_LEDGER_KEY", "CLEARANCE_STORE_DB"):
        environ.pop(name, None)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "clearance", *args], cwd=tmp, env=environ,
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


class Script:
    """The model: answers each task by name, and runs ``on_second`` on the second task's request."""

    def __init__(self, on_second: Any) -> None:
        self.on_second = on_second
        self.received: list[str] = []

    def reply(self, messages: list[dict[str, Any]]) -> str:
        body = "\n".join(m["content"] or "" for m in messages)
        for word in ("FIRST", "SECOND", "THIRD"):
            if f"{word}: write" in body:
                self.received.append(word)
                if word == "SECOND" and self.on_second is not None:
                    on_second, self.on_second = self.on_second, None
                    on_second()
                return f"wrote {word.lower()}"
        self.received.append("synthesis")
        return "summary"


def only_run(url: str) -> str:
    with RunLedger(url, read_only=True) as ledger:
        runs = [run for run in ledger.list_runs() if run.team == "pgfail"]
    assert len(runs) == 1, runs
    return runs[0].run_id


def results(url: str, run_id: str) -> dict[str, str | None]:
    with RunLedger(url, read_only=True) as ledger:
        return {task.task_id: task.result for task in ledger.tasks(run_id)}


@pytest.fixture
def fresh_db(postgres_url: str) -> str:
    """A database of its own on the session's server, so `only_run` finds one run."""
    name = f"pgfail_{uuid.uuid4().hex[:8]}"
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE {name}"))
    finally:
        admin.dispose()

    return make_url(postgres_url).set(database=name).render_as_string(hide_password=False)


def test_a_run_whose_connections_are_terminated_mid_run_completes(
    fresh_db: str, tmp_path: Path, openai_server: Any
) -> None:
    # At every model request: the run's writer and lease renewer, once and again.
    ended: list[int] = []
    script = Script(None)

    def reply(messages: list[dict[str, Any]]) -> str:
        ended.append(terminate_backends(fresh_db))
        return script.reply(messages)

    model = openai_server(reply)
    (tmp_path / "team.yaml").write_text(TEAM)
    code, out, _ = clearance(tmp_path, model, "run", "team.yaml", "--model", "openai:m",
                             "--db", fresh_db)  # fmt: skip
    assert len(ended) == 4 and min(ended) >= 1  # the run's connections, each time
    assert code == 0, out
    run_id = only_run(fresh_db)
    assert results(fresh_db, run_id) == {
        "first": "wrote first", "second": "wrote second", "third": "wrote third",
    }  # fmt: skip
    assert script.received == ["FIRST", "SECOND", "THIRD", "synthesis"]  # none sent twice
    code, out, _ = clearance(tmp_path, model, "verify", run_id, "--db", fresh_db)
    assert code == 0, out


@pytest.mark.parametrize("failure", ["stopped", "frozen", "commit answer lost"])
def test_a_run_whose_server_goes_away_fails_in_one_line_and_resumes_once_it_is_back(
    fresh_db: str, tmp_path: Path, openai_server: Any, failure: str
) -> None:
    # Stopped: every connection closed, new ones refused. Frozen: connections stay open and
    # nothing is answered (a backend stopped, a network path dropping every packet). Commit
    # answer lost: the next group commits, and its connection is gone before it is told.
    parsed = make_url(fresh_db)
    proxy = CuttingProxy((parsed.host or "127.0.0.1", parsed.port or 5432))
    try:
        url = through_proxy(fresh_db, proxy, password="s3cret-pw")
        url += "?connect_timeout=2&query_timeout=1"
        script = Script(
            {"stopped": proxy.cut, "frozen": proxy.freeze}.get(
                failure, proxy.lose_next_commit_answer
            )
        )
        model = openai_server(script.reply)
        (tmp_path / "team.yaml").write_text(TEAM)
        code, out, elapsed = clearance(
            tmp_path, model, "run", "team.yaml", "--model", "openai:m", "--db", url
        )
        assert script.received == ["FIRST", "SECOND"]
        assert code == 2, out
        assert elapsed < 30
        (error,) = [line for line in out.splitlines() if line.startswith("error:")]
        masked = url.replace("s3cret-pw", "***")
        assert f"in the run ledger at {masked}: " in error, out
        expected = {
            "stopped": ("server closed the connection unexpectedly", "refused"),
            "frozen": ("did not answer", "timeout"),
            "commit answer lost": ("lost while committing, so it may have been committed",),
        }[failure]
        assert any(cause in error for cause in expected), error
        assert "s3cret-pw" not in out
        proxy.restore()
        proxy.thaw()
        run_id = only_run(fresh_db)
        assert results(fresh_db, run_id)["first"] == "wrote first"  # kept
        code, out, _ = clearance(tmp_path, model, "resume", run_id, "--db", url)
        assert code == 0, out
        assert results(fresh_db, run_id) == {
            "first": "wrote first", "second": "wrote second", "third": "wrote third",
        }  # fmt: skip
        code, out, _ = clearance(tmp_path, model, "verify", run_id, "--db", url)
        assert code == 0, out
    finally:
        proxy.close()


STORE_TEAM = """\
name: pgfail
store: %s
agents:
  - {name: writer, instructions: "You write.", tools: [store_set, store_get],
     store_grants: {facts: read_write}, limits: {max_steps: 4}}
tasks:
  - {id: first, title: First, description: "FIRST: store a fact.", assignee: writer}
"""


def test_a_store_tool_call_after_the_server_ended_the_idle_store_session_succeeds(
    fresh_db: str, tmp_path: Path, openai_server: Any
) -> None:
    # The store's pooled connection sits idle while the model thinks; the server ends it
    # (here an administrator's pg_terminate_backend). The tool's write used it and failed.
    tool_results: list[str] = []

    def reply(messages: list[dict[str, Any]]) -> Any:
        if messages[0]["content"] != "You write.":
            return "summary"
        prompt = messages[-1]["content"]
        if "## Results of your tool calls" not in prompt:
            terminate_backends(fresh_db)
            return [("store_set", {"namespace": "facts", "key": "k", "value": "v1"})]
        tool_results.append(prompt.split("## Results of your tool calls")[1].split("~~~~")[1])
        return "stored"

    model = openai_server(reply)
    (tmp_path / "team.yaml").write_text(STORE_TEAM % fresh_db)
    code, out, _ = clearance(tmp_path, model, "run", "team.yaml", "--model", "openai:m",
                             "--db", fresh_db)  # fmt: skip
    assert code == 0, out
    assert tool_results == ["\nstored facts/k\n"], tool_results
    with ContextStore(fresh_db) as store:
        assert store.get("facts", "k") == "v1"


def test_a_run_on_a_database_whose_dba_ends_idle_sessions_completes(
    fresh_db: str, tmp_path: Path, openai_server: Any
) -> None:
    # idle_session_timeout: the server ends every session idle for 1 s, the pools' too; the
    # DBA's statement_timeout of 1 ms is the database's default, which each session replaces
    # with its own (the URL's query_timeout).
    name = fresh_db.rsplit("/", 1)[1]
    admin = create_engine(fresh_db, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f"ALTER DATABASE {name} SET idle_session_timeout = '1s'"))
            conn.execute(text(f"ALTER DATABASE {name} SET statement_timeout = '1ms'"))
    finally:
        admin.dispose()
    tool_results: list[str] = []

    def reply(messages: list[dict[str, Any]]) -> Any:
        time.sleep(1.5)  # the run's connections sit idle meanwhile
        if messages[0]["content"] != "You write.":
            return "summary"
        prompt = messages[-1]["content"]
        if "## Results of your tool calls" not in prompt:
            return [("store_set", {"namespace": "facts", "key": "k", "value": "v1"})]
        tool_results.append(prompt.split("## Results of your tool calls")[1].split("~~~~")[1])
        return "stored"

    model = openai_server(reply)
    (tmp_path / "team.yaml").write_text(STORE_TEAM % fresh_db)
    code, out, _ = clearance(tmp_path, model, "run", "team.yaml", "--model", "openai:m",
                             "--db", fresh_db)  # fmt: skip
    assert code == 0, out
    assert tool_results == ["\nstored facts/k\n"], tool_results
    run_id = only_run(fresh_db)
    assert results(fresh_db, run_id) == {"first": "stored"}
    code, out, _ = clearance(tmp_path, model, "verify", run_id, "--db", fresh_db)
    assert code == 0, out
