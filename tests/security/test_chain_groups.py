"""Group entries: one hash-chain entry per transaction, listing the records it wrote.

A run's chain holds every record as before, but a transaction that writes several records of
a run appends one group entry for them. These tests check that a run chains that way, that
its group entries verify, that every edit of a group's list is caught (with and without
recomputing its digests), and that chains of the earlier form (one entry per record), alone
or continued by the new code, still verify.
"""

import asyncio
import hashlib
import json
import sqlite3
from datetime import UTC, datetime

import pytest

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._context.verify import verify_run
from clearance._state.chain import GROUP_KIND, LEDGER_KEY_ENV, chain_sha256, group_records
from clearance._state.messages import BROADCAST, Message
from clearance.testing import FunctionModel

TEAM = Team(agents=(Agent(name="alice", instructions="Alice."),))


@pytest.fixture
def recorded(tmp_path, monkeypatch) -> tuple:
    monkeypatch.delenv(LEDGER_KEY_ENV, raising=False)
    db = tmp_path / "runs.db"
    tasks = [
        Task(id=f"t{i}", title=f"T{i}", description=f"Do {i}.", assignee="alice") for i in range(4)
    ] + [Task(id="last", title="Last", description="Join.", assignee="alice", depends_on=["t0"])]
    model = FunctionModel(lambda r: f"RESULT of {r.prompt.manifest.subject}")

    async def run():
        with RunLedger(f"sqlite:///{db}") as ledger:
            orch = Orchestrator(TEAM, model=model, ledger=ledger)
            return await orch.run_tasks(tasks, goal="The goal")

    return db, asyncio.run(run()).run_id


def verify(db, run_id):
    with RunLedger(f"sqlite:///{db}") as ledger:
        return verify_run(ledger, run_id)


def entries(db, run_id) -> list[tuple]:
    conn = sqlite3.connect(db)
    found = conn.execute(
        "SELECT seq, kind, subject, payload_sha256, chain_sha256, records FROM ledger_entries "
        "WHERE run_id = ? ORDER BY seq",
        (run_id,),
    ).fetchall()
    conn.close()
    return found


def set_entry(db, run_id, seq, **values) -> None:
    conn = sqlite3.connect(db)
    for column, value in values.items():
        conn.execute(
            f"UPDATE ledger_entries SET {column} = ? WHERE run_id = ? AND seq = ?",
            (value, run_id, seq),
        )
    conn.commit()
    conn.close()


def relink(db, run_id) -> None:
    """Recompute every link of an unkeyed chain, as a forger without a key can."""
    previous = ""
    for seq, kind, subject, payload, _, _ in entries(db, run_id):
        previous = chain_sha256(previous, run_id, seq, kind, subject, payload, None)
        set_entry(db, run_id, seq, chain_sha256=previous)


def regroup(db, run_id, seq, members) -> None:
    """Give group entry ``seq`` the list ``members``, its digest and count recomputed."""
    text = json.dumps(members, separators=(",", ":"), ensure_ascii=False)
    payload = hashlib.sha256(text.encode()).hexdigest()
    set_entry(db, run_id, seq, records=text, payload_sha256=payload, subject=str(len(members)))


def a_group(db, run_id) -> tuple:
    """The group entry with the most records, and those records."""
    groups = [e for e in entries(db, run_id) if e[1] == GROUP_KIND]
    seq, _, subject, payload, _, text = max(groups, key=lambda e: int(e[2]))
    return seq, group_records(subject, payload, text)


def a_latest_record(db, run_id) -> tuple:
    """A group entry, its records, and the index of one that no later entry supersedes."""
    chain = entries(db, run_id)
    for position, (seq, kind, subject, payload, _, text) in enumerate(chain):
        if kind != GROUP_KIND:
            continue
        later = set()
        for _, k, s, _, _, t in chain[position + 1 :]:
            later |= {(m[0], m[1]) for m in json.loads(t)} if t else {(k, s)}
        members = group_records(subject, payload, text)
        for index, (k, s, _) in enumerate(members):
            if (k, s) not in later:
                return seq, members, index
    raise AssertionError("no group holds a record's latest state")


def reasons(db, run_id) -> list[str]:
    return [f.reason for f in verify(db, run_id).findings]


def test_a_transaction_of_several_records_is_one_group_entry_and_the_run_verifies(recorded):
    db, run_id = recorded
    chain = entries(db, run_id)
    groups = [e for e in chain if e[1] == GROUP_KIND]
    assert groups, "the graph's tasks are recorded together: at least one group"
    records = sum(int(e[2]) for e in groups) + len(chain) - len(groups)
    assert records > len(chain)
    for _, _, subject, payload, _, text in groups:
        assert len(group_records(subject, payload, text)) == int(subject) >= 2
    for e in chain:
        assert (e[5] is None) == (e[1] != GROUP_KIND)
    report = verify(db, run_id)
    assert report.ok, [str(f) for f in report.findings]
    assert report.entries_checked == records  # every record counted, not every entry


def test_a_record_dropped_from_a_group_is_caught(recorded):
    db, run_id = recorded
    seq, members = a_group(db, run_id)
    text = json.dumps([list(m) for m in members[1:]], separators=(",", ":"))
    set_entry(db, run_id, seq, records=text)
    assert any(f"entry {seq} was altered" in r for r in reasons(db, run_id))


def test_a_dropped_record_with_the_digest_recomputed_breaks_the_links(recorded):
    db, run_id = recorded
    seq, members = a_group(db, run_id)
    regroup(db, run_id, seq, [list(m) for m in members[1:]])
    assert any("does not follow" in r for r in reasons(db, run_id))


def test_a_dropped_record_with_the_whole_chain_recomputed_leaves_its_row_unchained(recorded):
    db, run_id = recorded
    seq, members, dropped = a_latest_record(db, run_id)
    kept = [list(m) for i, m in enumerate(members) if i != dropped]
    regroup(db, run_id, seq, kept)
    relink(db, run_id)
    found = reasons(db, run_id)
    assert any("added" in r or "differs from its entry" in r for r in found), found


def test_records_swapped_in_a_group_with_the_chain_recomputed_are_out_of_order(recorded):
    db, run_id = recorded
    # The run's first group: each of its records is its subject's first, so swapping two of
    # one kind changes the order records are chained in. (Swapping two later states of
    # records chained before leaves each record's first place and latest state as they were.)
    seq, _, subject, payload, _, text = next(e for e in entries(db, run_id) if e[1] == GROUP_KIND)
    members = group_records(subject, payload, text)
    by_kind: dict[str, list[int]] = {}
    for i, (kind, _, _) in enumerate(members):
        by_kind.setdefault(kind, []).append(i)
    first, second = next(ix for ix in by_kind.values() if len(ix) >= 2)[:2]
    swapped = [list(m) for m in members]
    swapped[first], swapped[second] = swapped[second], swapped[first]
    regroup(db, run_id, seq, swapped)
    relink(db, run_id)
    found = reasons(db, run_id)
    assert any("order" in r or "moved" in r for r in found), found


def test_a_digest_edited_in_a_group_with_the_chain_recomputed_is_caught(recorded):
    db, run_id = recorded
    seq, members, index = a_latest_record(db, run_id)
    edited = [list(m) for m in members]
    edited[index][2] = "0" * 64
    regroup(db, run_id, seq, edited)
    relink(db, run_id)
    assert any("differs from its entry" in r for r in reasons(db, run_id))


@pytest.mark.parametrize(
    "records",
    ["not json", "{}", '[["task","a"]]', '[["nokind","a","b"],["task","b","c"]]', "[1,2]"],
)
def test_a_group_whose_records_are_not_records_is_caught(recorded, records):
    db, run_id = recorded
    seq, _ = a_group(db, run_id)
    payload = hashlib.sha256(records.encode()).hexdigest()
    set_entry(db, run_id, seq, records=records, payload_sha256=payload)
    relink(db, run_id)
    assert any(f"entry {seq} was altered" in r for r in reasons(db, run_id))


def test_an_entry_of_one_record_given_records_is_caught(recorded):
    db, run_id = recorded
    single = next(e for e in entries(db, run_id) if e[1] != GROUP_KIND)
    set_entry(db, run_id, single[0], records="[]")
    assert any(f"entry {single[0]} was altered" in r for r in reasons(db, run_id))


def test_a_chain_of_the_earlier_form_verifies_alone_and_continued(recorded, rechain):
    db, run_id = recorded
    rechain(db, run_id)  # one entry per record, as ledgers written before version 10 hold
    assert all(e[1] != GROUP_KIND and e[5] is None for e in entries(db, run_id))
    assert verify(db, run_id).ok
    sent = datetime.now(UTC)
    notes = [
        Message(
            id=f"msg-{n}", sender="alice", recipient=BROADCAST, content=f"note {n}", created_at=sent
        )
        for n in range(1, 4)
    ]
    with RunLedger(f"sqlite:///{db}") as ledger:
        ledger.record_messages(run_id, notes)  # one transaction: one group entry after the old
    chain = entries(db, run_id)
    assert chain[-1][1] == GROUP_KIND and chain[-1][2] == "3"
    report = verify(db, run_id)
    assert report.ok, [str(f) for f in report.findings]


def test_group_entries_on_postgresql_verify(postgres_url, monkeypatch):
    monkeypatch.delenv(LEDGER_KEY_ENV, raising=False)
    tasks = [
        Task(id=f"p{i}", title=f"P{i}", description=f"Do {i}.", assignee="alice") for i in range(3)
    ]
    model = FunctionModel(lambda r: f"RESULT of {r.prompt.manifest.subject}")

    async def run():
        with RunLedger(postgres_url) as ledger:
            orch = Orchestrator(TEAM, model=model, ledger=ledger)
            return await orch.run_tasks(tasks, goal="The goal")

    run_id = asyncio.run(run()).run_id
    with RunLedger(postgres_url) as ledger:
        chain = ledger.chain_entries(run_id)
        report = verify_run(ledger, run_id)
    groups = [e for e in chain if e.kind == GROUP_KIND]
    assert groups and all(e.records is not None for e in groups)
    assert report.ok, [str(f) for f in report.findings]
    assert report.entries_checked > len(chain)
