"""Every listing command has a default limit and says how many more there are.

``clearance store query``, ``clearance memory`` and ``clearance runs`` showed a page of at
most ``--limit`` rows and said nothing of the rest: over a namespace of 100,000 entries the
table read "20 entries". Each now says how many are not shown (one COUNT, only when the
page is full).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from clearance import Agent, ContextStore, Orchestrator, RunLedger, Task, Team
from clearance.cli import app
from clearance.memory import PersistentMemory, count_memories
from clearance.testing import FakeModel

runner = CliRunner()


@pytest.fixture
def store_url(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with ContextStore(url) as store:
        for i in range(25):
            store.set("ns", f"k{i:02d}", f"v{i}", "a")
        store.set("other", "k00", "x", "a")
    return url


def test_store_query_says_how_many_more_entries_there_are(store_url):
    page = runner.invoke(app, ["store", "query", "ns", "--db", store_url])
    assert page.exit_code == 0, page.output
    assert "ns: 20 of 25 entries (5 more; raise --limit)" in page.output
    whole = runner.invoke(app, ["store", "query", "ns", "--limit", "25", "--db", store_url])
    assert "ns: 25 entries" in whole.output and "more" not in whole.output
    prefixed = runner.invoke(
        app, ["store", "query", "ns", "--prefix", "k1", "--limit", "4", "--db", store_url]
    )
    assert "ns: 4 of 10 entries (6 more; raise --limit)" in prefixed.output


def test_store_query_json_keeps_stdout_json_and_names_the_rest_on_stderr(store_url):
    page = runner.invoke(app, ["store", "query", "ns", "--limit", "3", "--json", "--db", store_url])
    assert page.exit_code == 0, page.stderr
    assert len(page.stdout.splitlines()) == 3
    assert page.stderr.strip() == "ns: 3 of 25 entries (22 more; raise --limit)"


def test_count_by_prefix_counts_live_entries_only(tmp_path):
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    with ContextStore(f"sqlite:///{tmp_path / 's.db'}", clock=lambda: now[0]) as store:
        store.set("ns", "a1", "v", "x")
        store.set("ns", "a2", "v", "x", ttl_s=10)
        store.set("ns", "a%", "v", "x")  # the prefix is literal: % matches only itself
        store.set("ns", "b1", "v", "x")
        assert store.count_by_prefix("ns") == 4
        assert store.count_by_prefix("ns", "a") == 3
        assert store.count_by_prefix("ns", "a%") == 1
        now[0] += timedelta(seconds=11)
        assert store.count_by_prefix("ns", "a") == 2
        assert store.count_by_prefix("nope") == 0


def test_memory_listing_says_how_many_more_records_there_are(tmp_path):
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    memory = PersistentMemory(url, agent="a")
    try:
        memory.record([f"fact {i}" for i in range(53)])
    finally:
        memory.close()
    assert count_memories(url) == 53
    page = runner.invoke(app, ["memory", "--memory", url])
    assert page.exit_code == 0, page.output
    assert "(50 newest records; 3 more, raise --limit)" in page.output
    whole = runner.invoke(app, ["memory", "--memory", url, "--limit", "53"])
    assert "(53 newest records)" in whole.output


async def test_runs_says_how_many_older_runs_are_not_shown(tmp_path):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    team = Team(agents=(Agent(name="w", instructions="Work."),))
    with RunLedger(db) as ledger:
        for _ in range(3):
            await Orchestrator(team, model=FakeModel("x"), ledger=ledger).run_tasks(
                [Task(id="a", title="A", description="d", assignee="w")]
            )
        assert ledger.run_count() == 3
    page = runner.invoke(app, ["runs", "--limit", "2", "--db", db])
    assert page.exit_code == 0, page.output
    assert "1 older runs not shown; raise --limit" in page.output
    whole = runner.invoke(app, ["runs", "--limit", "3", "--db", db])
    assert "not shown" not in whole.output
