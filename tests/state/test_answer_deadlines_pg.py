"""On PostgreSQL, a server that stops answering, or a statement that runs on, ends in time.

``connect_timeout`` bounds only the connection's setup. A server that accepted the
connection and then stopped answering (a frozen backend, a network path that drops every
packet from then on: here a proxy that stops forwarding and closes nothing) made a ledger
write, a store read or a CLI command wait for ever. Each test sets ``query_timeout=1`` in
the URL: the server cancels a statement after 1 s, the client gives up on an answer after
2 s, and the error names the database.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import text

from clearance import ContextStore, RunLedger
from clearance._core.errors import StoreError
from clearance._state.db.deadlines import QUERY_TIMEOUT_S
from clearance._state.db.opening import open_engine

sys.path.insert(0, str(Path(__file__).parent))
from freezing_proxy import freezing_proxy

pytestmark = pytest.mark.network

SRC = str(Path(__file__).resolve().parents[2] / "src")


def with_query(url: str, query: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{query}"


def ends_in_time(call: Callable[[], object], limit: float = 8.0) -> BaseException | None:
    """Run ``call`` in a thread; it must end within ``limit`` s. Its error, if any."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), "waited for a server that does not answer, with no deadline"
    return failures[0] if failures else None


def test_a_ledger_write_to_a_frozen_server_fails_in_time_and_keeps_what_was_committed(
    postgres_url: str,
) -> None:
    first, second = f"run_{uuid.uuid4().hex[:8]}", f"run_{uuid.uuid4().hex[:8]}"
    with freezing_proxy(postgres_url) as (proxy, url):
        url = with_query(url, "query_timeout=1")
        ledger = RunLedger(url)
        ledger.start_run(run_id=first, team="t", goal=None, graph=None, config={})
        ledger.flush()
        proxy.freeze()

        def write() -> None:
            ledger.start_run(run_id=second, team="t", goal=None, graph=None, config={})
            ledger.flush()

        started = time.monotonic()
        error = ends_in_time(write)
        assert time.monotonic() - started < 5
        assert isinstance(error, StoreError)
        message = str(error)
        assert "\n" not in message and url in message, message
        assert "did not answer within 2 s" in message, message
        proxy.thaw()
        ledger.close()
    with RunLedger(postgres_url, read_only=True) as reader:
        ids = {run.run_id for run in reader.list_runs()}
    assert first in ids and second not in ids


def test_queued_writes_to_a_frozen_server_fail_together_not_one_deadline_each(
    postgres_url: str,
) -> None:
    # A failed group was retried one write per transaction: 50 writes, 50 deadlines.
    run_id = f"run_{uuid.uuid4().hex[:8]}"
    with freezing_proxy(postgres_url) as (proxy, url):
        ledger = RunLedger(with_query(url, "query_timeout=1&connect_timeout=1"))
        ledger.start_run(run_id=run_id, team="t", goal=None, graph=None, config={})
        ledger.flush()

        def write() -> None:
            with ledger.write_behind():
                proxy.freeze()
                for n in range(50):
                    ledger.start_run(
                        run_id=f"{run_id}_{n}", team="t", goal=None, graph=None, config={}
                    )

        started = time.monotonic()
        error = ends_in_time(write, limit=20)
        assert time.monotonic() - started < 10
        assert isinstance(error, StoreError)
        message = str(error)
        assert "timeout" in message and "(and 49 more failed write(s))" in message, message
        proxy.thaw()
        ledger.close()


def test_a_store_read_from_a_frozen_server_fails_in_time(postgres_url: str) -> None:
    with freezing_proxy(postgres_url) as (proxy, url):
        url = with_query(url, "query_timeout=1")
        store = ContextStore(url)
        store.set("ns", "k", "v", "a")
        proxy.freeze()
        error = ends_in_time(lambda: store.get("ns", "k"))
        assert isinstance(error, StoreError)
        assert url in str(error) and "did not answer within 2 s" in str(error)
        proxy.thaw()
        assert store.get("ns", "k") is not None  # a new connection, once it answers
        store.close()


def test_a_statement_that_runs_on_is_cancelled_by_the_server(postgres_url: str) -> None:
    engine = open_engine(with_query(postgres_url, "query_timeout=1"))
    try:
        started = time.monotonic()
        with pytest.raises(Exception, match="statement timeout"), engine.connect() as conn:
            conn.execute(text("SELECT pg_sleep(30)"))
        assert time.monotonic() - started < 5
        with engine.connect() as conn:  # the session is still usable
            assert conn.execute(text("SHOW statement_timeout")).scalar() == "1s"
    finally:
        engine.dispose()


def test_the_default_deadline_is_set_on_every_session(postgres_url: str) -> None:
    engine = open_engine(postgres_url)
    try:
        with engine.connect() as conn:
            shown = conn.execute(text("SHOW statement_timeout")).scalar()
        assert shown == f"{QUERY_TIMEOUT_S // 60}min"
    finally:
        engine.dispose()


@pytest.mark.parametrize("value", ["0", "-5", "abc", "1.5", "86401", "3&query_timeout=4"])
def test_a_query_timeout_that_is_no_deadline_is_refused(value: str) -> None:
    url = f"postgresql+psycopg://u@127.0.0.1:1/db?query_timeout={value}"
    started = time.monotonic()
    with pytest.raises(StoreError) as caught:
        ContextStore(url)
    assert time.monotonic() - started < 2
    message = str(caught.value)
    assert "query_timeout must be whole seconds from 1 to 86400" in message
    assert "\n" not in message


@pytest.mark.parametrize("command", ["runs", "inspect"])
def test_a_cli_read_from_a_frozen_server_ends_with_one_line(
    postgres_url: str, command: str, tmp_path: Path
) -> None:
    run_id = f"run_{uuid.uuid4().hex[:8]}"
    with RunLedger(postgres_url) as ledger:
        ledger.start_run(run_id=run_id, team="t", goal=None, graph=None, config={})
    with freezing_proxy(postgres_url) as (proxy, url):
        url = with_query(url, "query_timeout=1")
        args = [command, run_id] if command == "inspect" else [command]
        env = {**os.environ, "PYTHONPATH": SRC, "CLEARANCE_DB": ""}
        script = (
            "import sys, threading\n"
            "from clearance._state.db import engine\n"
            "from clearance.cli import app\n"
            "original = engine.DatabaseBase._reading\n"
            "def frozen(self, operation):\n"  # freeze once the schema was read
            "    if operation != 'read the schema version':\n"
            "        open(sys.argv[1], 'w').close()\n"
            "        import time; time.sleep(0.5)\n"
            "    return original(self, operation)\n"
            "engine.DatabaseBase._reading = frozen\n"
            "app(sys.argv[2:])\n"
        )
        marker = tmp_path / "opened"

        def freeze_when_opened() -> None:
            deadline = time.monotonic() + 20
            while not marker.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            proxy.freeze()

        watcher = threading.Thread(target=freeze_when_opened, daemon=True)
        watcher.start()
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-c", script, str(marker), *args, "--db", url],
            capture_output=True, text=True, timeout=40, env=env, cwd=tmp_path,
        )  # fmt: skip
        elapsed = time.monotonic() - started
        proxy.thaw()
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode != 0, lines
    assert elapsed < 30
    assert any("did not answer within 2 s" in line and "127.0.0.1" in line for line in lines), lines
