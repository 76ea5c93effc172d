"""`WriteBehind`: a background thread that commits queued writes in groups.

The run ledger writes a record for every task state and every model call. Committing each
one in its own transaction, on the orchestrator's event-loop thread, made the database the
largest cost of a run (see BENCHMARKS.md). With write-behind the caller only queues the
write; one writer thread takes everything queued so far and commits it in one
transaction (*group commit*, as in database engines' log writers), so a transaction's fixed
cost is shared by every write that arrived while the previous one was committing.

Guarantees:
    * **Order.** Writes commit in the order they were submitted; a group is one transaction.
      So the database always holds a *prefix* of the writes: after a crash it is what a crash
      a moment earlier would have left, never a later write without an earlier one.
    * **Nothing lost silently.** If a group fails, its writes are retried one per
      transaction, so only the failing writes are lost (once one of them fails because the
      connection was lost, the database not answering in time, the rest fail with it
      rather than wait as long each); the first failure is raised to the
      submitting thread by its next `submit`, `flush` or `close`.
    * **Bounded memory.** At most ``max_pending`` writes wait; `submit` then blocks until
      the writer catches up (back-pressure).

A coroutine waits for its writes with `WriteBehind.wait` without a thread of its own: the
writer resolves the waiting futures itself once their group is committed, with one
``call_soon_threadsafe`` per event loop and group (not one thread hop per wait), and takes a
group at once while anyone waits.

Between groups, when nothing waits, the writer can run housekeeping (``on_idle``): the run
ledger checkpoints SQLite's write-ahead log there, off the caller's thread. Not after a group
that a caller waits for in `flush`: that caller goes on at once (the ledger with a transaction
of its own, as ``finish_run`` at the end of a run), and housekeeping would compete with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from clearance._core.errors import LedgerError, StoreError
from clearance._state.db.failures import commit_unknown
from clearance._state.db.sqlite import lock_wait_failed

__all__ = ["COMMITTED", "PendingWrite", "Rows", "Write", "WriteBehind"]


Rows = Mapping[str, Sequence[dict[str, Any]]]
"""Parameter rows per statement kind (``{"task": [...], "call": [...]}``)."""


_Wakes = dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[None], Any]]]
"""Settled waits per event loop: each future with ``None`` or its failure."""


@dataclass(frozen=True, slots=True)
class PendingWrite:
    """One queued write: rows for one or more statements, committed together.

    Attributes:
        operation: What the write does, for error messages (``"record task 'a' of run 'r'"``).
        rows: The parameter rows per statement kind, or a function returning them; a
            function is called on the writer thread, so it may only read immutable values
            (read clocks and make ids before queuing).
    """

    operation: str
    rows: Rows | Callable[[], Rows]

    def build(self) -> Rows:
        """The parameter rows (calls ``rows`` if it is a function)."""
        return self.rows() if callable(self.rows) else self.rows


class Write(Protocol):
    """What `WriteBehind` queues: a `PendingWrite`, or an object building its rows the same way.

    ``build`` runs on the writer thread, so it may only read immutable values.
    """

    @property
    def operation(self) -> str:
        """What the write does, for error messages."""
        ...

    def build(self) -> Rows:
        """The parameter rows per statement kind."""
        ...


class _Committed:
    """An awaitable that is done at once: what `WriteBehind.wait` returns when nothing waits."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # a generator function: awaiting it finishes at once


COMMITTED: Awaitable[None] = _Committed()
"""Awaited when every write is already committed (see `WriteBehind.wait`)."""


Commit = Callable[[Sequence[Write]], None]
"""Commits writes in one transaction; raises `StoreError` (naming the operation) on failure."""


@dataclass(slots=True)
class _Waiter:
    """A coroutine waiting in `WriteBehind.wait` for writes ``after + 1 .. target``."""

    after: int
    target: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]


class WriteBehind:
    """Queue writes on the caller's thread; commit them in groups on one writer thread.

    With ``quiet_s`` set, the writer waits for the submitting thread to pause (no new write
    for ``quiet_s``) before it takes a group, so its work runs while the submitter waits
    instead of competing with it for the interpreter lock; it waits no longer than
    ``max_delay_s`` after the oldest queued write, nor once ``max_group`` writes wait, nor
    while someone is in `flush` or `close`.

    Args:
        commit: Commits a group of writes in one transaction (the ledger's).
        name: The writer thread's name.
        max_pending: Writes that may wait before `submit` blocks.
        max_group: Most writes committed in one transaction.
        quiet_s: Seconds without a new write that count as a pause; ``0`` commits at once.
        max_delay_s: Longest a write waits for a pause, in seconds.
        on_idle: Called on the writer thread after it committed a group when no write waits,
            no thread waits in `flush` and the writer is not closing; writes queued meanwhile
            wait until it returns. An exception it raises is reported like a failed write.
        idle_interval_s: Least seconds from one call of ``on_idle`` to the next, so that
            housekeeping rarely stands between a write and a coroutine waiting for it.

    Raises:
        StoreError: From `submit`, `flush` or `close`: an earlier write failed to commit (the
            message names it), or ``on_idle`` failed; raised once.
    """

    def __init__(
        self,
        commit: Commit,
        *,
        name: str,
        max_pending: int = 10_000,
        max_group: int = 2_000,
        quiet_s: float = 0.0,
        max_delay_s: float = 0.5,
        on_idle: Callable[[], None] | None = None,
        idle_interval_s: float = 0.0,
    ) -> None:
        self._commit = commit
        self._on_idle = on_idle
        self._idle_interval_s = idle_interval_s
        self._idle_at = -float("inf")  # when on_idle last ran (time.monotonic)
        self._max_pending = max_pending
        self._max_group = max_group
        self._quiet_s = quiet_s
        self._max_delay_s = max_delay_s
        # The queued writes, and when each was queued (`time.monotonic`) in a deque of its
        # own: a float is no object the garbage collector tracks, a (time, write) pair is.
        self._queue: deque[Write] = deque()
        self._queued_at: deque[float] = deque()
        self._flushing = 0  # threads in `flush`
        self._waiters: deque[_Waiter] = deque()  # coroutines in `wait`, by target
        self._urging: set[asyncio.AbstractEventLoop] = set()  # loops with an `_urge` due
        self._urged = False  # a waiting coroutine's loop asked for the queue to be taken
        # (write number, its failure, the failure reported for its group) per failed write
        self._failed: list[tuple[int, StoreError, StoreError]] = []
        # A plain lock (nothing takes it twice), entered directly (`with self._lock`): the
        # condition's own ``__enter__`` is a Python call, made several times per task.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._submitted = 0
        self._done = 0  # writes committed (or failed and reported)
        self._error: StoreError | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    @property
    def thread_id(self) -> int | None:
        """The writer thread's identifier (`threading.get_ident` on that thread)."""
        return self._thread.ident

    @property
    def awaited(self) -> bool:
        """Whether a coroutine waits in `wait` (read without the lock: a hint)."""
        return bool(self._waiters)

    @property
    def pending(self) -> int:
        """Writes queued and not yet taken by the writer thread."""
        with self._lock:
            return len(self._queue)

    def submit(self, write: Write) -> None:
        """Queue ``write``; blocks while ``max_pending`` writes wait.

        Raises:
            StoreError: An earlier write failed (raised once), or the writer is closed.
        """
        with self._lock:
            if self._error is not None:
                self._raise_error()
            if self._stopping:
                raise LedgerError(f"cannot {write.operation}: the writer thread is closed")
            while len(self._queue) >= self._max_pending:
                self._cond.notify_all()  # the writer may be waiting for a pause
                self._cond.wait()
            self._queue.append(write)
            self._queued_at.append(time.monotonic())
            self._submitted += 1
            if len(self._queue) == 1:  # the writer sleeps until the queue is not empty
                self._cond.notify_all()

    def flush(self) -> None:
        """Block until every write submitted so far is committed.

        Raises:
            StoreError: A write failed (raised once).
        """
        with self._lock:
            target = self._submitted
            self._flushing += 1
            self._cond.notify_all()  # no waiting for a pause now
            try:
                while self._done < target and self._thread.is_alive():
                    self._cond.wait()
            finally:
                self._flushing -= 1
            self._raise_error()

    def wait(self) -> Awaitable[None]:
        """Wait, without blocking the event loop, until every write submitted so far is committed.

        Await what it returns (the future the writer resolves, or `COMMITTED` when nothing
        is left to commit; no coroutine of its own). The writer thread resolves the wait when
        the group holding the last of these writes is committed. It takes that group without
        waiting for a pause once the event loop has run the callbacks that were ready when
        the wait began: coroutines the loop is starting at the same moment queue their writes
        first, and they all share one group.

        Raises:
            StoreError: One of these writes failed (this error is then not raised again by
                `submit`, `flush` or `close`), or an earlier failure not raised yet; or the
                writer stopped before committing them.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            self._raise_error()
            target = self._submitted
            if self._done >= target:
                return COMMITTED
            if not self._thread.is_alive():
                raise LedgerError("cannot wait for the ledger's writes: the writer thread stopped")
            future: asyncio.Future[None] = loop.create_future()
            self._waiters.append(_Waiter(self._done, target, loop, future))
            if loop not in self._urging:
                # Urgent once the loop has run what is ready now: the other tasks it is
                # starting queue their requests first, and all go in one group.
                self._urging.add(loop)
                loop.call_soon(self._urge, loop)
        return future

    def _urge(self, loop: asyncio.AbstractEventLoop) -> None:
        """On ``loop``: have the writer take the queue at once (see `wait`)."""
        with self._lock:
            self._urging.discard(loop)
            self._urged = True
            self._cond.notify_all()

    def close(self, *, raise_errors: bool = True) -> None:
        """Commit what is queued, then stop the writer thread. Closing twice is fine.

        Args:
            raise_errors: Raise a pending failure (pass ``False`` while another exception
                is already propagating).

        Raises:
            StoreError: A write failed and ``raise_errors`` is true.
        """
        with self._lock:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join()
        with self._lock:
            wake = self._settle_waiters(stopped=True)
            if not raise_errors:
                self._error = None
        _wake(wake)
        if raise_errors:
            with self._lock:
                self._raise_error()

    def _raise_error(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                self._wait_for_pause()
                count = min(len(self._queue), self._max_group)
                queue, queued_at = self._queue, self._queued_at
                group = [queue.popleft() for _ in range(count)]
                for _ in range(count):
                    queued_at.popleft()
                self._urged = False  # later waiters urge again
                self._cond.notify_all()  # room for blocked submitters
            error, failed = self._commit_group(group)
            with self._lock:
                if error is not None and self._error is None:
                    self._error = error
                if error is not None:
                    self._failed.extend((self._done + 1 + i, e, error) for i, e in failed)
                self._done += len(group)
                self._cond.notify_all()
                wake = self._settle_waiters()
                # Not for a flusher: it resumes now, and would compete with the housekeeping.
                idle = (
                    self._on_idle is not None
                    and not (self._queue or self._stopping or self._flushing or self._waiters)
                    and time.monotonic() - self._idle_at >= self._idle_interval_s
                )
            _wake(wake)  # outside the lock: the loop's thread may want it meanwhile
            if idle:
                self._run_on_idle()

    def _settle_waiters(self, *, stopped: bool = False) -> _Wakes:
        """With the lock held: settle the waits whose writes are all committed (or failed).

        A wait whose writes include a failed one gets that failure (which then counts as
        raised). With ``stopped``, every wait left is settled (the writer is gone).

        Returns:
            The outcomes per event loop, for `_wake` to deliver once the lock is released.
        """
        by_loop: _Wakes = {}
        while self._waiters and (stopped or self._waiters[0].target <= self._done):
            waiter = self._waiters.popleft()
            found = [(e, r) for n, e, r in self._failed if waiter.after < n <= waiter.target]
            outcome: StoreError | None = found[0][0] if found else None
            if found and found[0][1] is self._error:
                self._error = None  # raised by this wait
            if outcome is None and waiter.target > self._done:
                outcome = LedgerError("the ledger's writer stopped before committing a write")
            by_loop.setdefault(waiter.loop, []).append((waiter.future, outcome))
        if not self._waiters:
            self._failed.clear()  # no wait can cover these any more
        return by_loop

    def _run_on_idle(self) -> None:
        assert self._on_idle is not None
        self._idle_at = time.monotonic()
        try:
            self._on_idle()
        except Exception as exc:  # reported to the submitter, like a failed write
            with self._lock:
                if self._error is None:
                    self._error = _as_store_error("run the writer's idle work", exc)

    def _wait_for_pause(self) -> None:
        """With the lock held: wait until no write arrived for ``quiet_s`` (or it is urgent)."""
        if not self._quiet_s:
            return
        while not (
            self._stopping
            or self._flushing
            or self._urged
            or len(self._queue) >= self._max_group
            or time.monotonic() - self._queued_at[0] >= self._max_delay_s
        ):
            seen = self._submitted
            self._cond.wait(self._quiet_s)
            if self._submitted == seen:
                return  # a pause

    def _commit_group(
        self, group: list[Write]
    ) -> tuple[StoreError | None, list[tuple[int, StoreError]]]:
        """Commit ``group``; if that fails, each write alone.

        Unless it failed waiting for SQLite's lock (another process held it throughout the
        busy timeout): then every write of the group fails with that, at once, rather than
        each waiting the timeout again; likewise for the writes after one that failed so.
        Nor when the connection was lost while the group committed (`commit_unknown`): the
        server may have committed it, and its writes sent again would be recorded twice (or
        fail as duplicates); every write of the group fails with that error, and `resume`
        reads what was committed.

        Returns:
            The failure to report (the first, naming how many more), and each failed
            write's position in ``group`` with its failure.
        """
        lost: StoreError | None = None
        try:
            self._commit(group)
            return None, []
        except Exception as exc:  # any failure: isolate it below
            if len(group) == 1:
                error = _as_store_error(group[0].operation, exc)
                return error, [(0, error)]
            # Another process held the lock throughout its timeout, or the group may have
            # been committed: either way, not to be written again one by one.
            if lock_wait_failed(exc) or commit_unknown(exc):
                lost = _as_store_error(group[0].operation, exc)
        failures: list[tuple[int, StoreError]] = []
        for position, write in enumerate(group):
            if lost is not None:  # the database stopped answering: one deadline, not one each
                failures.append((position, lost))
                continue
            try:
                self._commit([write])
            except Exception as exc:  # reported to the submitter
                failures.append((position, _as_store_error(write.operation, exc)))
                if _connection_lost(exc) or lock_wait_failed(exc):
                    lost = failures[-1][1]
        if not failures:
            return None, []
        first = failures[0][1]
        if len(failures) == 1:
            return first, failures
        return LedgerError(f"{first} (and {len(failures) - 1} more failed write(s))"), failures


def _wake(wakes: _Wakes) -> None:
    """Resolve settled waits: one ``call_soon_threadsafe`` per event loop wakes all of its."""
    for loop, settled in wakes.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            loop.call_soon_threadsafe(_resolve, settled)


def _resolve(settled: list[tuple[asyncio.Future[None], StoreError | None]]) -> None:
    """On the waiting loop: end each wait (one it cancelled meanwhile is left alone)."""
    for future, error in settled:
        if future.done():
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)


def _connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` came from the database's connection rather than from the write.

    SQLAlchemy's ``connection_invalidated`` (a server that did not answer within its
    deadline), or an ``OperationalError`` outside any statement (no connection could be
    made in time): each further write alone would wait that long again.
    """
    seen: BaseException | None = exc
    for _ in range(8):  # a short chain of causes
        if seen is None:
            return False
        if getattr(seen, "connection_invalidated", False):
            return True
        orig = getattr(seen, "orig", None)
        if (
            hasattr(seen, "connection_invalidated")
            and getattr(seen, "statement", "") is None
            and type(orig).__name__ in ("OperationalError", "ConnectionTimeout")
        ):
            return True
        seen = seen.__cause__
    return False


def _as_store_error(operation: str, exc: Exception) -> StoreError:
    if isinstance(exc, StoreError):
        return exc
    return LedgerError(f"cannot {operation}: {type(exc).__name__}: {exc}")
