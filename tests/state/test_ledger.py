from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clearance._context.builder import ContextBuilder
from clearance._core.errors import ConfigError, LedgerError, StoreError
from clearance._core.prompt import canonical_json
from clearance._core.spec import Agent, Task
from clearance._state.graph import TaskGraph
from clearance._state.ledger import (
    DEFAULT_LEDGER_URL,
    SCHEMA_VERSION,
    CallRecord,
    RunLedger,
    call_record_sha256,
)
from clearance._state.ledger.digest import record_sha256
from clearance._state.messages import MessageBus
from clearance._state.queue import TaskQueue
from clearance.models import ModelResponse, Usage, estimate_tokens

T0 = datetime(2025, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)


class StepClock:
    """Aware UTC timestamps one second apart."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        current = self.now
        self.now += timedelta(seconds=1)
        return current


def url_for(path: Path) -> str:
    return f"sqlite:///{path}"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger" / "runs.db"


@pytest.fixture
def ledger(db_path: Path) -> Iterator[RunLedger]:
    with RunLedger(url_for(db_path), clock=StepClock()) as opened:
        yield opened


def two_task_graph() -> TaskGraph:
    return TaskGraph(
        [
            Task(id="a", title="Research", description="Find facts.", assignee="researcher"),
            Task(
                id="b",
                title="Write",
                description="Write it up.",
                assignee="writer",
                depends_on=("a",),
            ),
        ]
    )


RESEARCHER = Agent(name="researcher", instructions="You research.")
WRITER = Agent(name="writer", instructions="You write.")


def test_round_trip_of_a_run(ledger: RunLedger) -> None:
    clock = StepClock(T0 + timedelta(hours=1))
    graph = two_task_graph()
    queue = TaskQueue(graph, clock=clock)
    bus = MessageBus(clock=clock)
    builder = ContextBuilder(count_tokens=estimate_tokens)

    ledger.start_run(
        run_id="run_1",
        team="writers",
        goal="Write a report",
        graph=graph.to_dict(),
        config={"max_concurrency": 2},
    )
    for state in queue.states():
        ledger.record_task("run_1", state)

    queue.start("a")
    ledger.record_task("run_1", queue.get("a"))
    prompt_a = builder.build_task_prompt(graph.get("a"), agent=RESEARCHER, queue=queue)
    response_a = ModelResponse(
        text="Facts.",
        usage=Usage(requests=1, prompt_tokens=40, completion_tokens=3),
        model_id="test:scripted",
        finish_reason="stop",
    )
    call_a = ledger.record_call(
        run_id="run_1",
        subject="task:a",
        agent="researcher",
        model_id="test:scripted",
        prompt=prompt_a,
        response=response_a,
        error=None,
        started_at=clock(),
        latency_s=0.25,
    )
    queue.complete("a", "Facts.")
    ledger.record_task("run_1", queue.get("a"))
    bus.send("researcher", "writer", "Keep it short.")
    ledger.record_messages("run_1", bus.all())

    queue.start("b")
    prompt_b = builder.build_task_prompt(graph.get("b"), agent=WRITER, queue=queue, messages=bus)
    call_b = ledger.record_call(
        run_id="run_1",
        subject="task:b",
        agent="writer",
        model_id="test:scripted",
        prompt=prompt_b,
        response=None,
        error="ModelError: boom",
        started_at=clock(),
        latency_s=1.5,
    )
    queue.fail("b", "ModelError: boom")
    ledger.record_task("run_1", queue.get("b"))
    total = Usage(requests=2, prompt_tokens=40, completion_tokens=3)
    ledger.finish_run("run_1", status="failed", synthesis=None, usage=total, error="b failed")

    run = ledger.get_run("run_1")
    assert run.run_id == "run_1"
    assert run.team == "writers"
    assert run.goal == "Write a report"
    assert run.status == "failed"
    assert run.graph == graph.to_dict()
    assert run.config == {"max_concurrency": 2}
    assert run.synthesis is None
    assert run.error == "b failed"
    assert run.usage == total
    assert run.created_at == T0
    assert run.finished_at is not None and run.finished_at > run.created_at

    tasks = ledger.tasks("run_1")
    assert [t.task_id for t in tasks] == ["a", "b"]
    a, b = tasks
    assert (a.status, a.result, a.error) == ("completed", "Facts.", None)
    assert (a.title, a.assignee, a.depends_on, a.memory_scope) == (
        "Research",
        "researcher",
        (),
        "dependencies",
    )
    assert a.started_at == queue.get("a").started_at
    assert a.finished_at == queue.get("a").finished_at
    assert (b.status, b.error, b.depends_on) == ("failed", "ModelError: boom", ("a",))
    assert b.started_at is not None and b.finished_at is not None

    calls = ledger.calls("run_1")
    assert [c.call_id for c in calls] == [call_a, call_b]
    assert call_a.startswith("call_")
    first = calls[0]
    assert isinstance(first, CallRecord)
    assert first.run_id == "run_1"
    assert (first.subject, first.agent, first.model_id) == ("task:a", "researcher", "test:scripted")
    assert first.messages == prompt_a.to_dicts()
    assert first.manifest == prompt_a.manifest.to_dict()
    assert first.prompt_sha256 == prompt_a.manifest.prompt_sha256
    assert (first.response, first.finish_reason, first.error) == ("Facts.", "stop", None)
    assert first.usage == response_a.usage
    assert first.latency_s == 0.25
    second = calls[1]
    assert second.messages == prompt_b.to_dicts()
    assert "Facts." in second.messages[1]["content"]
    assert (second.response, second.finish_reason) == (None, None)
    assert second.usage == Usage()
    assert second.error == "ModelError: boom"
    assert [c.call_id for c in ledger.calls("run_1", subject="task:b")] == [call_b]
    assert ledger.calls("run_1", subject="synthesis") == []

    (message,) = ledger.messages("run_1")
    sent = bus.all()[0]
    assert message == {
        "id": sent.id,
        "sender": "researcher",
        "recipient": "writer",
        "content": "Keep it short.",
        "created_at": sent.created_at,
    }


def test_set_graph_after_planning(ledger: RunLedger) -> None:
    ledger.start_run(run_id="run_1", team="t", goal="g", graph=None)
    assert ledger.get_run("run_1").graph is None
    assert ledger.get_run("run_1").config == {}
    graph = two_task_graph().to_dict()
    ledger.set_graph("run_1", graph)
    assert ledger.get_run("run_1").graph == graph


def test_upsert_updates_in_place_and_keeps_first_order(ledger: RunLedger) -> None:
    graph = two_task_graph()
    queue = TaskQueue(graph, clock=StepClock())
    ledger.start_run(run_id="run_1", team="t", goal=None, graph=graph.to_dict())
    ledger.record_task("run_1", queue.get("a"))
    ledger.record_task("run_1", queue.get("b"))
    queue.start("a")
    ledger.record_task("run_1", queue.get("a"))
    queue.complete("a", "done")
    ledger.record_task("run_1", queue.get("a"))

    tasks = ledger.tasks("run_1")
    assert [(t.task_id, t.status) for t in tasks] == [("a", "completed"), ("b", "pending")]
    assert tasks[0].result == "done"

    bus = MessageBus(clock=StepClock())
    bus.send("x", "y", "one")
    ledger.record_messages("run_1", bus.all())
    bus.send("y", "x", "two")
    ledger.record_messages("run_1", bus.all())  # the first message again, plus a new one
    ledger.record_messages("run_1", [])
    assert [m["content"] for m in ledger.messages("run_1")] == ["one", "two"]


def test_tasks_are_per_run(ledger: RunLedger) -> None:
    queue = TaskQueue(two_task_graph())
    for run_id in ("run_1", "run_2"):
        ledger.start_run(run_id=run_id, team="t", goal=None, graph=None)
        ledger.record_task(run_id, queue.get("b"))
    ledger.record_task("run_2", queue.get("a"))
    assert [t.task_id for t in ledger.tasks("run_1")] == ["b"]
    assert [t.task_id for t in ledger.tasks("run_2")] == ["b", "a"]
    assert ledger.tasks("run_unknown") == []


def test_unknown_run_raises_store_error_naming_it(ledger: RunLedger) -> None:
    with pytest.raises(StoreError, match="run_missing"):
        ledger.get_run("run_missing")
    with pytest.raises(StoreError, match="run_missing"):
        ledger.set_graph("run_missing", [])
    with pytest.raises(StoreError, match="run_missing"):
        ledger.finish_run(
            "run_missing", status="completed", synthesis="", usage=Usage(), error=None
        )
    queue = TaskQueue(two_task_graph())
    with pytest.raises(StoreError, match=r"record task 'a' of run 'run_missing'"):
        ledger.record_task("run_missing", queue.get("a"))


def test_duplicate_run_id_is_refused(ledger: RunLedger) -> None:
    ledger.start_run(run_id="run_1", team="t", goal=None, graph=None)
    with pytest.raises(StoreError, match="start run 'run_1'"):
        ledger.start_run(run_id="run_1", team="t", goal=None, graph=None)


def test_bad_status_is_refused(ledger: RunLedger) -> None:
    ledger.start_run(run_id="run_1", team="t", goal=None, graph=None)
    with pytest.raises(ConfigError, match="done"):
        ledger.finish_run("run_1", status="done", synthesis=None, usage=Usage(), error=None)


def test_prefix_lookup(ledger: RunLedger) -> None:
    for run_id in ("run_abc_1", "run_abd_2", "run_x", "run_x_longer"):
        ledger.start_run(run_id=run_id, team="t", goal=None, graph=None)
    assert ledger.get_run("run_abc").run_id == "run_abc_1"
    assert ledger.get_run("run_abd_2").run_id == "run_abd_2"
    # An exact id wins over a longer id that starts with it.
    assert ledger.get_run("run_x").run_id == "run_x"
    assert ledger.get_run("run_x_").run_id == "run_x_longer"
    with pytest.raises(StoreError, match=r"ambiguous.*run_abc_1.*run_abd_2"):
        ledger.get_run("run_ab")
    # '_' and '%' are not wildcards, and matching is case-sensitive.
    with pytest.raises(StoreError, match="unknown run"):
        ledger.get_run("run%")
    with pytest.raises(StoreError, match="unknown run"):
        ledger.get_run("run_abc_1_")
    with pytest.raises(StoreError, match="unknown run"):
        ledger.get_run("RUN_ABC")
    with pytest.raises(StoreError):
        ledger.get_run("")


def test_datetimes_are_aware_utc(db_path: Path) -> None:
    plus_two = timezone(timedelta(hours=2))
    start = datetime(2025, 6, 1, 12, 0, 0, 123_456, tzinfo=plus_two)
    with RunLedger(url_for(db_path), clock=StepClock(start)) as ledger:
        ledger.start_run(run_id="run_1", team="t", goal=None, graph=None)
        queue = TaskQueue(two_task_graph(), clock=StepClock(start))
        queue.start("a")
        ledger.record_task("run_1", queue.get("a"))
        bus = MessageBus(clock=StepClock(start))
        bus.send("x", "y", "hi")
        ledger.record_messages("run_1", bus.all())
        ledger.finish_run("run_1", status="completed", synthesis="ok", usage=Usage(), error=None)

        run = ledger.get_run("run_1")
        (task,) = ledger.tasks("run_1")
        (message,) = ledger.messages("run_1")
    stamps = [run.created_at, run.finished_at, task.started_at, message["created_at"]]
    for stamp in stamps:
        assert stamp is not None
        assert stamp.tzinfo is UTC
    assert run.created_at == start
    assert run.created_at.hour == 10
    assert run.finished_at == start + timedelta(seconds=1)
    assert task.started_at == start
    assert task.finished_at is None
    assert message["created_at"] == start


def test_list_runs_newest_first(ledger: RunLedger) -> None:
    assert ledger.list_runs() == []
    for n in range(5):
        ledger.start_run(run_id=f"run_{n}", team="t", goal=f"goal {n}", graph=None)
    runs = ledger.list_runs()
    assert [r.run_id for r in runs] == ["run_4", "run_3", "run_2", "run_1", "run_0"]
    assert all(r.status == "running" and r.finished_at is None for r in runs)
    assert [r.run_id for r in ledger.list_runs(limit=2)] == ["run_4", "run_3"]
    with pytest.raises(ConfigError):
        ledger.list_runs(limit=0)


def test_reopening_sees_the_data(db_path: Path) -> None:
    with RunLedger(url_for(db_path), clock=StepClock()) as ledger:
        ledger.start_run(run_id="run_1", team="t", goal="g", graph=None)
        ledger.record_task("run_1", TaskQueue(two_task_graph()).get("a"))
    with RunLedger(url_for(db_path)) as reopened:
        assert reopened.get_run("run_1").goal == "g"
        assert [t.task_id for t in reopened.tasks("run_1")] == ["a"]
        ledger_versions = _schema_versions(db_path)
    assert ledger_versions == list(range(1, SCHEMA_VERSION + 1))


def test_two_ledgers_on_one_file_write_alternately(db_path: Path) -> None:
    queue = TaskQueue(two_task_graph())
    with (
        RunLedger(url_for(db_path), clock=StepClock()) as first,
        RunLedger(url_for(db_path), clock=StepClock(T0 + timedelta(days=1))) as second,
    ):
        first.start_run(run_id="run_1", team="t", goal=None, graph=None)
        second.start_run(run_id="run_2", team="t", goal=None, graph=None)
        for _ in range(3):
            first.record_task("run_2", queue.get("a"))
            second.record_task("run_1", queue.get("b"))
            first.record_task("run_1", queue.get("a"))
            second.record_task("run_2", queue.get("b"))
        assert [t.task_id for t in second.tasks("run_1")] == ["b", "a"]
        assert [t.task_id for t in first.tasks("run_2")] == ["a", "b"]
        assert [r.run_id for r in first.list_runs()] == ["run_2", "run_1"]
        assert [r.run_id for r in second.list_runs()] == ["run_2", "run_1"]


def test_sqlite_pragmas(db_path: Path) -> None:
    with RunLedger(url_for(db_path)):
        pass
    connection = sqlite3.connect(db_path)
    try:
        (mode,) = connection.execute("PRAGMA journal_mode").fetchone()
    finally:
        connection.close()
    assert mode == "wal"


def _page_size(path: Path) -> int:
    connection = sqlite3.connect(path)
    try:
        (size,) = connection.execute("PRAGMA page_size").fetchone()
    finally:
        connection.close()
    return int(size)


def test_a_new_ledger_file_has_16_kib_pages(db_path: Path) -> None:
    with RunLedger(url_for(db_path)) as ledger:
        ledger.start_run(run_id="run_1", team="t", goal=None, graph=None)
    assert _page_size(db_path) == 16384


def test_an_existing_ledger_file_keeps_its_page_size(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    created = sqlite3.connect(db_path)
    created.execute("PRAGMA journal_mode = WAL")  # writes the file with SQLite's 4 KiB pages
    created.close()
    for run_id in ("run_1", "run_2"):  # created, then reopened
        with RunLedger(url_for(db_path)) as ledger:
            ledger.start_run(run_id=run_id, team="t", goal=None, graph=None)
    assert _page_size(db_path) == 4096
    with RunLedger(url_for(db_path)) as ledger:
        assert [r.run_id for r in ledger.list_runs()] == ["run_2", "run_1"]


def test_default_url_creates_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with RunLedger() as ledger:
        assert ledger.url == DEFAULT_LEDGER_URL
        ledger.start_run(run_id="run_1", team="t", goal=None, graph=None)
    assert (tmp_path / ".clearance" / "runs.db").is_file()


@pytest.mark.parametrize(
    "url",
    [
        "not a url",
        "nosuchdatabase://host/db",
        "postgresql://user:s3cret@127.0.0.1:1/clearance",
    ],
)
def test_bad_url_gives_store_error_without_password(url: str) -> None:
    with pytest.raises(StoreError) as info:
        RunLedger(url)
    message = str(info.value)
    assert "s3cret" not in message
    # Names the operation and the ledger; without a driver the URL fails to open, with one
    # the first read fails to connect.
    assert re.search(r"cannot (open|read .*from) the run ledger", message), message
    if "postgresql" in url:
        assert "postgresql://user:***@127.0.0.1:1/clearance" in message


def test_unreachable_sqlite_file_gives_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(StoreError, match="cannot open the run ledger"):
        RunLedger(url_for(blocker / "runs.db"))
    not_a_database = tmp_path / "garbage.db"
    not_a_database.write_bytes(b"this is not an SQLite database, just some bytes" * 100)
    with pytest.raises(StoreError, match=re.escape(str(not_a_database))):
        RunLedger(url_for(not_a_database))


def test_url_masks_password() -> None:
    from clearance._state.db import mask_url as _mask

    assert _mask("postgresql://u:pw@host/db") == "postgresql://u:***@host/db"
    assert "pw" not in _mask("bad url://u:pw@host")


def test_closed_ledger_refuses_use(db_path: Path) -> None:
    ledger = RunLedger(url_for(db_path))
    ledger.close()
    ledger.close()
    with pytest.raises(StoreError, match="closed"):
        ledger.list_runs()
    with pytest.raises(StoreError, match="closed"):
        ledger.start_run(run_id="run_1", team="t", goal=None, graph=None)


def test_newer_schema_is_refused(db_path: Path) -> None:
    with RunLedger(url_for(db_path)):
        pass
    connection = sqlite3.connect(db_path)
    try:
        with connection:
            connection.execute(
                "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                (SCHEMA_VERSION + 1, "2030-01-01 00:00:00.000000"),
            )
    finally:
        connection.close()
    with pytest.raises(StoreError, match="newer"):
        RunLedger(url_for(db_path))


def _schema_versions(path: Path) -> list[int]:
    connection = sqlite3.connect(path)
    try:
        return [v for (v,) in connection.execute("SELECT version FROM schema_version ORDER BY 1")]
    finally:
        connection.close()


def test_record_tasks_in_one_batch_then_upsert(ledger: RunLedger) -> None:
    graph = two_task_graph()
    queue = TaskQueue(graph, clock=StepClock())
    ledger.start_run(run_id="run_1", team="t", goal=None, graph=graph.to_dict())
    ledger.record_tasks("run_1", ())
    ledger.record_tasks("run_1", queue.states())
    queue.start("a")
    queue.complete("a", "done")
    ledger.record_task("run_1", queue.get("a"))
    tasks = ledger.tasks("run_1")
    assert [(t.task_id, t.status, t.result) for t in tasks] == [
        ("a", "completed", "done"),
        ("b", "pending", None),  # recorded before "a" completed
    ]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(
    messages=st.lists(st.dictionaries(st.sampled_from(["role", "content"]), st.text())),
    manifest=st.dictionaries(st.text(), json_values, max_size=6),
)
def test_record_digest_from_the_two_canonical_texts_equals_the_reference(
    messages: list[dict[str, Any]], manifest: dict[str, Any]
) -> None:
    # The ledger digests the texts it stores; verify recomputes from the parsed values.
    spliced = record_sha256(canonical_json(messages), canonical_json(manifest))
    assert spliced == call_record_sha256(messages, manifest)


def test_call_columns_hold_canonical_json(ledger: RunLedger, db_path: Path) -> None:
    graph = two_task_graph()
    queue = TaskQueue(graph)
    prompt = ContextBuilder(count_tokens=estimate_tokens).build_task_prompt(
        graph.get("a"), agent=RESEARCHER, queue=queue
    )
    ledger.start_run(run_id="run_1", team="t", goal=None, graph=graph.to_dict(), config={})
    ledger.record_call(
        run_id="run_1", subject="task:a", agent="researcher", model_id="m", prompt=prompt,
        response=None, error="boom", started_at=T0, latency_s=0.0,
    )  # fmt: skip
    ledger.close()
    with sqlite3.connect(db_path) as db:
        messages, manifest, digest = db.execute(
            "SELECT messages, manifest, record_sha256 FROM calls"
        ).fetchone()
    assert messages == canonical_json(prompt.to_dicts())
    assert manifest == canonical_json(prompt.manifest.to_dict())
    assert digest == call_record_sha256(prompt.to_dicts(), prompt.manifest.to_dict())


# -- hash chain, events, leases, failing writes ------------------------------------------


def test_events_are_recorded_chained_and_read_back_by_kind(tmp_path):
    from clearance._context.verify import verify_run

    with RunLedger(f"sqlite:///{tmp_path / 'e.db'}") as ledger:
        ledger.start_run(run_id="r", team="t", goal=None, graph=[])
        spawn = {"child_id": "c1", "agent": "a", "goal": "g", "parent_agent": "p"}
        first = ledger.record_event("r", "spawn", "task:a", spawn)
        step = {"index": 1, "kind": "model", "ok": True, "content_sha256": "0" * 64, "data": {}}
        ledger.record_event("r", "step", "child:a.1", step)
        spawns = ledger.events("r", kind="spawn")
        assert [(e.event_id, e.subject, e.data) for e in spawns] == [(first, "task:a", spawn)]
        assert [e.kind for e in ledger.events("r")] == ["spawn", "step"]
        assert [e.kind for e in ledger.chain_entries("r")] == ["run", "event", "event"]
        assert verify_run(ledger, "r").ok
        with pytest.raises(ConfigError):
            ledger.record_event("r", "bad", "x", {"when": object()})


def test_an_event_that_does_not_match_its_schema_is_refused_and_nothing_is_stored(tmp_path):
    with RunLedger(f"sqlite:///{tmp_path / 'e.db'}") as ledger:
        ledger.start_run(run_id="r", team="t", goal=None, graph=[])
        with pytest.raises(ConfigError, match="'spawn' event's goal"):
            ledger.record_event("r", "spawn", "task:a", {"child_id": "c1", "agent": "a"})
        with pytest.raises(ConfigError, match="unknown event kind 'bad'"):
            ledger.record_event("r", "bad", "x", {})
        with pytest.raises(ConfigError, match="more: Extra inputs are not permitted"):
            ledger.record_event("r", "files", "task:a", {"files": {}, "more": 1})
        assert ledger.events("r") == []


def test_null_ledger_has_the_event_api():
    from clearance._state.null_ledger import NullLedger

    null = NullLedger()
    spawn = {"child_id": "c1", "agent": "a", "goal": "g", "parent_agent": "p"}
    assert null.record_event("r", "spawn", "s", spawn).startswith("evt_")
    with pytest.raises(ConfigError):
        null.record_event("r", "spawn", "s", {})
    with pytest.raises(StoreError):
        null.events("r")


def test_a_live_owner_keeps_its_run_and_a_dead_one_loses_it(tmp_path):
    url = f"sqlite:///{tmp_path / 'lease.db'}"
    with RunLedger(url) as owner, RunLedger(url) as other:
        owner.start_run(run_id="r", team="t", goal=None, graph=[])
        owner.flush()
        with pytest.raises(ConfigError, match="is being run by process"):
            other.reopen_run("r")
        other.reopen_run("r", force=True)  # an explicit take-over
        with pytest.raises(ConfigError, match="is being run by process"):
            owner.reopen_run("r")


def test_a_run_taken_over_by_another_process_stops_its_old_owner(tmp_path):
    url = f"sqlite:///{tmp_path / 'lease.db'}"
    with RunLedger(url) as owner, RunLedger(url) as other:
        owner.start_run(run_id="r", team="t", goal=None, graph=[])
        owner.flush()
        other.reopen_run("r", force=True)
        owner._leases.renew_once()
        with pytest.raises(LedgerError, match="run 'r' was taken over by another process"):
            owner.start_run(run_id="next", team="t", goal=None, graph=[])


def test_a_run_not_yet_committed_or_just_finished_is_not_taken_over(tmp_path):
    url = f"sqlite:///{tmp_path / 'lease.db'}"
    with RunLedger(url) as ledger:
        # Held before its first write is committed: no row to renew yet.
        ledger._leases.hold("queued")
        ledger._leases.renew_once()
        assert ledger._leases.take_lost() is None
        # Finished (owner cleared) between reading the held set and renewing.
        ledger.start_run(run_id="done", team="t", goal=None, graph=[])
        ledger.finish_run("done", status="completed", synthesis="s", usage=Usage(), error=None)
        ledger.flush()
        ledger._leases.hold("done")
        ledger._leases.renew_once()
        assert ledger._leases.take_lost() is None
        # A run it still owns is renewed: its lease moves forward.
        ledger.start_run(run_id="live", team="t", goal=None, graph=[])
        ledger.flush()
        before = lease_of(tmp_path / "lease.db", "live")
        time.sleep(0.01)
        ledger._leases.renew_once()
        assert ledger._leases.take_lost() is None
        assert lease_of(tmp_path / "lease.db", "live") > before


def lease_of(path: Path, run_id: str) -> str:
    with sqlite3.connect(path) as conn:
        row = conn.execute("SELECT lease_expires_at FROM runs WHERE run_id = ?", (run_id,))
        return str(row.fetchone()[0])


def test_a_failing_ledger_write_stops_the_run_keeping_what_was_answered(tmp_path, monkeypatch):
    import asyncio

    from clearance import Agent, Orchestrator, Task, Team
    from clearance._state.ledger import writes
    from clearance.testing import FunctionModel

    real = writes.call_rows

    def overflowing(**kwargs):
        rows = real(**kwargs)
        if kwargs["subject"] == "task:b":
            rows["call"][0]["requests"] = 10**20  # does not fit an SQLite integer
        return rows

    monkeypatch.setattr(writes, "call_rows", overflowing)
    db = f"sqlite:///{tmp_path / 'fail.db'}"
    team = Team(agents=(Agent(name="a", instructions="A."),))
    tasks = [
        Task(id="a", title="A", description="Do a.", assignee="a"),
        Task(id="b", title="B", description="Do b.", assignee="a", depends_on=["a"]),
    ]

    async def run():
        with RunLedger(db) as ledger:
            orch = Orchestrator(team, model=FunctionModel(lambda r: "ANSWER"), ledger=ledger)
            await orch.run_tasks(tasks)

    with pytest.raises(StoreError, match="task:b"):
        asyncio.run(run())
    with RunLedger(db) as ledger:
        run_record = ledger.list_runs()[0]
        assert run_record.status == "interrupted"
        assert "task:b" in (run_record.error or "")
        tasks_by_id = {t.task_id: t for t in ledger.tasks(run_record.run_id)}
        assert tasks_by_id["a"].status == "completed" and tasks_by_id["a"].result == "ANSWER"
        assert [c.subject for c in ledger.calls(run_record.run_id)] == ["task:a"]
