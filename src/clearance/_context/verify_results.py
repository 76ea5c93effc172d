"""Verifying that every completed task's result is what its last call answered.

A task's result reaches its dependents verbatim, so the recorded result must be one of the
documented forms of its last successful call's response (`accepted_results`):

- the response, verbatim (the only form of an answer the model finished by itself: its
  repeated lines included);
- for a response cut off at the output limit (the call's recorded ``finish_reason`` is
  ``"length"``), the response with its marks and its trailing loop cut (`mark_answer`),
  with an ``answer_marked`` event recorded for the task;
- the response with surrounding whitespace removed: how results were kept before they
  reached dependents verbatim (runs recorded by earlier versions), and how a structured
  answer is read before it is parsed;
- for an isolated task, the answer less its ``STATUS:`` line (`subagent_result`), or as
  earlier versions kept it (line breaks normalized, ``QUESTION:`` lines dropped);
- for a task with an ``output_schema``, the JSON value it holds re-serialized as the run
  keeps it (`~clearance._core.json_answer.dumps_answer`: sorted keys, two-space indents,
  each number as the answer wrote it); in a run recorded before `EXACT_FORMAT`, also as
  those runs kept it, its numbers read as floats (``3.14159265358979323846`` as
  ``3.141592653589793``: a run of the current format that rounds so is a finding);
- for a task run by a step (``Task.run``), the output its ``step`` event recorded.

A step's input is checked as a prompt is (`check_step_inputs`): its ``step`` event must name
the task's own ``run`` and ``files``, and every result it was given must be of a task its
clearance admits, and be that task's recorded result.

A structured result (a task with an ``output_schema``) must also hold to that schema, as the
task was held to it: ``x-enum-from`` narrowed by its completed prerequisites' results, its
numbers exact (a run recorded before `EXACT_FORMAT` passes if it holds either read).

The run's synthesis (its final answer, as ``inspect``, ``view`` and reports show it) must be
the answer of a successful ``synthesis`` call in one of the same plain forms
(`check_synthesis_result`).

A marked answer and its ``answer_marked`` event agree on every path (`check_marks`): a
delegate's, a child's or a clarification's answer kept marked (the ``delegate`` call's
result, the child's outcome, the clarification event's answer) has an ``answer_marked``
event of its call's subject, as a task's has (runs recorded from ``prompt_format`` 3 on:
earlier ones recorded the event for tasks only); and every ``answer_marked`` event matches a
successful call of its subject cut off with those marks (``truncated``, ``repetitive``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from clearance._context.answers import mark_answer
from clearance._context.clearance import Clearance
from clearance._context.isolated import STATUSES, status_word, subagent_result
from clearance._context.verify_facts import RunFacts
from clearance._core.json_answer import dumps_answer, loads_strict, read_json_answer
from clearance._core.origins import Subject
from clearance._core.prompt import sha256_text
from clearance._core.schema_check import PATTERN_SECONDS, schema_errors
from clearance._core.schema_enum import narrowed_schema
from clearance._core.vocabulary import EventKind, PromptKind
from clearance._state.ledger import CallRecord

__all__ = [
    "EXACT_FORMAT",
    "MARKS_FORMAT",
    "accepted_results",
    "check_marks",
    "check_results",
    "check_step_inputs",
    "check_synthesis_result",
]

_FENCED_JSON = re.compile(r"```(?:json)?[ \t]*\n(.*?)```", re.DOTALL)
_QUESTION = re.compile(r"^\W*question\W*:\s*(.*)$", re.IGNORECASE)
MARKS_FORMAT = 3
"""The first ``prompt_format`` whose runs record ``answer_marked`` for a delegate's, a child's
and a clarification's marked answer (earlier runs kept them marked without the event)."""
EXACT_FORMAT = 5
"""The first ``prompt_format`` whose runs keep a structured result's numbers as the answer
wrote them (earlier runs read them as floats: ``3.14159265358979323846`` was kept as
``3.141592653589793``, ``-0`` as ``0``)."""
VERIFY_SECONDS = 10 * PATTERN_SECONDS
"""The time ``verify`` gives a result's patterns: more than the run had, so a result the run
accepted is not a finding on a slower machine."""


def accepted_results(response: str, finish_reason: str | None) -> set[str]:
    """The forms a plain answer may be kept in: verbatim, marked, or (legacy) stripped."""
    return {response, mark_answer(response, finish_reason=finish_reason).text, response.strip()}


def check_results(
    calls: list[CallRecord], facts: RunFacts
) -> Iterator[tuple[str, str | None, str]]:
    """Every completed task has a successful call of its own whose response is its result.

    Yields:
        ``(subject, call id or None, reason)`` for each problem.
    """
    last: dict[str, CallRecord] = {}
    for record in calls:
        parsed = Subject.parse(record.subject)
        if (
            record.error is None
            and not record.pending
            and parsed.kind in (PromptKind.TASK, PromptKind.ISOLATED)
        ):
            last[parsed.id] = record
    steps = {
        Subject.parse(e.subject).id: e.data.get("sha256")
        for e in facts.events
        if e.kind == EventKind.STEP and Subject.parse(e.subject).kind == PromptKind.TASK
    }
    marked = {e.subject for e in facts.events if e.kind == EventKind.ANSWER_MARKED}
    for task_id, result in facts.completed.items():
        subject = str(Subject.task(task_id))
        task = facts.graph.get(task_id) if facts.graph and task_id in facts.graph else None
        if task is not None and task.run is not None:  # a non-model task: its step event
            if steps.get(task_id) != sha256_text(result):
                yield subject, None, "the task's result is not the output its step recorded"
            continue
        call = last.get(task_id)
        if call is None:
            reason = "the task is recorded completed, but no successful model call of it is"
            yield subject, None, reason
            continue
        response = call.response or ""
        accepted: set[str | None] = set(accepted_results(response, call.finish_reason))
        if Subject.parse(call.subject).kind == PromptKind.ISOLATED:
            # The answer less its STATUS line; or as earlier versions kept it.
            accepted = {subagent_result(response), _legacy_subagent_result(response)}
        exact = facts.prompt_format >= EXACT_FORMAT
        if task is not None and task.output_schema is not None:
            accepted.add(_structured(response))
            if not exact:  # as runs of earlier formats kept it
                accepted.add(_legacy_structured(response))
        if result not in accepted:
            yield (
                subject,
                call.call_id,
                "the task's recorded result is not the response of its last call",
            )
        elif task is not None and task.output_schema is not None:
            deps = [facts.completed[d] for d in task.depends_on if d in facts.completed]
            problem = _schema_problem(result, task.output_schema, deps, exact=True)
            if problem is not None and not exact:  # or as runs of earlier formats read it
                problem = _schema_problem(result, task.output_schema, deps)
            if problem is not None:
                yield subject, call.call_id, f"the task's structured result {problem}"
        elif result != response and subject not in marked and result in _marked(call):
            yield subject, call.call_id, "the result is marked, but no answer_marked event is"
    yield from check_marks(calls, facts)


def check_marks(calls: list[CallRecord], facts: RunFacts) -> Iterator[tuple[str, str | None, str]]:
    """A marked answer of a delegate, child or clarification, and its ``answer_marked`` event.

    Yields:
        ``(subject, call id or None, reason)`` for a call whose answer was kept marked
        without an ``answer_marked`` event of its subject (in a run recorded from
        `MARKS_FORMAT` on), and ``("event <id>", None,
        reason)`` for an ``answer_marked`` event no cut-off answer of its subject matches.
    """
    events = [e for e in facts.events if e.kind == EventKind.ANSWER_MARKED]
    subjects = {e.subject for e in events}
    done = [c for c in calls if c.error is None and not c.pending and c.response is not None]
    recorded = facts.prompt_format >= MARKS_FORMAT  # earlier runs recorded no such event
    if recorded:  # the events that keep an answer, read once (not once per answer)
        keeps = _Keeps(facts)
        for call in done:
            if call.subject not in subjects and _kept_marked(call, facts, keeps):
                reason = "the answer is marked, but no answer_marked event is"
                yield call.subject, call.call_id, reason
    flags: dict[str, set[tuple[bool, bool]]] = {}
    for call in done:
        marked = mark_answer(call.response or "", finish_reason=call.finish_reason)
        flags.setdefault(call.subject, set()).add((marked.truncated, marked.repetitive))
    for event in events:
        if (event.data.get("truncated"), event.data.get("repetitive")) not in flags.get(
            event.subject, ()
        ):
            reason = f"the answer_marked event matches no cut-off answer of {event.subject}"
            yield f"event {event.event_id}", None, reason


def check_step_inputs(facts: RunFacts) -> Iterator[tuple[str, str | None, str]]:
    """Every ``step`` event of a task: the task's own function and files, admitted results.

    A step is given what its clearance admits (`Clearance.for_task`), as a model task's
    prompt is; its event records the function, the files and each result by its hash.

    Yields:
        ``(subject, None, reason)`` for each problem.
    """
    graph = facts.graph
    if graph is None:
        return
    for event in facts.events:
        parsed = Subject.parse(event.subject)
        if event.kind != EventKind.STEP or parsed.kind != PromptKind.TASK:
            continue
        subject, data = event.subject, event.data
        task = graph.get(parsed.id) if parsed.id in graph else None
        if task is None or task.run is None or data.get("run") != task.run:
            yield subject, None, "the step event is not of a step task of the recorded graph"
            continue
        # Its shape is checked with every event's (`event_problem`).
        results, failed, files = data["results"], data["failed"], data["files"]
        if set(files) != set(task.files):
            yield subject, None, "the step event's files are not the task's files"
        admitted = Clearance.for_task(graph, task.id).result_task_ids
        for given in sorted({*map(str, results), *map(str, failed)} - admitted):
            yield subject, None, f"the step was given task {given!r}, outside its clearance"
        for given, digest in sorted(results.items()):
            recorded = facts.completed.get(given)
            if given in admitted and (recorded is None or sha256_text(recorded) != digest):
                reason = f"the step was given a result of task {given!r} other than its own"
                yield subject, None, reason + " recorded result"


def check_synthesis_result(
    synthesis: str | None, calls: list[CallRecord]
) -> Iterator[tuple[str, str | None, str]]:
    """The run's recorded synthesis is a form of a successful ``synthesis`` call's answer.

    Any such call of the run's sessions (a resumed run synthesizes again, or replays an
    earlier synthesis call); ``None`` (no synthesis recorded) is not checked.

    Yields:
        ``("run", None, reason)`` when it is none of them.
    """
    if synthesis is None:
        return
    for call in calls:
        if (
            call.subject == PromptKind.SYNTHESIS
            and call.error is None
            and not call.pending
            and synthesis in accepted_results(call.response or "", call.finish_reason)
        ):
            return
    yield "run", None, "the run's synthesis is not the answer of a synthesis call of the run"


class _Keeps:
    """The events that keep a delegate's or a clarification's answer, indexed once.

    ``offloaded``: ``(tool call id, sha256)`` of each ``offloaded`` event; ``clarified``:
    ``(subject, answer)`` of each ``clarification`` event the coordinator answered. Only
    text values are kept: the checks compare them with text.
    """

    def __init__(self, facts: RunFacts) -> None:
        self.offloaded: set[tuple[str, str]] = set()
        self.clarified: set[tuple[str, str]] = set()
        for e in facts.events:
            data = e.data
            if e.kind == EventKind.OFFLOADED:
                ref, digest = data.get("tool_call_id"), data.get("sha256")
                if isinstance(ref, str) and isinstance(digest, str):
                    self.offloaded.add((ref, digest))
            elif (
                e.kind == EventKind.CLARIFICATION
                and data.get("answered_by") == "coordinator"
                and isinstance(answer := data.get("answer"), str)
            ):
                self.clarified.add((e.subject, answer))


def _kept_marked(call: CallRecord, facts: RunFacts, keeps: _Keeps) -> bool:
    """Whether a delegate's, child's or clarification's answer was kept with its marks."""
    response = call.response or ""
    marked = mark_answer(response, finish_reason=call.finish_reason).text
    if marked == response:
        return False
    parsed = Subject.parse(call.subject)
    ref = str(parsed.id)
    if parsed.kind == PromptKind.DELEGATION:  # the delegate call's result (or offloaded)
        row = facts.tool_calls.get(ref)
        return row is not None and (
            row.result in (marked, marked.strip()) or (ref, sha256_text(marked)) in keeps.offloaded
        )
    if parsed.kind == PromptKind.CHILD:  # the child's recorded outcome
        return any(o.result == marked for o in facts.subagents.outcomes.get(ref, ()))
    if parsed.kind == PromptKind.CLARIFICATION:  # the answer its clarification event records
        return (str(Subject.task(ref)), marked.strip()) in keeps.clarified
    return False


def _marked(call: CallRecord) -> set[str]:
    """The marked form of a call's response, if marking changes it (else nothing)."""
    response = call.response or ""
    text = mark_answer(response, finish_reason=call.finish_reason).text
    return set() if text == response else {text}


def _schema_problem(
    result: str, schema: dict[str, Any], deps: list[str], *, exact: bool = False
) -> str | None:
    """Why a structured result does not hold to its task's schema, or ``None``.

    The schema as the task was held to it: ``x-enum-from`` narrowed by its completed
    prerequisites' recorded results (`narrowed_schema`); the result's numbers read exactly,
    or (``exact=False``, as runs before `EXACT_FORMAT` read them) as floats.
    """
    try:
        value = loads_strict(result, exact=exact)
    except (ValueError, RecursionError):
        return "is not JSON read one way (a key given twice, NaN, too deep...)"
    try:
        errors = schema_errors(narrowed_schema(schema, deps), value, seconds=VERIFY_SECONDS)
    except ValueError as exc:
        return f"cannot be checked against its output schema: {exc}"
    error = errors[0] if errors else None
    if error is None:
        return None
    return f"does not match its output schema at {error.json_path}: {error.message:.200}"


def _structured(text: str) -> str | None:
    """A structured answer re-serialized as the orchestrator keeps it, or ``None``.

    Read as the orchestrator reads it (`read_json_answer`, numbers exact: the whole answer,
    else its first fenced block) and written as it writes it (`dumps_answer`).
    """
    try:
        return dumps_answer(read_json_answer(text.strip(), exact=True))
    except (ValueError, TypeError, RecursionError):
        return None


def _legacy_structured(text: str) -> str | None:
    """A structured answer as runs before `EXACT_FORMAT` kept it (as floats), or ``None``."""
    body = text.strip()
    match = _FENCED_JSON.search(body)
    for candidate in (body, match.group(1) if match else None):
        if candidate is None:
            continue
        try:
            # As the orchestrator parsed it: raw control characters inside strings allowed.
            value = json.loads(candidate, strict=False)
        except (ValueError, RecursionError):
            continue
        return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)
    return None


def _legacy_subagent_result(text: str) -> str | None:
    r"""An isolated task's result as versions before 2026-11-27 kept it, or ``None``.

    They split the answer with `str.splitlines` (every Unicode line break became ``\n``),
    stripped it, and dropped every ``QUESTION:`` line; such a ledger still verifies.
    """
    lines = text.strip().splitlines()
    for index in range(len(lines) - 1, -1, -1):
        word = status_word(lines[index])
        if word not in STATUSES:
            continue
        before = "\n".join(lines[:index]).strip()
        before = "\n".join(ln for ln in before.splitlines() if not _QUESTION.match(ln)).strip()
        after = "\n".join(
            ln for ln in lines[index + 1 :] if ln.strip() and not _QUESTION.match(ln)
        ).strip()
        if word == "done":
            return "\n".join(filter(None, (before, after)))
        if word == "done_with_concerns":
            return f"{before}\n\nConcerns: {after}" if after else before
        return None
    return f"{text.strip()}\n\nConcerns: the answer has no STATUS line"
