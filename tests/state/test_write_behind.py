"""Write-behind: queued ledger writes commit in order, in groups, and lose nothing."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from clearance._context.builder import ContextBuilder
from clearance._core.errors import StoreError
from clearance._core.prompt import Prompt
from clearance._core.spec import Agent, Task
from clearance._state.graph import TaskGraph
from clearance._state.ledger import RunLedger
from clearance._state.queue import TaskQueue
from clearance._state.write_behind import PendingWrite, WriteBehind
from clearance.models import ModelResponse, Usage, estimate_tokens

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


# -- WriteBehind on its own ---------------------------------------------------------------


class Recorder:
    """A commit function that keeps every group; fails writes whose operation says so."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.groups: list[list[str]] = []
        self.committed: list[str] = []
        self.delay_s = delay_s
        self.thread_ids: set[int] = set()

    def __call__(self, writes: Sequence[PendingWrite]) -> None:
        self.thread_ids.add(threading.get_ident())
        time.sleep(self.delay_s)
        if any("bad" in w.operation for w in writes):
            raise StoreError(f"cannot {next(w.operation for w in writes if 'bad' in w.operation)}")
        self.groups.append([w.operation for w in writes])
        self.committed.extend(w.operation for w in writes)


def write(name: str) -> PendingWrite:
    return PendingWrite(name, {"x": [{"name": name}]})


def test_writes_commit_in_submission_order_on_another_thread() -> None:
    recorder = Recorder(delay_s=0.001)
    behind = WriteBehind(recorder, name="test-writer", max_group=7)
    names = [f"w{i}" for i in range(100)]
    for name in names:
        behind.submit(write(name))
    behind.flush()
    assert recorder.committed == names
    assert all(len(g) <= 7 for g in recorder.groups)
    assert recorder.thread_ids == {behind.thread_id}
    assert threading.get_ident() not in recorder.thread_ids
    behind.close()


def test_a_full_queue_blocks_the_submitter_until_the_writer_catches_up() -> None:
    recorder = Recorder(delay_s=0.002)
    behind = WriteBehind(recorder, name="test-writer", max_pending=3, max_group=2)
    names = [f"w{i}" for i in range(40)]
    for name in names:
        behind.submit(write(name))
        assert behind.pending <= 3
    behind.close()
    assert recorder.committed == names


def test_a_failing_write_is_isolated_and_raised_once() -> None:
    recorder = Recorder(delay_s=0.01)  # slow: the writes below queue up into one group
    behind = WriteBehind(recorder, name="test-writer")
    for name in ["w0", "w1", "bad one", "w3", "bad two", "w5"]:
        behind.submit(write(name))
    with pytest.raises(StoreError, match=r"cannot bad one") as info:
        behind.flush()
    assert recorder.committed == ["w0", "w1", "w3", "w5"]  # the others are kept, in order
    if recorder.groups[0] != ["w0"]:  # both failures were in one group
        assert "1 more failed write" in str(info.value)
    behind.flush()  # raised once
    behind.submit(write("w6"))
    behind.close()
    assert recorder.committed[-1] == "w6"


def test_close_commits_what_is_queued_and_refuses_more() -> None:
    recorder = Recorder(delay_s=0.001)
    behind = WriteBehind(recorder, name="test-writer")
    for i in range(20):
        behind.submit(write(f"w{i}"))
    behind.close()
    assert len(recorder.committed) == 20
    with pytest.raises(StoreError, match="cannot late: the writer thread is closed"):
        behind.submit(write("late"))
    behind.close()  # twice is fine


def test_close_without_raising_drops_the_failure() -> None:
    behind = WriteBehind(Recorder(), name="test-writer")
    behind.submit(write("bad"))
    behind.close(raise_errors=False)


def test_on_idle_runs_on_the_writer_after_a_group_when_nothing_waits() -> None:
    recorder = Recorder()
    idle: list[tuple[int, list[str]]] = []  # (thread, what was committed by then)

    def on_idle() -> None:
        idle.append((threading.get_ident(), list(recorder.committed)))

    behind = WriteBehind(recorder, name="test-writer", on_idle=on_idle)
    behind.submit(write("w0"))  # not flushed: the writer takes it on its own (quiet_s=0)
    deadline = time.monotonic() + 10
    while not idle:
        assert time.monotonic() < deadline, "on_idle never ran after the group"
        time.sleep(0.005)
    assert idle == [(behind.thread_id, ["w0"])]  # after the commit, on the writer thread
    behind.close()
    assert len(idle) == 1  # not again for closing with nothing queued


def test_on_idle_does_not_run_after_a_group_a_flush_waited_for() -> None:
    # The flusher goes on with its own work at once (the ledger: `finish_run`'s transaction);
    # housekeeping then would compete with it.
    recorder = Recorder()
    idle: list[list[str]] = []
    # The writer waits for a 30 s pause, so only the flush makes it take the write.
    behind = WriteBehind(
        recorder,
        name="test-writer",
        quiet_s=30,
        max_delay_s=60,
        on_idle=lambda: idle.append(list(recorder.committed)),
    )
    behind.submit(write("w0"))
    behind.flush()
    assert recorder.committed == ["w0"]
    behind.close()  # joins the writer: an on_idle decided after the flushed group has run
    assert recorder.groups == [["w0"]]
    assert idle == []


def test_a_failing_on_idle_is_raised_once_and_loses_no_write() -> None:
    def on_idle() -> None:
        raise OSError("disk trouble")

    recorder = Recorder()
    behind = WriteBehind(recorder, name="test-writer", on_idle=on_idle)
    behind.submit(write("w0"))
    deadline = time.monotonic() + 10
    while not recorder.committed:  # taken by the writer on its own, not for a flush
        assert time.monotonic() < deadline, "the write was never committed"
        time.sleep(0.005)
    while True:
        try:
            behind.flush()
        except StoreError as exc:
            assert "idle work" in str(exc) and "OSError: disk trouble" in str(exc)
            break
        assert time.monotonic() < deadline, "the failure of on_idle was never raised"
        time.sleep(0.005)
    behind.flush()  # raised once
    behind.close()
    assert recorder.committed == ["w0"]


# -- the ledger in write-behind mode ------------------------------------------------------

GRAPH = TaskGraph(
    [
        Task(id="a", title="A", description="First.", assignee="worker"),
        Task(id="b", title="B", description="Second.", assignee="worker", depends_on=("a",)),
    ]
)
WORKER = Agent(name="worker", instructions="You work.")


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    base: str = request.getfixturevalue("postgres_url")
    return base


@pytest.fixture
def ledger(url: str) -> Iterator[RunLedger]:
    with RunLedger(url) as opened:
        yield opened


def new_run(ledger: RunLedger) -> str:
    from clearance._core.ids import new_id

    run_id = new_id("run")
    ledger.start_run(run_id=run_id, team="t", goal=None, graph=GRAPH.to_dict())
    return run_id


def a_prompt(task_id: str) -> Prompt:
    builder = ContextBuilder(count_tokens=estimate_tokens)
    return builder.build_task_prompt(GRAPH.get(task_id), agent=WORKER, queue=TaskQueue(GRAPH))


def test_the_ledger_reads_its_own_queued_writes(ledger: RunLedger) -> None:
    run_id = new_run(ledger)
    queue = TaskQueue(GRAPH)
    with ledger.write_behind():
        ledger.record_tasks(run_id, queue.states())
        queue.start("a")
        ledger.record_task(run_id, queue.get("a"))
        queue.complete("a", "done")
        ledger.record_task(run_id, queue.get("a"))
        # A read waits for the queue: the state is the last one, in first-recorded order.
        assert [(t.task_id, t.status) for t in ledger.tasks(run_id)] == [
            ("a", "completed"),
            ("b", "pending"),  # recorded once, before "a" completed
        ]


def test_leaving_the_context_commits_everything_for_other_readers(
    ledger: RunLedger, url: str
) -> None:
    run_id = new_run(ledger)
    queue = TaskQueue(GRAPH)
    prompt = a_prompt("a")
    with ledger.write_behind():
        ledger.record_tasks(run_id, queue.states())
        call_ids = [
            ledger.record_call(
                run_id=run_id,
                subject="task:a",
                agent="worker",
                model_id="fake:x",
                prompt=prompt,
                response=ModelResponse(text=f"r{i}", model_id="fake:x", usage=Usage(requests=1)),
                error=None,
                started_at=T0,
                latency_s=0.1,
            )
            for i in range(50)
        ]
        queue.start("a")
        queue.fail("a", "it broke")
        ledger.record_tasks(run_id, [queue.get("a"), queue.get("b")])
    with RunLedger(url) as other:  # another connection pool: sees only committed rows
        calls = other.calls(run_id)
        assert [c.call_id for c in calls] == call_ids
        assert [c.response for c in calls] == [f"r{i}" for i in range(50)]
        assert all(c.record_sha256 for c in calls)
        assert {t.task_id: t.status for t in other.tasks(run_id)} == {
            "a": "failed",
            "b": "skipped",
        }
        assert other.task_reasons(run_id)["a"] == ["it broke"]


def test_a_failed_queued_write_is_raised_by_the_next_call_and_loses_no_other(
    ledger: RunLedger,
) -> None:
    run_id = new_run(ledger)
    queue = TaskQueue(GRAPH)
    with ledger.write_behind():
        ledger.record_task(run_id, queue.get("a"))
        ledger.record_task("run_missing", queue.get("a"))  # no such run: a foreign key error
        ledger.record_task(run_id, queue.get("b"))
        with pytest.raises(StoreError, match=r"record task 'a' of run 'run_missing'"):
            ledger.flush()
        assert [t.task_id for t in ledger.tasks(run_id)] == ["a", "b"]  # raised once


def test_an_exception_in_the_context_propagates_and_the_writes_are_kept(
    ledger: RunLedger, url: str
) -> None:
    run_id = new_run(ledger)
    queue = TaskQueue(GRAPH)
    with pytest.raises(KeyboardInterrupt), ledger.write_behind():
        ledger.record_tasks(run_id, queue.states())
        ledger.record_task("run_missing", queue.get("a"))  # fails; the interrupt wins
        raise KeyboardInterrupt
    with RunLedger(url) as other:
        assert [t.task_id for t in other.tasks(run_id)] == ["a", "b"]


def test_closing_inside_the_context_commits_the_queue(url: str) -> None:
    ledger = RunLedger(url)
    run_id = new_run(ledger)
    with ledger.write_behind():
        ledger.record_tasks(run_id, TaskQueue(GRAPH).states())
        ledger.close()
    with RunLedger(url) as other:
        assert len(other.tasks(run_id)) == 2


def test_an_in_memory_ledger_writes_on_the_callers_thread() -> None:
    with RunLedger("sqlite://") as ledger, ledger.write_behind():
        run_id = new_run(ledger)
        ledger.record_tasks(run_id, TaskQueue(GRAPH).states())
        assert [t.task_id for t in ledger.tasks(run_id)] == ["a", "b"]


def test_with_quiet_s_the_writer_waits_for_a_pause() -> None:
    recorder = Recorder()
    behind = WriteBehind(recorder, name="test-writer", quiet_s=1.0, max_delay_s=30)
    for i in range(10):
        behind.submit(write(f"w{i}"))
        time.sleep(0.005)
    assert recorder.committed == []  # still writing: no pause yet
    deadline = time.monotonic() + 10
    while not recorder.committed:  # the pause: one group with everything
        assert time.monotonic() < deadline, "nothing committed after a pause"
        time.sleep(0.01)
    assert recorder.groups[0] == [f"w{i}" for i in range(10)]
    behind.close()


def test_max_delay_s_bounds_the_wait_for_a_pause() -> None:
    recorder = Recorder()
    behind = WriteBehind(recorder, name="test-writer", quiet_s=5, max_delay_s=0.05)
    deadline = time.monotonic() + 10
    i = 0
    while not recorder.committed:  # never pausing 5 s; committed after 0.05 s anyway
        assert time.monotonic() < deadline, "a write waited past max_delay_s"
        behind.submit(write(f"w{i}"))
        i += 1
        time.sleep(0.005)
    behind.close()
    assert recorder.committed == [f"w{j}" for j in range(i)]


def test_flush_does_not_wait_for_a_pause() -> None:
    recorder = Recorder()
    behind = WriteBehind(recorder, name="test-writer", quiet_s=30, max_delay_s=30)
    behind.submit(write("w0"))
    started = time.monotonic()
    behind.flush()
    assert recorder.committed == ["w0"]
    assert time.monotonic() - started < 10
    behind.close()


def test_between_groups_the_writer_checkpoints_the_sqlite_log(tmp_path: Path) -> None:
    # SQLite alone copies the log into the database file only past 1,000 pages or on close;
    # the writer does it at its first pause, so a run's end does not wait for it.
    path = tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{path}") as ledger:
        size_before = path.stat().st_size
        with ledger.write_behind():
            run_id = new_run(ledger)
            ledger.record_tasks(run_id, TaskQueue(GRAPH).states())
            # Not flushed: after a group a caller waits for, the caller goes on instead.
            deadline = time.monotonic() + 10
            while path.stat().st_size <= size_before:
                assert time.monotonic() < deadline, "the log was not checkpointed in a pause"
                time.sleep(0.01)
        assert [t.task_id for t in ledger.tasks(run_id)] == ["a", "b"]


# -- waiting from a coroutine ---------------------------------------------------------------


async def test_wait_returns_once_its_writes_are_committed_without_a_pause_or_a_thread() -> None:
    recorder = Recorder()
    behind = WriteBehind(recorder, name="test-writer", quiet_s=30, max_delay_s=30)
    threads = threading.active_count()
    behind.submit(write("w0"))
    behind.submit(write("w1"))
    await asyncio.wait_for(behind.wait(), 10)  # not 30 s: a waiter makes the group urgent
    assert recorder.committed == ["w0", "w1"]
    assert threading.active_count() == threads  # the writer woke the loop: no helper thread
    await behind.wait()  # nothing queued: at once
    behind.close()


async def test_concurrent_waits_are_woken_by_their_groups() -> None:
    recorder = Recorder(delay_s=0.005)
    behind = WriteBehind(recorder, name="test-writer")
    seen: list[tuple[str, list[str]]] = []

    async def record_then_wait(name: str) -> None:
        behind.submit(write(name))
        await behind.wait()
        seen.append((name, list(recorder.committed)))

    names = [f"w{i}" for i in range(50)]
    await asyncio.gather(*(record_then_wait(n) for n in names))
    assert recorder.committed == names
    for name, committed in seen:  # each woke only once its own write was committed
        assert name in committed
    assert len(recorder.groups) < len(names)  # grouped, not one transaction per wait
    behind.close()


async def test_a_wait_covering_a_failed_write_raises_it_once() -> None:
    recorder = Recorder()
    behind = WriteBehind(recorder, name="test-writer")
    behind.submit(write("w0"))
    await behind.wait()
    behind.submit(write("bad request"))
    with pytest.raises(StoreError, match="cannot bad request"):
        await behind.wait()
    behind.submit(write("w2"))
    await behind.wait()  # raised once: not again
    behind.flush()
    behind.close()
    assert recorder.committed == ["w0", "w2"]


async def test_a_cancelled_wait_does_not_disturb_the_writer() -> None:
    recorder = Recorder(delay_s=0.05)
    behind = WriteBehind(recorder, name="test-writer")
    behind.submit(write("w0"))
    waiting = asyncio.ensure_future(behind.wait())
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    behind.submit(write("w1"))
    await behind.wait()
    behind.close()
    assert recorder.committed == ["w0", "w1"]


def test_on_idle_runs_at_most_once_per_idle_interval() -> None:
    recorder = Recorder()
    idle: list[float] = []
    behind = WriteBehind(
        recorder, name="test-writer", on_idle=lambda: idle.append(0.0), idle_interval_s=60
    )
    for i in range(3):  # three groups, each followed by a pause
        behind.submit(write(f"w{i}"))
        deadline = time.monotonic() + 10
        while len(recorder.committed) <= i:
            assert time.monotonic() < deadline, "the write was never committed"
            time.sleep(0.005)
        time.sleep(0.02)
    behind.close()
    assert recorder.committed == ["w0", "w1", "w2"]
    assert idle == [0.0]  # after the first group only: the next were within 60 s


async def test_waits_begun_together_share_one_group() -> None:
    recorder = Recorder()
    behind = WriteBehind(recorder, name="test-writer", quiet_s=30, max_delay_s=30)

    async def record_then_wait(name: str) -> None:
        time.sleep(0.002)  # noqa: ASYNC251 (building a request; the interpreter lock let go)
        behind.submit(write(name))
        await behind.wait()

    names = [f"w{i}" for i in range(20)]
    await asyncio.wait_for(asyncio.gather(*(record_then_wait(n) for n in names)), 10)
    assert recorder.groups == [names]  # the loop started them all before the writer took any
    behind.close()
