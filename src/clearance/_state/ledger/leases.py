"""Run leases: one process runs a run at a time, and renews its lease while it does.

A run's row names its owner (`clearance._state.lease.new_owner`) and when its lease expires;
`LeaseKeeper` renews the leases of the runs a ledger holds from a thread, every
``LEASE_S / 3``, and notes when another process took one over.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.engine import Connection

from clearance._core.clock import Clock
from clearance._core.errors import ConfigError, LedgerError, StoreError
from clearance._state.db.server_clock import ServerClock
from clearance._state.lease import LEASE_S, describe_owner, new_owner, owner_is_dead
from clearance._state.ledger.schema import ENTRIES, RUNS

__all__ = ["LeaseKeeper", "lease_until"]


def lease_until(clock: Clock) -> datetime:
    """When a lease taken or renewed now expires, on ``clock``.

    Leases are between processes, perhaps on several hosts: ``clock`` is the database's
    (`DatabaseBase.server_time`), never a test's clock.
    """
    return clock() + timedelta(seconds=LEASE_S)


class LeaseKeeper:
    """The leases of the runs one ledger runs, renewed by a thread while held.

    Args:
        writing: Opens one write transaction (``writing(operation)``) without waiting for
            the ledger's queued writes, whose errors belong to the ledger's user.
        renew: Whether to renew from a thread (not for an in-memory database, which another
            thread would not see).
        clock: The database's clock (`DatabaseBase.server_time`); a `ServerClock` is
            measured again at each renewal.
    """

    def __init__(
        self,
        writing: Callable[[str], AbstractContextManager[Connection]],
        *,
        renew: bool,
        clock: Clock,
    ) -> None:
        self.owner = new_owner()
        """This ledger's owner string (host, process, start time)."""
        self._writing = writing
        self._clock = clock
        self._renew = renew
        self._owned: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._lost: StoreError | None = None

    def hold(self, run_id: str) -> None:
        """Renew ``run_id``'s lease from now on (a thread renews every ``LEASE_S / 3``)."""
        with self._lock:
            self._owned.add(run_id)
            if self._renewer is None and self._renew:
                self._renewer = threading.Thread(
                    target=self._renew_leases, name="clearance-lease", daemon=True
                )
                self._renewer.start()

    def drop(self, run_id: str) -> None:
        """Stop renewing ``run_id``'s lease."""
        with self._lock:
            self._owned.discard(run_id)

    def take_lost(self) -> StoreError | None:
        """The error of a lease another process took over since last asked, if any."""
        lost, self._lost = self._lost, None
        return lost

    def stop(self) -> None:
        """Stop the renewing thread and wait for it."""
        self._stop.set()
        renewer, self._renewer = self._renewer, None
        if renewer is not None:
            renewer.join()

    def _renew_leases(self) -> None:
        while not self._stop.wait(LEASE_S / 3):
            self.renew_once()

    def renew_once(self) -> None:
        """Renew every held lease now; note a run whose row names another owner as lost.

        A run without a row yet (its first write is still queued) or without an owner (it
        finished since the held set was read) is not a takeover. A busy or unreachable
        database is tried again at the next renewal (the lease may lapse meanwhile).
        """
        with self._lock:
            owned = sorted(self._owned)
        if not owned:
            return
        try:
            with self._writing("renew run leases") as conn:
                if isinstance(self._clock, ServerClock):
                    self._clock.refresh(conn)
                for run_id in owned:
                    renewed = conn.execute(
                        update(RUNS)
                        .where(RUNS.c.run_id == run_id, RUNS.c.owner == self.owner)
                        .values(lease_expires_at=lease_until(self._clock))
                    ).rowcount
                    if renewed or self._lost is not None:
                        continue
                    holder = conn.execute(
                        select(RUNS.c.owner).where(RUNS.c.run_id == run_id)
                    ).first()
                    if holder is not None and holder.owner not in (None, self.owner):
                        self._lost = LedgerError(
                            f"run {run_id!r} was taken over by another process; this "
                            "process stopped recording it"
                        )
        except StoreError:
            return

    def check(
        self, run_id: str, row: Any, now: datetime, *, force: bool, seen: int | None = None,
        conn: Connection | None = None,
    ) -> None:  # fmt: skip
        """Refuse to take over a run another process holds, or one changed since it was read.

        See `RunLedger.reopen_run`. Two ``resume`` processes may read a paused run at once;
        the first takes it over, carries out its approved calls and stops; the second would
        then take the run over too and act on what it read before: an approved call the
        first carried out would run again. So a take-over is refused, whatever ``force``
        says, once the run's chain grew past ``seen`` (read in the take-over's transaction
        ``conn``).

        Raises:
            ConfigError: ``row`` (``owner``, ``lease_expires_at``, ``status``) shows a live
                owner other than this one, and not ``force``; or the run's chain head is not
                ``seen``.
        """
        owner, expires = row.owner, row.lease_expires_at
        live = owner is not None and owner != self.owner and not force
        held = live and row.status == "running" and expires is not None and expires > now
        if held and not owner_is_dead(owner):
            raise ConfigError(
                f"run {run_id} is being run by {describe_owner(owner, expires)}; wait for it "
                "to stop, or resume with --force if you know it has",
            )
        if seen is None or conn is None:
            return
        head = conn.execute(select(func.max(ENTRIES.c.seq)).where(ENTRIES.c.run_id == run_id))
        if head.scalar() != seen:
            raise ConfigError(
                f"run {run_id} changed after this resume read it (another process recorded to "
                f"it meanwhile); nothing was run; see clearance inspect {run_id}, or resume it "
                "again",
            )
