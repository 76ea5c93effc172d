"""Verifying a hierarchical synthesis: its map steps and the reduce that reads their summaries.

When the coordinator's full view overflows its budget, the synthesis is made of map steps
(subject ``synthesis_map:<n>``: the goal and one group of completed results, or of earlier
summaries) and a reduce (subject ``synthesis``: the goal, the summaries, failed and skipped
tasks, shared memory). These checks, from the ledger alone:

- a step's recorded clearance lists exactly the results and summaries it holds, and it holds
  only the kinds of item its step is built from;
- a ``task_result:<id>`` is the recorded result of that task (the common provenance check);
- a ``summary_of:<n>`` is the answer of a successful ``synthesis_map:<n>`` call made before,
  as the orchestrator keeps it (verbatim, or marked as cut off; see `verify_results`), and
  its label (`layout.summary_label`) names exactly the tasks that call covered: the results
  its recorded clearance lists, then the tasks of each summary it lists, in the recorded
  graph's titles and assignees (runs recorded before summaries were labelled show
  ``Summary <n>``, which names no task: accepted only in a run whose config records no
  ``prompt_format``, as those runs' do not);
- across the run, each result reaches at most one map step and each summary at most one
  later step; when a reduce with summaries succeeded, every result the synthesis shows
  (all completed tasks, or the team file's ``synthesis_from``) reached a map step, and every
  successful map step's summary reached a later step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from clearance._context.layout import item_kinds, legacy_summary_label, summary_label
from clearance._context.verify_results import accepted_results
from clearance._core.origins import Origin, Subject
from clearance._core.prompt import sha256_text
from clearance._core.vocabulary import OriginKind, PromptKind
from clearance._state.graph import TaskGraph
from clearance._state.ledger import CallRecord

__all__ = ["check_synthesis_coverage", "check_synthesis_step", "is_synthesis_step"]

Problem = tuple[str | None, str]
"""``(origin or None, reason)``: one finding about a call."""

ItemCheck = Callable[[str, dict[str, Any]], Iterator[Problem]]
"""Checks one item (origin, manifest entry) against the run's records."""

_MAP_KINDS = item_kinds(PromptKind.SYNTHESIS_MAP)
_REDUCE_KINDS = item_kinds(PromptKind.SYNTHESIS_REDUCE)


def is_synthesis_step(subject: str, items: Sequence[dict[str, Any]]) -> bool:
    """Whether a call is a map step, or a reduce (a ``synthesis`` holding summaries)."""
    parsed = Subject.parse(subject)
    if parsed.kind == PromptKind.SYNTHESIS_MAP and parsed.ref is not None:
        return True
    return subject == PromptKind.SYNTHESIS and any(
        Origin.parse(str(i.get("origin"))).kind == OriginKind.SUMMARY_OF for i in items
    )


def check_synthesis_step(
    call: CallRecord,
    items: Sequence[dict[str, Any]],
    calls: Sequence[CallRecord],
    goal: str | None,
    provenance: ItemCheck,
    graph: TaskGraph | None = None,
    *,
    labelled: bool = False,
) -> Iterator[Problem]:
    """Check a map step or reduce: its clearance, its items' kinds and provenance.

    Args:
        call: The call (subject ``synthesis_map:<n>`` or a ``synthesis`` with summaries).
        items: Its manifest's items, the instructions first.
        calls: Every call of the run, in the order recorded.
        goal: The run's recorded goal, or ``None``.
        provenance: The common check of ``task_result``, ``task_status`` and
            ``shared_memory`` items.
        graph: The run's recorded graph, for the tasks a summary's label names; ``None``
            when it was not recorded (labels are then not checked).
        labelled: The run records a prompt format that labels summaries with their tasks
            (``prompt_format`` 1 or later): the plain ``Summary <n>`` label of older runs
            is then a finding too.
    """
    is_map = call.subject != PromptKind.SYNTHESIS
    allowed = _MAP_KINDS if is_map else _REDUCE_KINDS
    results: list[str] = []
    summaries: list[int] = []
    earlier: dict[int, _MapStep] | None = None  # read once, when a summary is first met
    for item in items[1:]:
        origin = str(item.get("origin"))
        parsed = Origin.parse(origin)
        kind, ref = parsed.kind, parsed.id
        if kind not in allowed:
            yield origin, f"a {call.subject} prompt may not hold {kind!r} items"
        elif kind == OriginKind.GOAL:
            if goal is not None and item.get("sha256") != sha256_text(goal):
                yield origin, "the goal is not the run's goal"
        elif kind == OriginKind.SUMMARY_OF:
            if not ref.isdigit():
                yield origin, "a summary names no map step"
                continue
            summaries.append(int(ref))
            earlier = _map_steps_before(call, calls) if earlier is None else earlier
            step = earlier.get(int(ref))
            if step is None or item.get("sha256") not in _kept_digests(step.call):
                yield (
                    origin,
                    f"the content is not the answer of an earlier {PromptKind.SYNTHESIS_MAP}:{ref}",
                )
            elif graph is not None:
                yield from _check_label(
                    origin, int(ref), item.get("title"), step, graph, labelled=labelled
                )
        else:
            if kind == OriginKind.TASK_RESULT:
                results.append(ref)
            yield from provenance(origin, item)
    expected = {"step": call.subject, "task_results": results, "summaries": summaries}
    if call.manifest.get("clearance") != expected:
        yield None, "the recorded clearance differs from the results and summaries it holds"
    if is_map and not results and not summaries:
        yield None, "a map step holds nothing to summarize"


def _kept_answers(call: CallRecord) -> set[str]:
    return accepted_results(call.response or "", call.finish_reason)


def _kept_digests(call: CallRecord) -> set[str]:
    return {sha256_text(t) for t in _kept_answers(call)}


@dataclass(frozen=True, slots=True)
class _MapStep:
    """The last successful map call of one number, and what it covered (from its records).

    ``covered``: the tasks its clearance lists, then (in order) those of each summary it
    lists, and how many summaries it merged; ``None`` when a record is not of that form
    (the step's own checks report it).
    """

    call: CallRecord
    covered: tuple[list[str], int] | None


def _map_steps_before(call: CallRecord, calls: Sequence[CallRecord]) -> dict[int, _MapStep]:
    """Each map step's last successful call recorded before ``call``, by step number."""
    steps: dict[int, _MapStep] = {}
    for other in calls:  # in the order recorded: a summary is covered before it is read
        if other.call_id == call.call_id:
            break
        parsed = Subject.parse(other.subject)
        if parsed.kind != PromptKind.SYNTHESIS_MAP or not parsed.id.isdigit():
            continue
        if other.error is None and not other.pending:
            steps[int(parsed.id)] = _MapStep(other, _step_coverage(other, steps))
    return steps


def _step_coverage(call: CallRecord, steps: dict[int, _MapStep]) -> tuple[list[str], int] | None:
    clearance = call.manifest.get("clearance")
    if not isinstance(clearance, dict):
        return None
    results, merged = clearance.get("task_results"), clearance.get("summaries")
    if not isinstance(results, list) or not isinstance(merged, list):
        return None
    tasks = [str(r) for r in results]
    for inner in merged:
        known = steps.get(inner) if isinstance(inner, int) else None
        if known is None or known.covered is None:
            return None
        tasks += known.covered[0]
    return tasks, len(merged)


def _check_label(
    origin: str, step: int, title: Any, recorded: _MapStep, graph: TaskGraph, *, labelled: bool
) -> Iterator[Problem]:
    """A summary's label names exactly the tasks its map step covered."""
    if title == legacy_summary_label(step) and not labelled:
        return  # recorded before summaries were labelled: it names no task
    if recorded.covered is None:
        return  # the map step's own checks report its record
    tasks, merged = recorded.covered
    if any(tid not in graph for tid in tasks):
        return  # the map step's provenance check reports the unknown task
    named = [(t.id, t.title, t.assignee) for t in map(graph.get, tasks)]
    expected = summary_label(step, named, merged)
    if title != expected:
        yield (
            origin,
            f"the summary's label {title!r} does not name the tasks "
            f"{PromptKind.SYNTHESIS_MAP}:{step} covered: {expected!r}",
        )


def check_synthesis_coverage(
    calls: Sequence[CallRecord], shown: Sequence[str]
) -> Iterator[tuple[str, str | None, str]]:
    """Each result in exactly one map step, each summary read by exactly one later step.

    Args:
        calls: Every call of the run, in the order recorded.
        shown: Ids of the completed tasks whose results the synthesis shows.

    Yields:
        ``(subject, origin, reason)`` for each problem.
    """
    readers: dict[str, set[str]] = {}  # item origin -> subjects of the steps holding it
    answered: set[str] = set()  # successful map steps
    reduced = False
    for call in calls:
        items = call.manifest.get("items", [])
        if not is_synthesis_step(call.subject, items):
            continue
        ok = call.error is None and not call.pending
        if Subject.parse(call.subject).kind == PromptKind.SYNTHESIS_MAP and ok:
            answered.add(call.subject)
        reduced = reduced or (call.subject == PromptKind.SYNTHESIS and ok)
        for item in items:
            origin = str(item.get("origin"))
            if Origin.parse(origin).kind in (OriginKind.TASK_RESULT, OriginKind.SUMMARY_OF):
                readers.setdefault(origin, set()).add(call.subject)
    for origin, subjects in sorted(readers.items()):
        if len(subjects) > 1:
            yield "synthesis", origin, f"reaches more than one step: {', '.join(sorted(subjects))}"
    if not reduced:
        return
    for task_id in shown:
        if f"task_result:{task_id}" not in readers:
            yield "synthesis", f"task_result:{task_id}", "the result reaches no map step"
    for subject in sorted(answered):
        step = Subject.parse(subject).id
        if f"summary_of:{step}" not in readers:
            yield subject, None, "the map step's summary reaches no later step"
