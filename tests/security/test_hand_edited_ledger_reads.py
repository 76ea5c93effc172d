"""A ledger edited by hand, column by column: every command that reads it says so in one line.

SQLite keeps whatever a row is given, whatever its column's type: bytes (a BLOB) where text
belongs, text where a count or a time belongs, a time past the calendar, JSON of the wrong
shape. The ledger's records checked some JSON shapes only, so ``clearance runs`` failed for
every run when one run's ``created_at`` was not a time (and did not say which run),
``inspect`` printed a traceback for bytes in a call's subject, ``inspect --json`` for bytes in
any text field, and ``resume`` for bytes anywhere (its chain check digests the rows). Now every
record is checked as it is built from its row: one line naming the record and the field
(``verify``: not verified, exit 1; the others exit 2), and ``runs`` lists the runs that are
fine and names the broken one.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import (
    Agent,
    MalformedRecord,
    MessageBus,
    ModelError,
    Orchestrator,
    RetryPolicy,
    RunLedger,
    RunOptions,
    RunServices,
    Task,
    Team,
)
from clearance.cli import app
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel


def peek() -> str:
    """Look at something."""
    return "TOOL-RESULT"


def answer(request: ModelRequest) -> str | ToolCall:
    manifest = request.prompt.manifest
    if manifest.subject == "task:broken":
        raise ModelError("HTTP 400 bad request")
    if manifest.agent == "alice" and not any(o.startswith("tool:") for o in manifest.origins):
        return ToolCall(id="p", name="peek", arguments={})
    return f"ANSWER for {manifest.subject}"


async def _record(db: str) -> str:
    team = Team(
        agents=(
            Agent(name="alice", instructions="A.", tools=("peek",)),
            Agent(name="bob", instructions="B."),
        ),
        name="demo",
    )
    bus = MessageBus()
    bus.send("alice", "bob", "Mind the edge cases.")
    tasks = [
        Task(id="t1", title="Work", description="Find it.", assignee="alice"),
        Task(id="t2", title="Two", description="Two.", assignee="bob", depends_on=["t1"]),
        Task(id="broken", title="Broken", description="Fails.", assignee="bob"),
    ]
    with RunLedger(db) as ledger:
        orchestrator = Orchestrator(
            team,
            model=FunctionModel(answer),
            ledger=ledger,
            tools=[peek],
            options=RunOptions(retry_policy=RetryPolicy(initial_s=0, max_s=0, jitter_s=0)),
            services=RunServices(messages=bus),
        )
        result = await orchestrator.run_tasks(tasks)
    return result.run_id


@pytest.fixture(scope="module")
def recorded_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One recorded run with tool calls, events, a message and a failed task's reason."""
    db = tmp_path_factory.mktemp("ledger") / "runs.db"
    run_id = asyncio.run(_record(f"sqlite:///{db}"))
    with sqlite3.connect(db) as connection:  # every table the readers read holds rows
        for table in ("tasks", "calls", "tool_calls", "events", "messages", "task_reasons"):
            assert connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0], table
    return db, run_id


@pytest.fixture
def recorded(recorded_file: tuple[Path, str], tmp_path: Path) -> tuple[Path, str]:
    """A copy of the recorded run's ledger, to edit."""
    db = tmp_path / "runs.db"
    shutil.copy(recorded_file[0], db)
    return db, recorded_file[1]


def edit(db: Path, sql: str) -> None:
    with sqlite3.connect(db) as connection:
        connection.execute(sql)


def cli(db: Path, *args: str) -> tuple[int, list[str]]:
    """Exit code and the non-empty lines of stdout and stderr; fails on a traceback."""
    result = CliRunner().invoke(app, [*args, "--db", f"sqlite:///{db}"])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args,
        result.exception,
    )
    return result.exit_code, [line for line in result.output.splitlines() if line.strip()]


INSPECTS = [
    ("inspect", "--no-pager"),
    ("inspect", "--json"),
    ("inspect", "--response-only"),
    ("inspect", "--task", "t1", "--no-pager"),
]

CASES = [
    # (sql, what the one line says, whether inspect reads it)
    (
        "UPDATE runs SET created_at = 'yesterday'",
        "its created_at is not a time ('yesterday')",
        True,
    ),
    ("UPDATE runs SET finished_at = '10000-01-01 00:00:00'", "its finished_at is not a time", True),
    (  # a time whose zone puts it before the calendar's first day: OverflowError, not a time
        "UPDATE runs SET created_at = '0001-01-01T00:00:00+05:00'",
        "its created_at is not a time ('0001-01-01T00:00:00+05:00')",
        True,
    ),
    (
        "UPDATE tasks SET finished_at = '9999-12-31T23:59:59-05:00'",
        "its finished_at is not a time ('9999-12-31T23:59:59-05:00')",
        True,
    ),
    ("UPDATE runs SET team = X'ff'", "its team is not text", True),
    ("UPDATE runs SET goal = X'ff'", "its goal is not text", True),
    ("UPDATE runs SET config = 'not json {'", "its config is not JSON (Expecting value", True),
    (
        """UPDATE runs SET graph = '[{"id": "t1", "depends_on": 5}]'""",
        "its graph's task 1 has a depends_on that is not a list of task ids",
        True,
    ),
    ("UPDATE runs SET prompt_tokens = X'ff'", "its prompt_tokens is not a whole number >= 0", True),
    ("UPDATE runs SET requests = -3", "its requests is not a whole number >= 0", True),
    ("UPDATE runs SET chain_key_id = X'ff'", "its chain_key_id is not text", False),
    (  # read with the run since resume takes over a lapsed lease (`RunRecord`)
        "UPDATE runs SET lease_expires_at = 'soon'",
        "its lease_expires_at is not a time ('soon')",
        True,
    ),
    ("UPDATE tasks SET title = X'ff'", "its title is not text", True),
    ("UPDATE tasks SET started_at = 'x'", "its started_at is not a time ('x')", True),
    ("UPDATE calls SET subject = X'ff'", "its subject is not text", True),
    (
        "UPDATE calls SET cached_prompt_tokens = X'ff'",
        "its cached_prompt_tokens is not a whole",
        True,
    ),
    (
        "UPDATE calls SET latency_s = 'slow'",
        "its latency_s is not a finite number of seconds",
        True,
    ),
    ("UPDATE calls SET pending = 7", "its pending is not 0 or 1", True),
    ("UPDATE calls SET parameters = '[1]'", "its parameters are not an object", True),
    ("UPDATE calls SET started_at = 12", "its started_at is not a time (12)", True),
    ("UPDATE tool_calls SET chain = 1.5", "its chain is not a delegation chain", True),
    ("UPDATE tool_calls SET result = X'ff'", "its result is not text", True),
    (  # each was a TypeError or KeyError out of inspect's delegation chain line
        """UPDATE tool_calls SET chain = '{"steps": 5, "max_depth": 3}'""",
        "its chain is not a delegation chain",
        True,
    ),
    (
        """UPDATE tool_calls SET chain = '{"steps": [{"to": "bob"}], "max_depth": 3}'""",
        "its chain is not a delegation chain",
        True,
    ),
    (
        """UPDATE tool_calls SET chain = '{"steps": [{"from": "a", "to": "b"}]}'""",
        "its chain is not a delegation chain",
        True,
    ),
    ("UPDATE tool_calls SET step = 'x'", "its step is not a whole number", True),
    (
        "UPDATE tool_calls SET store_reads = '[1]'",
        "its store reads are not a list of objects",
        True,
    ),
    ("UPDATE tool_calls SET is_error = X'ff'", "its is_error is not 0 or 1", True),
    ("UPDATE events SET kind = X'ff'", "its kind is not text", True),
    ("UPDATE events SET created_at = 'x'", "its created_at is not a time ('x')", True),
    ("UPDATE messages SET content = X'ff'", "its content is not text", False),
    ("UPDATE task_reasons SET error = X'ff'", "its error is not text", False),
    ("UPDATE ledger_entries SET records = X'ff'", "its records is not text", False),
    ("UPDATE ledger_entries SET seq = 'x' WHERE seq = 1", "its seq is not a whole number", False),
]


@pytest.mark.parametrize(("sql", "said", "inspected"), CASES, ids=[c[0] for c in CASES])
def test_each_command_names_the_edited_record_and_field_in_one_line(
    recorded: tuple[Path, str], sql: str, said: str, inspected: bool
) -> None:
    db, run_id = recorded
    edit(db, sql)
    code, lines = cli(db, "verify", run_id)
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith(f"run {run_id}: not verified: ") and said in lines[0], lines
    assert " is malformed: " in lines[0]
    code, lines = cli(db, "resume", run_id, "--model", "fake:x", "--force")
    assert code == 2 and len(lines) == 1 and said in lines[0], lines
    for command in INSPECTS:
        code, lines = cli(db, command[0], run_id, *command[1:])
        if inspected:
            assert code == 2 and lines == [lines[0]] and said in lines[0], (command, lines)
            assert lines[0].startswith("error: ") and " is malformed: " in lines[0]
        else:
            assert code == 0, (command, lines)


def test_a_run_whose_created_at_is_not_a_time_is_named_and_the_others_are_listed(
    recorded: tuple[Path, str],
) -> None:
    db, broken = recorded
    second = asyncio.run(_record(f"sqlite:///{db}"))
    edit(db, f"UPDATE runs SET created_at = 'yesterday' WHERE run_id = '{broken}'")
    result = CliRunner().invoke(app, ["runs", "--db", f"sqlite:///{db}"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, result.output
    assert second in result.stdout and broken not in result.stdout
    assert result.stderr.splitlines() == [
        f"error: run {broken} is malformed: its created_at is not a time ('yesterday')"
    ]
    with RunLedger(f"sqlite:///{db}", read_only=True) as ledger:
        listed = ledger.run_listing()
        with pytest.raises(MalformedRecord, match=f"run {broken} is malformed: its created_at"):
            ledger.list_runs()
    assert [type(r).__name__ for r in listed].count("RunRecord") == 1
    assert [str(r) for r in listed if isinstance(r, MalformedRecord)] == [
        f"run {broken} is malformed: its created_at is not a time ('yesterday')"
    ]


def test_a_run_whose_id_is_bytes_is_named_by_its_repr(recorded: tuple[Path, str]) -> None:
    db, _ = recorded
    edit(db, "UPDATE runs SET run_id = X'ff00'")  # sqlite3 leaves foreign keys unchecked
    code, lines = cli(db, "runs")
    assert code == 2 and lines == [
        "error: run b'\\xff\\x00' is malformed: its run_id is not text"
    ], lines


def test_the_listing_leaves_token_totals_to_their_readers_but_inspect_refuses_them(
    recorded: tuple[Path, str],
) -> None:
    # A listing shows no totals (the run page's list shows none for such a run); a run's
    # own record checks them.
    db, run_id = recorded
    edit(db, "UPDATE runs SET completion_tokens = 'lots'")
    code, lines = cli(db, "runs")
    assert code == 0 and run_id in "\n".join(lines)
    code, lines = cli(db, "inspect", run_id, "--json")
    assert code == 2 and lines == [
        f"error: run {run_id} is malformed: its completion_tokens is not a whole number >= 0"
    ]


def test_an_untouched_ledger_still_reads_and_verifies(recorded: tuple[Path, str]) -> None:
    db, run_id = recorded
    code, lines = cli(db, "verify", run_id)
    assert code == 0 and "model calls verified" in lines[-1], lines
    code, lines = cli(db, "runs")
    assert code == 0 and run_id in "\n".join(lines)
    with RunLedger(f"sqlite:///{db}", read_only=True) as ledger:
        (message,) = ledger.messages(run_id)
        assert message["content"] == "Mind the edge cases."
        assert ledger.task_reasons(run_id)["broken"]
        assert ledger.chain_heads([run_id])[run_id] >= 1


@pytest.mark.parametrize("held", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00"])
def test_a_stored_time_whose_zone_leaves_the_calendar_is_malformed_in_the_store_too(
    tmp_path: Path, held: str
) -> None:
    # The stores share the ledger's time column: converting such a time to UTC raised
    # OverflowError out of every read of the entry.
    from clearance import ContextStore

    path = tmp_path / "store.db"
    with ContextStore(f"sqlite:///{path}") as store:
        store.set("ns", "k", "value", "writer")
    edit(path, f"UPDATE store_entries SET updated_at = '{held}'")
    said = re.escape(f"{held!r} where a time belongs")
    with ContextStore(f"sqlite:///{path}") as store, pytest.raises(MalformedRecord, match=said):
        store.get_entry("ns", "k")
