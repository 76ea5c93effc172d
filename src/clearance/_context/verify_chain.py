"""Checking a run's hash chain against its records (part of `verify_run`).

The ledger chains every record it writes, one entry per transaction and run: the record's
own for one record, a group entry listing several (see `clearance._state.chain`). This module
re-derives, from the ledger alone:

1. **Links.** Entries are numbered 1, 2, ... without a gap, and each entry's chain value
   follows from the one before: SHA-256 for an unkeyed run, HMAC-SHA256 under the ledger key
   for a keyed one (checked only when the key is given). A group entry's records digest to
   its payload.
2. **Records.** Every row of the run (the run itself, tasks, task reasons, messages, model
   calls, tool calls, events) digests to its latest chained record (a call's prompt through
   its messages and manifest, recomputed); no row is missing from the chain, no chained
   record is missing a row, and rows are in the order they were chained.
3. **Tail**, given a head noted earlier: the chain still holds it. Without one, a chain cut
   short together with its records (the ledger rolled back) is a consistent chain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from clearance._core.vocabulary import RecordKind
from clearance._state.chain import (
    APPEND_KINDS,
    GROUP_KIND,
    SUBJECT_FIELDS,
    UPSERT_KINDS,
    chain_sha256,
    group_records,
    key_id,
    payload_sha256,
)
from clearance._state.ledger import ChainEntry, RunLedger, call_record_sha256
from clearance._state.ledger.audit import AuditRows, CallSink

__all__ = [
    "ChainReport",
    "ChainedRecord",
    "audit_at_one_moment",
    "chained_records",
    "record_positions",
    "check_chain",
    "check_chain_rows",
    "digested_call_row",
]

Problem = tuple[str, str | None, str]
"""``(subject, call id or None, reason)``: one finding."""


@dataclass(frozen=True, slots=True)
class ChainedRecord:
    """One record as the chain holds it.

    Attributes:
        position: Its place among the run's chained records, from 1 (write order).
        seq: The entry that chains it.
        kind: The record's kind (`clearance._state.chain.ENTRY_FIELDS`).
        subject: The record's id.
        payload_sha256: Its digest when it was written.
    """

    position: int
    seq: int
    kind: str
    subject: str
    payload_sha256: str


def chained_records(entries: list[ChainEntry]) -> tuple[list[ChainedRecord], list[Problem]]:
    """The records a run's chain entries hold, in chain order, and the entries that are bad.

    A group entry whose records do not digest to its payload or do not read as records
    (`clearance._state.chain.group_records`) contributes none and is reported; so is a
    group entry without records and an entry of one record that carries some.
    """
    records: list[ChainedRecord] = []
    problems: list[Problem] = []
    for entry in entries:
        if entry.kind != GROUP_KIND and entry.records is None:
            members = [(entry.kind, entry.subject, entry.payload_sha256)]
        else:
            try:
                if entry.kind != GROUP_KIND or entry.records is None:
                    raise ValueError("its kind and its records disagree")
                members = group_records(entry.subject, entry.payload_sha256, entry.records)
            except ValueError as exc:
                problems.append(("run", None, f"hash chain entry {entry.seq} was altered: {exc}"))
                continue
        for kind, subject, payload in members:
            records.append(ChainedRecord(len(records) + 1, entry.seq, kind, subject, payload))
    return records, problems


def record_positions(entries: list[ChainEntry]) -> dict[tuple[str, str], int]:
    """The chain entry (``seq``) that first chains each record, by ``(kind, id)``.

    Entries are in commit order; the records of one transaction share an entry (a group's
    records are listed by kind, not in the order they were written). A call is chained at
    its request and again at its outcome: its entry is the request's.
    """
    positions: dict[tuple[str, str], int] = {}
    for record in chained_records(entries)[0]:
        positions.setdefault((record.kind, record.subject), record.seq)
    return positions


@dataclass(frozen=True, kw_only=True, slots=True)
class ChainReport:
    """What the chain check found.

    Attributes:
        entries: How many records the run's chain holds (a group entry's each count).
        keyed: Whether the run was chained under a ledger key (``runs.chain_key_id`` set).
        macs_checked: Whether the chain's links were checked (always for an unkeyed run; for
            a keyed run only with its key).
        head: The last entry's chain value (``""`` for none): noting it elsewhere lets a
            later check detect the removal of the chain's tail.
        problems: ``(subject, call id or None, reason)`` per problem found.
        records: The records the chain holds, in chain order (`chained_records`).
        last_seq: The last entry's ``seq`` (0 for none): the head `RunLedger.chain_heads`
            gives while nothing is appended.
    """

    entries: int
    keyed: bool
    macs_checked: bool
    head: str
    problems: tuple[tuple[str, str | None, str], ...]
    records: tuple[ChainedRecord, ...] = ()
    last_seq: int = 0


_READ_TRIES = 5
"""Times `_read_at_one_moment` reads a run that its writer keeps changing."""


def _read_at_one_moment(
    ledger: RunLedger, run_id: str
) -> tuple[list[ChainEntry], dict[str, list[dict[str, Any]]]]:
    """A run's chain entries and records as they stood at one moment.

    They are two reads; a writer committing between them (a run still going, a resume that
    took the run) would make honest records look added or altered. Every transaction that
    writes a run's records appends to its chain, so the reads are taken again until the
    chain's head is the same after the records as it was before them (at most `_READ_TRIES`
    times; then the last reads are checked as they are).
    """
    for _ in range(_READ_TRIES):
        entries = ledger.chain_entries(run_id)
        rows = ledger.record_rows(run_id)
        head = entries[-1].seq if entries else None
        if ledger.chain_heads([run_id]).get(run_id) == head:
            break
    return entries, rows


def audit_at_one_moment(
    ledger: RunLedger,
    run_id: str,
    sink: CallSink,
    entries_read: Callable[[list[ChainEntry]], None] | None = None,
) -> tuple[list[ChainEntry], AuditRows]:
    """A run's chain entries and records (`RunLedger.audit_rows`) as they stood at one moment.

    As `_read_at_one_moment`: read again while a writer moves the chain's head (at most
    `_READ_TRIES` times); ``sink`` is given each read's records afresh, after
    ``entries_read`` (if given) was given that read's entries.
    """
    for _ in range(_READ_TRIES):
        entries = ledger.chain_entries(run_id)
        if entries_read is not None:
            entries_read(entries)
        read = ledger.audit_rows(run_id, sink)
        head = entries[-1].seq if entries else None
        if ledger.chain_heads([run_id]).get(run_id) == head:
            break
    return entries, read


def check_chain(
    ledger: RunLedger, run_id: str, key: bytes | None, noted_head: str | None = None
) -> ChainReport:
    """Check a run's chain and its records against each other.

    Args:
        ledger: The ledger holding the run.
        run_id: The run's full id.
        key: The ledger key to check a keyed chain's links with; ``None`` checks an unkeyed
            chain's links only.
        noted_head: A head of the chain noted earlier (`ChainReport.head`): the chain must
            still hold it as one of its entries' chain values, so a chain cut short before
            it (its last entries and their records removed together, or the ledger rolled
            back) is a finding; entries appended since (a resumed run) are not.

    Raises:
        StoreError: The ledger cannot be read.
    """
    entries, rows = _read_at_one_moment(ledger, run_id)
    rows = {**rows, "call": [digested_call_row(row) for row in rows.get("call", [])]}
    return check_chain_rows(entries, rows, run_id, key, noted_head)


def check_chain_rows(
    entries: list[ChainEntry],
    rows: dict[str, list[dict[str, Any]]],
    run_id: str,
    key: bytes | None,
    noted_head: str | None = None,
) -> ChainReport:
    """`check_chain` of entries and rows already read at one moment.

    Args:
        entries: The run's chain entries (`RunLedger.chain_entries`).
        rows: The run's rows by kind (`RunLedger.record_rows`), each call's as
            `digested_call_row` makes it.
        run_id: The run's full id.
        key: As `check_chain`'s.
        noted_head: As `check_chain`'s.
    """
    run_rows = rows.get("run") or [{}]
    recorded_key = run_rows[0].get("chain_key_id")
    problems: list[Problem] = []
    if noted_head is not None and all(e.chain_sha256 != noted_head.lower() for e in entries):
        problems.append(
            ("run", None, f"the hash chain does not hold the head noted earlier "
             f"({noted_head[:16]}...): records were removed from its end, or the ledger was "
             "rolled back")
        )  # fmt: skip
    if not entries:
        problems.append(
            (
                "run",
                None,
                "the run has no hash chain, so removed or added records cannot be ruled out",
            )
        )
        return ChainReport(
            entries=0, keyed=recorded_key is not None, macs_checked=False, head="",
            problems=tuple(problems),
        )  # fmt: skip
    mac_key: bytes | None = None
    check_links = True
    if recorded_key is None:
        if key is not None:
            problems.append(
                ("run", None, "the run's chain is not keyed, so the ledger key proves nothing "
                 "about it (a forger can recompute an unkeyed chain)")
            )  # fmt: skip
    elif key is None:
        check_links = False
    elif key_id(key) != recorded_key:
        problems.append(
            ("run", None, f"the run was chained with another ledger key ({recorded_key})")
        )
        check_links = False
    else:
        mac_key = key
    problems.extend(_check_links(entries, run_id, mac_key if check_links else None, check_links))
    records, bad_entries = chained_records(entries)
    problems.extend(bad_entries)
    for kind in ("run", "task", "task_reason", "message", "call", "tool_call", "event"):
        kind_rows = rows.get(kind, [])
        chained = [r for r in records if r.kind == kind]
        if kind in UPSERT_KINDS:
            problems.extend(_check_upserts(kind, kind_rows, chained))
        else:
            assert kind in APPEND_KINDS
            problems.extend(_check_appends(kind, kind_rows, chained))
    return ChainReport(
        entries=len(records),
        keyed=recorded_key is not None,
        macs_checked=check_links,
        head=entries[-1].chain_sha256,
        problems=tuple(problems),
        records=tuple(records),
        last_seq=entries[-1].seq,
    )


def _with_recomputed_digest(row: dict[str, Any]) -> dict[str, Any]:
    """A call row whose ``record_sha256`` is recomputed from its messages and manifest."""
    try:
        digest = call_record_sha256(row["messages"], row["manifest"])
    except (TypeError, ValueError):
        digest = None
    return {**row, "record_sha256": digest}


def digested_call_row(row: dict[str, Any]) -> dict[str, Any]:
    """A call row as the chain check reads it: its digest recomputed, its prompt left out.

    ``record_sha256`` is recomputed from the row's messages and manifest, which are then
    dropped (that digest covers them; nothing else of the check reads them), so a run's
    checked rows never hold its prompts.
    """
    digested = _with_recomputed_digest(row)
    del digested["messages"], digested["manifest"]
    return digested


def _check_links(
    entries: list[ChainEntry], run_id: str, key: bytes | None, check: bool
) -> Iterator[Problem]:
    previous = ""
    for position, entry in enumerate(entries, 1):
        if entry.seq != position:
            yield (
                "run",
                None,
                f"the hash chain jumps from entry {position - 1} to {entry.seq}: entries were "
                "removed or reordered",
            )
            return
        if check:
            expected = chain_sha256(
                previous, run_id, entry.seq, entry.kind, entry.subject, entry.payload_sha256, key
            )
            if expected != entry.chain_sha256:
                yield (
                    "run",
                    None,
                    f"hash chain entry {entry.seq} ({entry.kind} {entry.subject}) does not follow "
                    "from the entries before it: the chain was altered",
                )
                return
        previous = entry.chain_sha256


def _label(kind: str, row: dict[str, Any] | None, subject: str) -> tuple[str, str | None]:
    """The finding's subject and call id for a record."""
    if kind == RecordKind.CALL:
        return (str(row["subject"]) if row is not None else "call"), subject
    if kind == RecordKind.RUN:
        return "run", None
    return f"{kind.replace('_', ' ')} {subject}", None


def _check_upserts(
    kind: str, rows: list[dict[str, Any]], chained: list[ChainedRecord]
) -> Iterator[Problem]:
    """Each row matches its subject's latest entry; rows are in the order first chained."""
    latest: dict[str, ChainedRecord] = {}
    for entry in chained:
        latest[entry.subject] = entry  # a dict keeps the first position of each subject
    seen: list[str] = []
    for row in rows:
        subject = str(row[SUBJECT_FIELDS[kind]])
        where, call_id = _label(kind, row, subject)
        if subject not in latest:
            yield where, call_id, "the record is not in the run's hash chain: it was added"
            continue
        seen.append(subject)
        if payload_sha256(kind, row) != latest[subject].payload_sha256:
            yield where, call_id, "the record differs from its entry in the hash chain: altered"
    present = set(seen)
    for subject in latest:
        if subject not in present:
            where, call_id = _label(kind, None, subject)
            yield where, call_id, f"the hash chain holds {kind} {subject}, whose record was removed"
    if seen != [s for s in latest if s in present]:
        yield f"{kind} records", None, "the records are not in the order the hash chain holds them"


def _check_appends(
    kind: str, rows: list[dict[str, Any]], chained: list[ChainedRecord]
) -> Iterator[Problem]:
    """Rows and entries correspond one to one, in order."""
    for row, entry in zip(rows, chained, strict=False):
        subject = str(row[SUBJECT_FIELDS[kind]])
        if subject != entry.subject or payload_sha256(kind, row) != entry.payload_sha256:
            where, _ = _label(kind, row, subject)
            yield where, None, "the record differs from its entry in the hash chain, or moved"
            return
    if len(rows) > len(chained):
        yield f"{kind} records", None, f"{len(rows) - len(chained)} record(s) not in the hash chain"
    elif len(rows) < len(chained):
        yield f"{kind} records", None, f"{len(chained) - len(rows)} chained record(s) were removed"
