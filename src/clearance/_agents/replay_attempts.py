"""Which of a resumed run's records belong to the current attempt of their subject.

A task run again by a later session, or a child spawned again under its id, may have failed
before; a resume replays only the steps recorded after its last failure
(module `clearance._agents.replay`), by the hash chain's order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from clearance._context.verify_chain import chained_records
from clearance._core.origins import Subject
from clearance._core.vocabulary import EventKind, PromptKind, RecordKind
from clearance._state.ledger import EventRecord, RunLedger
from clearance._state.queue import TaskStatus

__all__ = ["after_failures"]

_FAILED = (TaskStatus.FAILED, TaskStatus.SKIPPED)
"""The statuses of a task reason that end an attempt (``interrupted`` does not)."""


def after_failures(
    ledger: RunLedger, run_id: str, events: Sequence[EventRecord]
) -> Callable[[str, str, str], bool]:
    """Whether a record of a subject comes after the last failed attempt it belongs to.

    A task run again by a later session, or a child spawned again under its id, may have
    failed before: only its records after its last failure (a task's ``failed`` or
    ``skipped`` reason, a child's outcome that is not ``ok``) are its current attempt, and a
    step of a failed attempt is never replayed. A task's failure cuts its own calls, its
    isolated dispatches' and its reviewers'. The order is the hash chain's (the entry that
    first chains each record), never a clock; a record the chain does not place is left
    out. Returns ``(subject, record kind, record id) -> keep``.
    """
    failed: dict[str, tuple[str, str, int]] = {}  # subject: (kind, record id, occurrence)
    for event in events:
        if event.kind == EventKind.CHILD and event.data.get("status") != "ok":
            subject = f"{PromptKind.CHILD}:{event.data.get('child_id')}"
            failed[subject] = (RecordKind.EVENT, event.event_id, 0)
    for task_id, statuses in ledger.task_reason_statuses(run_id).items():
        last = max((i for i, s in enumerate(statuses) if s in _FAILED), default=None)
        if last is not None:
            failed[f"{PromptKind.TASK}:{task_id}"] = (RecordKind.TASK_REASON, task_id, last)
    if not failed:
        return lambda subject, kind, record_id: True
    places: dict[tuple[str, str], list[int]] = {}  # every entry of each record, in order
    for record in chained_records(ledger.chain_entries(run_id))[0]:
        places.setdefault((record.kind, record.subject), []).append(record.seq)
    cuts: dict[str, int | None] = {}
    for subject, (kind, record_id, occurrence) in failed.items():
        seqs = places.get((kind, record_id), [])
        cuts[subject] = seqs[occurrence] if occurrence < len(seqs) else None

    def after(subject: str, kind: str, record_id: str) -> bool:
        of = Subject.parse(subject)
        if of.kind in (PromptKind.ISOLATED, PromptKind.REVIEW):
            subject = f"{PromptKind.TASK}:{(of.id or '').partition('/')[0]}"
        if subject not in cuts:
            return True
        cut, seqs = cuts[subject], places.get((kind, record_id))
        return cut is not None and seqs is not None and seqs[0] > cut

    return after
