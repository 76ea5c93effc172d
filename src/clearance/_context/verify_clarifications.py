"""Verifying isolated tasks' clarification rounds against the calls they came from.

Each ``clarification`` event (subject ``task:<id>``) records one round: what the task's
subagent asked and what it was given. A prompt's ``clarification:<n>`` item is checked
against these events (`verify_subagents`); here the events themselves are checked against
the recorded calls, so a round rewritten in the ledger (the event and the prompts that show
it, the chain rebuilt) is still a finding:

- a question (or file request) is one the task's own subagent asked: the question a
  ``needs_context`` answer of a recorded ``isolated:<id>`` call holds (`parse_status`);
- a file round names the path that question asked for, and is served with no answer, or
  refused with ``The file '<path>' cannot be given: <why>``; a file in a version-control
  folder (`project_ignore.ALWAYS_SKIPPED`), in Clearance's own state folder (``.clearance``)
  or under the run's workspace root (`recorded_workspace`) is never served;
- the coordinator's answer is what a recorded ``clarification:<id>`` call whose question is
  that question answered (verbatim, or with `mark_answer`'s marks; stripped in runs recorded
  before answers were kept verbatim; `NO_ANSWER` for an empty answer);
- Clearance's own answer is the one `question_too_long` gives the question it cut;
- a person's answer has no call to compare with: the chain (keyed, see ``ledger.chain_key``)
  is what proves it was not rewritten.

`reusable_person_answer` is what a resumed run reuses instead of asking the person again: a
recorded answer of theirs that the run's recorded prompts do not contradict.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from clearance._context.answers import mark_answer
from clearance._context.isolated import (
    NO_ANSWER,
    file_request,
    parse_status,
    question_too_long,
    recorded_question,
)
from clearance._context.project_ignore import is_vcs_metadata
from clearance._core.errors import ConfigError
from clearance._core.event_schema import (
    FileClarificationEvent,
    FilesEvent,
    QuestionClarificationEvent,
    parse_event,
)
from clearance._core.origins import Origin, Subject
from clearance._core.prompt import sha256_text
from clearance._core.vocabulary import EventKind, OriginKind, PromptKind
from clearance._core.workspace_reach import DEFAULT_WORKSPACE_ROOT, is_state_path, under_prefixes
from clearance._state.ledger import CallRecord, EventRecord

__all__ = ["check_clarification_events", "recorded_workspace", "reusable_person_answer"]

Problem = tuple[str, str | None, str]
"""``(subject, call id or None, reason)``: one finding."""


def _asked(calls: Sequence[CallRecord]) -> dict[str, set[str]]:
    """Every question each isolated task's subagent asked in a recorded call."""
    asked: dict[str, set[str]] = {}
    for call in calls:
        subject = Subject.parse(call.subject)
        if subject.kind != PromptKind.ISOLATED or call.error is not None or call.response is None:
            continue
        task_id = str(subject.id)
        status, _result, question, _concerns = parse_status(call.response)
        if status == "needs_context":
            asked.setdefault(task_id, set()).add(question or "(no question given)")
    return asked


def _answered(calls: Sequence[CallRecord]) -> dict[tuple[str, str], set[str]]:
    """``(task id, question digest)`` → what the coordinator's recorded calls answered."""
    answered: dict[tuple[str, str], set[str]] = {}
    for call in calls:
        subject = Subject.parse(call.subject)
        if subject.kind != PromptKind.CLARIFICATION or call.error is not None:
            continue
        if call.response is None:
            continue
        task_id = str(subject.id)
        marked = mark_answer(call.response, finish_reason=call.finish_reason).text
        # Verbatim (or marked), or stripped as runs recorded before answers were verbatim.
        texts = {
            text if text.strip() else NO_ANSWER
            for text in (marked, marked.strip(), call.response.strip())
        }
        for item in call.manifest.get("items") or ():
            origin = str(item.get("origin")) if isinstance(item, dict) else ""
            if origin == str(Origin(OriginKind.QUESTION, task_id)):
                answered.setdefault((task_id, str(item.get("sha256"))), set()).update(texts)
    return answered


def recorded_workspace(config: Mapping[str, Any] | None) -> tuple[str, ...]:
    """Where the run's workspace root lay in its project, as its recorded config spells both.

    Read from the written paths alone (``workspace``, ``project`` or ``input.default``): both
    relative to the run's working folder, or both absolute. ``()`` when they cannot be
    compared so (one relative, the other absolute; a ``python:`` package) or the workspace
    root lay outside the project.
    """
    if not isinstance(config, Mapping):
        return ()
    folder = config.get("input")
    project = config.get("project") or (folder.get("default") if isinstance(folder, dict) else None)
    workspace = config.get("workspace") or DEFAULT_WORKSPACE_ROOT
    if (
        not isinstance(project, str)
        or not isinstance(workspace, str)
        or project.startswith("python:")
    ):
        return ()
    if posixpath.isabs(project) != posixpath.isabs(workspace):
        return ()
    rel = posixpath.relpath(posixpath.normpath("/" + workspace), posixpath.normpath("/" + project))
    if rel == posixpath.pardir or rel.startswith(posixpath.pardir + "/"):
        return ()
    return (rel.casefold(),)


def check_clarification_events(
    events: Sequence[EventRecord],
    calls: Sequence[CallRecord],
    workspace: tuple[str, ...] = (),
) -> Iterator[Problem]:
    """Check every recorded clarification round against the calls it came from.

    Args:
        events: The run's events, in the order recorded.
        calls: The run's model calls.
        workspace: Where the run's workspace root lay in the project (`recorded_workspace`).

    Yields:
        ``(subject, None, reason)`` for each round that is not what the calls show.
    """
    asked, answered = _asked(calls), _answered(calls)
    for event in events:
        if event.kind != EventKind.CLARIFICATION:
            continue
        try:
            data = parse_event(event.kind, event.data)
        except ConfigError:
            continue  # verify reports it as a malformed event
        task_id = event.subject.removeprefix("task:")
        questions = asked.get(task_id, set())
        if isinstance(data, FileClarificationEvent):
            reason = _file_round(data, questions, workspace)
        elif isinstance(data, QuestionClarificationEvent):
            reason = _question_round(task_id, data, questions, answered)
        else:  # pragma: no cover - parse_event gives one of the two
            continue
        if reason is not None:
            yield f"event {event.event_id}", None, f"clarification of task {task_id!r}: {reason}"


def _file_round(
    data: FileClarificationEvent, questions: set[str], workspace: tuple[str, ...]
) -> str | None:
    if data.path not in {file_request(q) for q in questions if question_too_long(q) is None}:
        return f"{data.path!r} is not a file the task's subagent asked for"
    if data.served != (data.answer is None):
        return "a served file has no answer, and a refused one says why"
    if data.served and is_vcs_metadata(data.path):
        return f"{data.path!r} is version-control metadata, which is never given"
    if data.served and (is_state_path(data.path) or under_prefixes(data.path, workspace)):
        return (f"{data.path!r} is in the run's workspace folder or Clearance's own state, "
                "which is never given")  # fmt: skip
    if data.answer is not None and not data.answer.startswith(
        f"The file {data.path!r} cannot be given: "
    ):
        return "the answer is not a refusal of the file asked for"
    return None


def _question_round(
    task_id: str,
    data: QuestionClarificationEvent,
    questions: set[str],
    answered: dict[tuple[str, str], set[str]],
) -> str | None:
    if data.answered_by == "clearance":
        if not any(
            recorded_question(q) == data.question and question_too_long(q) == data.answer
            for q in questions
        ):
            return "not Clearance's answer to an over-long question the task's subagent asked"
        return None
    if data.question not in questions or file_request(data.question) is not None:
        return "not a question the task's subagent asked"
    if data.answered_by == "coordinator":
        if data.answer not in answered.get((task_id, sha256_text(data.question)), ()):
            return "the answer is not what the coordinator's recorded call answered"
        return None
    if data.answered_by != "person":
        return f"answered by {data.answered_by!r}, neither the coordinator nor a person"
    return None


def _runs_of_task(
    events: Sequence[EventRecord], task_id: str
) -> list[list[FileClarificationEvent | QuestionClarificationEvent]]:
    """Each run of the task (from its ``files`` event) → its clarification rounds, in order."""
    runs: list[list[FileClarificationEvent | QuestionClarificationEvent]] = []
    for event in events:
        if event.subject != f"task:{task_id}" or event.kind not in (
            EventKind.FILES, EventKind.CLARIFICATION
        ):  # fmt: skip
            continue
        try:
            data = parse_event(event.kind, event.data)
        except ConfigError:
            continue  # verify reports it as a malformed event
        if isinstance(data, FilesEvent):
            runs.append([])
        elif isinstance(data, FileClarificationEvent | QuestionClarificationEvent):
            if not runs:
                runs.append([])
            runs[-1].append(data)
    return runs


def reusable_person_answer(
    events: Sequence[EventRecord],
    calls: Sequence[CallRecord],
    *,
    task_id: str,
    round_no: int,
    question: str,
    given: Sequence[str],
) -> str | None:
    """The person's recorded answer to this question, for a resumed run to reuse.

    A run of the task recorded the person answering ``question`` in round ``round_no``
    after the same answers ``given`` (the latest such run); an empty answer
    (`NO_ANSWER`) is no answer to reuse. The answer is not reused when a recorded prompt of
    the task (``calls``: its ``isolated:<id>`` calls) that shows ``given`` first shows as
    the next clarification something that no recorded answer of that round is: the rounds
    were edited after that prompt was sent, and the person is asked again.

    Returns:
        The recorded answer, or ``None`` to ask.
    """
    candidate, accounted = None, set()
    for run in _runs_of_task(events, task_id):
        before = [r.answer for r in run if r.round < round_no and r.answer is not None]
        for data in run:
            if data.round != round_no or data.answer is None:
                continue
            accounted.add(sha256_text(data.answer))
            if (
                isinstance(data, QuestionClarificationEvent)
                and data.answered_by == "person"
                and data.question == question
                and data.answer != NO_ANSWER
                and before == list(given)
            ):
                candidate = data.answer
    if candidate is None:
        return None
    prefix = {n: sha256_text(a) for n, a in enumerate(given, start=1)}
    for call in calls:
        shown = {}
        for item in call.manifest.get("items") or ():
            origin = Origin.parse(str(item.get("origin")) if isinstance(item, dict) else "")
            if origin.kind == OriginKind.CLARIFICATION and str(origin.id).isdigit():
                shown[int(str(origin.id))] = item.get("sha256")
        nxt = shown.get(len(given) + 1)
        if (
            nxt is not None
            and all(shown.get(n) == d for n, d in prefix.items())
            and nxt not in accounted
        ):
            return None
    return candidate
