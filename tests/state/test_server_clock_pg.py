"""Leases and store expiries are read on the database's clock, not on each host's.

Several hosts share one PostgreSQL ledger and store: a lease one host writes is judged by
another, and so is an entry's expiry. Each test here runs "hosts" whose clocks are wrong
by moving the clock this process reads (every ``utc_now`` Clearance's modules imported)
while the PostgreSQL server keeps the true time.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import create_engine, text

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._core import clock
from clearance._core.errors import ConfigError, StoreError
from clearance._state.store import ContextStore
from clearance.testing import FunctionModel

REAL = clock.utc_now


@contextmanager
def host_clock(off_by_s: float) -> Iterator[None]:
    """This process's clock (`clearance._core.clock.utc_now`) reads ``off_by_s`` seconds from
    the true time, inside the block."""
    offset = timedelta(seconds=off_by_s)

    class Skewed(datetime):
        @classmethod
        def now(cls, tz=None):  # type: ignore[no-untyped-def,override]
            return datetime.now(tz) + offset

    real = clock.datetime
    clock.datetime = Skewed  # type: ignore[misc]
    try:
        yield
    finally:
        clock.datetime = real  # type: ignore[misc]


def server_now(url: str) -> datetime:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            value = conn.execute(text("SELECT clock_timestamp()")).scalar()
    finally:
        engine.dispose()
    assert isinstance(value, datetime)
    return value.astimezone(UTC)


def owner_of(url: str, run_id: str) -> str:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            owner = conn.execute(
                text("SELECT owner FROM runs WHERE run_id = :r"), {"r": run_id}
            ).scalar()
    finally:
        engine.dispose()
    return str(owner)


@pytest.fixture
def url(postgres_url: str) -> str:
    return postgres_url


def started_run(ledger: RunLedger, run_id: str) -> None:
    ledger.start_run(run_id=run_id, team="skew", goal=None, graph=None)
    ledger.flush()


@pytest.mark.parametrize("off_by_s", [-90, 90, -3600])
def test_a_live_lease_is_live_to_every_host_whatever_their_clocks(url, off_by_s) -> None:
    # The holder's clock is wrong (behind: it writes leases that lapsed already, by its
    # own clock; ahead: fine) and the other host's is right; then the other way round.
    for holder_off, taker_off in ((off_by_s, 0), (0, off_by_s)):
        run_id = f"run_skew_{abs(off_by_s)}_{holder_off}_{taker_off}".replace("-", "m")
        with host_clock(holder_off):
            holder = RunLedger(url)
            started_run(holder, run_id)
        try:
            row_lease = holder.get_run(run_id).lease_expires_at
            assert row_lease is not None
            # Written on the server's clock: LEASE_S (30 s) from the server's now.
            ahead = (row_lease - server_now(url)).total_seconds()
            assert 25 < ahead <= 30, ahead
            with host_clock(taker_off), RunLedger(url) as taker:
                with pytest.raises(ConfigError, match=r"is being run by .*--force"):
                    taker.reopen_run(run_id)
                assert owner_of(url, run_id) == holder._leases.owner
        finally:
            holder.close()


def test_a_lease_renewed_after_the_hosts_clock_stepped_back_is_still_live(url) -> None:
    holder = RunLedger(url)
    try:
        started_run(holder, "run_stepped_back")
        with host_clock(-90):  # an NTP step after the ledger was opened
            holder._leases.renew_once()
        with RunLedger(url) as taker, pytest.raises(ConfigError, match="is being run by"):
            taker.reopen_run("run_stepped_back")
    finally:
        holder.close()


TEAM = Team(
    agents=(Agent(name="v", instructions="You work."),),
    coordinator=Agent(name="lead", instructions="You lead."),
    name="skew",
)


async def test_resume_judges_another_hosts_lease_on_the_servers_clock(url) -> None:
    model = FunctionModel(lambda r: "done")
    tasks = [Task(id="a", title="A", description="do a", assignee="v")]
    with RunLedger(url) as ledger:
        first = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks(tasks)
        run_id = first.run_id
        assert run_id is not None
        ledger.reopen_run(run_id, process={"host": "elsewhere.example", "pid": 4242})
    engine = create_engine(url)
    try:
        with engine.begin() as conn:  # now run by a host elsewhere, whose lease is live
            conn.execute(
                text(
                    "UPDATE runs SET owner = 'elsewhere.example:4242:1.abcd', "
                    "lease_expires_at = clock_timestamp() + interval '60 s' WHERE run_id = :r"
                ),
                {"r": run_id},
            )
    finally:
        engine.dispose()
    with host_clock(90), RunLedger(url) as ledger:  # this host's clock is 90 s ahead
        with pytest.raises(ConfigError, match=r"on host 'elsewhere.example'.*--force"):
            await Orchestrator(TEAM, model=model, ledger=ledger).resume(run_id)
        assert owner_of(url, run_id) == "elsewhere.example:4242:1.abcd"


def test_a_store_entry_expires_on_the_servers_clock(url) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS store_entries"))
        conn.execute(text("DROP TABLE IF EXISTS store_schema_version"))
    engine.dispose()
    with host_clock(-3600), ContextStore(url) as writer:  # an hour behind
        writer.set("ns", "k", "v", agent="a", ttl_s=600)
    with ContextStore(url) as reader:
        entry = reader.get_entry("ns", "k")
        assert entry is not None and entry.value == "v"
        assert entry.expires_at is not None
        left = (entry.expires_at - server_now(url)).total_seconds()
        assert 590 < left <= 600, left
    with host_clock(3600), ContextStore(url) as late:  # an hour ahead: still live
        assert late.get("ns", "k") is not None


def test_a_clock_a_year_off_the_servers_is_refused_in_one_line(url) -> None:
    with host_clock(400 * 86400), pytest.raises(StoreError) as caught:
        RunLedger(url)
    message = str(caught.value)
    assert "\n" not in message
    assert "says the time is" in message and "set one of the two clocks right" in message


def test_on_sqlite_the_database_clock_is_the_hosts(tmp_path) -> None:
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        assert ledger.server_time is REAL  # no offset, no query: one file on one host
