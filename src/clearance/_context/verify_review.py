"""Verify review loops: each round's prompts and verdicts, from the recorded calls.

For a reviewer's call (subject ``review:<task>/<round>/<stage>``) the clearance is derived
again (`Clearance.for_review`: the task's text and the candidate, nothing else) and must
equal the recorded one; the reviewer must be the task's ``review.by[stage - 1]``; the task
text must be the recorded task's; the candidate must be the one the round's recorded
``review_round`` event names, which must be the response of a successful call of the
task. The event's verdict and findings must be what the reviewer's recorded answer says.
In an implementer's prompt, each ``review:<task>/<round>`` item must hold exactly the
findings of the reviewer who sent that round's candidate back. A reviewed task recorded
``completed`` must have as its result a candidate that every stage of one round was recorded
accepting (`check_review_accepted`). Every ``review_round`` event is recorded under its
reviewer's subject and is the answer of a call of that subject by its reviewer on its
candidate: each such call answers one round, and one more for each time a resumed run
replayed it (`check_review_rounds`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from clearance._context.clearance import Clearance
from clearance._context.layout import task_label
from clearance._context.prompts_review import review_subject
from clearance._context.render import one_line
from clearance._context.verify_facts import Problem, RunFacts
from clearance._core.json_answer import read_json_answer
from clearance._core.origins import Origin, Subject
from clearance._core.prompt import sha256_text
from clearance._core.review import REVIEW_SCHEMA
from clearance._core.task_spec import schema_validator
from clearance._core.vocabulary import EventKind, OriginKind, PromptKind, RecordKind
from clearance._state.ledger import CallRecord

__all__ = [
    "check_findings_item",
    "check_review_accepted",
    "check_review_call",
    "check_review_rounds",
]


def _rounds(facts: RunFacts) -> dict[tuple[str, int, int], list[dict[str, Any]]]:
    """The recorded ``review_round`` events by ``(task, round, stage)``, in recorded order.

    A round has more than one event when its task ran again in a resumed session.
    """
    return facts.review_rounds


def _event_of(
    call: CallRecord, review: Any, events: list[dict[str, Any]], facts: RunFacts
) -> dict[str, Any] | None:
    """The round event recorded for ``call``.

    The round's events go to its subject's answered calls in recorded order, each call taking
    the first event not taken yet that holds its candidate and its verdict (a resumed
    session's round has its own event; a replayed call's event repeats its original's). A
    call no event fits gets the first with its candidate (not taken yet, if any), else the
    last: the checks then name what differs.
    """
    taken: set[int] = set()
    for other in facts.calls_of(call.subject):
        shown = _candidates(other.manifest.get("items", []))
        verdict = _verdict(other, review) if other.error is None and not other.pending else None
        index = next((n for n, e in enumerate(events) if n not in taken
                      and e.get("candidate_sha256") in shown
                      and verdict == (e.get("accepted"), e.get("findings"))), None)  # fmt: skip
        if other.call_id == call.call_id:
            if index is not None:
                return events[index]
            same = [n for n, e in enumerate(events) if e.get("candidate_sha256") in shown]
            free = [n for n in same if n not in taken]
            return events[(free or same or [len(events) - 1])[0]] if events else None
        if index is not None:
            taken.add(index)
    return events[-1] if events else None


def _candidates(items: list[dict[str, Any]]) -> set[Any]:
    """The digests of a prompt's candidate items."""
    return {i.get("sha256") for i in items
            if Origin.parse(str(i.get("origin"))).kind == OriginKind.CANDIDATE}  # fmt: skip


def _verdict(call: CallRecord, review: Any) -> tuple[bool, str] | None:
    """``(accepted, findings)`` of a reviewer's recorded answer, or ``None``: no review.

    The answer is read as the review loop read it (`read_json_answer`: a fenced block
    too, no key twice) and must match `REVIEW_SCHEMA`; the loop records no round for an
    answer that does not.
    """
    try:
        value = read_json_answer((call.response or "").strip())
        if not schema_validator(REVIEW_SCHEMA).is_valid(value):
            return None
        accepted, findings = review.verdict(json.dumps(value))
    except (ValueError, RecursionError, AttributeError):
        return None
    return accepted, findings


def check_review_call(
    call: CallRecord, items: list[dict[str, Any]], facts: RunFacts
) -> Iterator[Problem]:
    """A reviewer's prompt and answer (see the module docstring)."""
    task_id, _, rest = Subject.parse(call.subject).id.partition("/")
    round_text, _, stage_text = rest.partition("/")
    graph = facts.graph
    task = graph.get(task_id) if graph is not None and task_id in graph else None
    if task is None or task.review is None or not (round_text + stage_text).isdigit():
        yield None, f"no review loop of a recorded task is {call.subject!r}"
        return
    round_no, stage = int(round_text), int(stage_text)
    review = task.review
    if not (1 <= round_no <= review.rounds and 1 <= stage <= len(review.by)):
        yield None, f"round {round_no} or stage {stage} is outside the task's review loop"
        return
    if call.agent != review.by[stage - 1]:
        yield None, f"stage {stage} is reviewed by {review.by[stage - 1]!r}, not {call.agent!r}"
    clearance = Clearance.for_review(task_id, call.agent, rounds=review.rounds)
    if call.manifest.get("clearance") != clearance.to_dict():
        yield None, "the recorded clearance differs from a reviewer's"
    event = _event_of(call, review, _rounds(facts).get((task_id, round_no, stage), []), facts)
    # A failed call, or an answer that is no review, ended its task there (or was retried):
    # no round was recorded for it.
    refused = call.error is not None or (not call.pending and _verdict(call, review) is None)
    for item in items[1:]:
        origin = str(item.get("origin"))
        kind = Origin.parse(origin).kind
        if not clearance.admits(origin):
            yield origin, "a reviewer sees only the task's text and the round's candidate"
        elif kind == OriginKind.TASK and (
            item.get("sha256") != sha256_text(task.description)
            or item.get("title") != task_label(task.title)
        ):
            yield origin, "the task text is not the recorded task's"
        elif kind == OriginKind.CANDIDATE and origin != f"candidate:{task_id}/{round_no}":
            yield origin, "the candidate is not the round's"
        elif kind == OriginKind.CANDIDATE and one_line(str(item.get("title"))) != one_line(
            heading := f"Round {round_no}"
        ):
            yield origin, f"the candidate's heading is not {heading!r}"
        elif (
            kind == OriginKind.CANDIDATE
            and not refused
            and (event is None or item.get("sha256") != event.get("candidate_sha256"))
        ):
            yield origin, "the candidate is not the one the round recorded"
        elif kind == OriginKind.CANDIDATE and item.get("sha256") not in _answers(facts, task_id):
            yield origin, "the candidate is no recorded answer of the task"
    if call.error is None and not call.pending and not refused:
        yield from _check_verdict(call, review, event)


def _answers(facts: RunFacts, task_id: str) -> set[str]:
    subject = str(Subject.task(task_id))
    return {
        sha256_text((c.response or "").strip())
        for c in facts.calls_of(subject)
        if c.error is None and c.response is not None
    } | {
        sha256_text(c.response or "")
        for c in facts.calls_of(subject)
        if c.error is None and c.response is not None
    }


def _check_verdict(
    call: CallRecord, review: Any, event: dict[str, Any] | None
) -> Iterator[Problem]:
    """The round's recorded verdict is what the reviewer answered."""
    if event is None:
        yield None, "the reviewer's answer has no recorded round"
        return
    verdict = _verdict(call, review)
    if verdict is None:
        yield None, "the reviewer's recorded answer is not a review"
        return
    if verdict != (event.get("accepted"), event.get("findings")):
        yield None, "the round's recorded verdict is not the reviewer's answer"


def check_findings_item(
    task_id: str, origin: str, item: dict[str, Any], facts: RunFacts
) -> Iterator[Problem]:
    """A ``review:<task>/<round>`` item holds the findings that sent that round back."""
    round_text = Origin.parse(origin).id.rpartition("/")[2]
    sent_back = [
        data
        for (task, round_no, _), events in _rounds(facts).items()
        if task == task_id and str(round_no) == round_text
        for data in events
        if data.get("accepted") is False
    ]
    if not sent_back:
        yield origin, "no recorded reviewer sent that round back"
        return
    # One session sends a round back once; a resumed task's rounds ran again: any of them.
    label = f"Round {round_text}: "
    if not any(item.get("sha256") == sha256_text(str(d.get("findings"))) for d in sent_back):
        yield origin, "the findings are not the reviewer's recorded findings"
    elif not any(
        item.get("title") == label + str(d.get("reviewer"))
        and item.get("sha256") == sha256_text(str(d.get("findings")))
        for d in sent_back
    ):
        yield origin, "the findings' label does not name the round and its reviewer"


def check_review_accepted(facts: RunFacts) -> Iterator[tuple[str, str | None, str]]:
    """Every completed reviewed task's result is a candidate all its reviewers accepted.

    Yields:
        ``(subject, None, reason)`` for each completed task of the recorded graph with a
        review loop whose result no round's recorded verdicts accept at every stage.
    """
    graph = facts.graph
    if graph is None:
        return
    rounds = _rounds(facts)
    for task in graph:
        result = facts.completed.get(task.id)
        if task.review is None or result is None:
            continue
        digest = sha256_text(result)
        stages = range(1, len(task.review.by) + 1)
        if not any(
            all(_accepted(rounds.get((task.id, round_no, stage), ()), digest) for stage in stages)
            for round_no in range(1, task.review.rounds + 1)
        ):
            yield (
                str(Subject.task(task.id)), None,
                "the task is recorded completed, but no round's reviewers all accepted its result",
            )  # fmt: skip


def _accepted(events: Iterable[dict[str, Any]], digest: str) -> bool:
    """Whether one of a stage's recorded verdicts accepted the candidate ``digest``."""
    return any(e.get("accepted") is True and e.get("candidate_sha256") == digest for e in events)


def check_review_rounds(facts: RunFacts) -> Iterator[tuple[str, str | None, str]]:
    """Every ``review_round`` event has a reviewer's answered call behind it.

    A round is ``(subject, reviewer, candidate digest, verdict)``; a call of a reviewer's
    subject that answered with a review gives its round once, and once more for each
    ``replayed`` event naming it (a resumed run's loop records the round again).

    Yields:
        ``(event subject, None, reason)`` for a round recorded under another subject than
        its reviewer's, and for each round no answered call of its reviewer gives.
    """
    graph = facts.graph
    replays = Counter(
        str(e.data.get("original"))
        for e in facts.events
        if e.kind == EventKind.REPLAYED and e.data.get("record") == RecordKind.CALL
    )
    given: Counter[tuple[Any, ...]] = Counter()
    for call in facts.calls:
        subject = Subject.parse(call.subject)
        if subject.kind != PromptKind.REVIEW or subject.ref is None or graph is None:
            continue
        task_id = subject.ref.partition("/")[0]
        review = graph.get(task_id).review if task_id in graph else None
        if review is None or call.error is not None or call.pending:
            continue
        verdict = _verdict(call, review)
        if verdict is None:
            continue
        for digest in _candidates(call.manifest.get("items", [])):
            given[(call.subject, call.agent, digest, verdict)] += 1 + replays[call.call_id]
    for e in facts.events:
        if e.kind != EventKind.REVIEW_ROUND:
            continue
        data = e.data
        expected = review_subject(str(data.get("task_id")), int(data.get("round", 0)),
                                  int(data.get("stage", 0)))  # fmt: skip
        if e.subject != expected:
            yield (
                e.subject, None,
                f"a review round is recorded under {e.subject!r}, not its reviewer's "
                f"subject {expected!r}",
            )  # fmt: skip
        key = (expected, data.get("reviewer"), data.get("candidate_sha256"),
               (data.get("accepted"), data.get("findings")))  # fmt: skip
        if given[key] > 0:
            given[key] -= 1
        else:
            yield (
                expected, None,
                f"a recorded round (reviewer {data.get('reviewer')!r}, "
                f"{'accepted' if data.get('accepted') else 'sent back'}): no recorded call of "
                "its reviewer gave this verdict on this candidate",
            )  # fmt: skip
