"""Verifying a hierarchical synthesis: its map steps and the reduce that reads their summaries.

When the coordinator's full view overflows its budget, the synthesis is made of map steps
(subject ``synthesis_map:<n>``: the goal and one group of completed results, or of earlier
summaries) and a reduce (subject ``synthesis``: the goal, the summaries, failed and skipped
tasks, shared memory). These checks, from the ledger alone:

- a step's recorded clearance lists exactly the results and summaries it holds, and it holds
  only the kinds of item its step is built from;
- a ``task_result:<id>`` is the recorded result of that task (the common provenance check);
- a ``summary_of:<n>`` is the answer of a successful ``synthesis_map:<n>`` call made before,
  as the orchestrator keeps it (verbatim, or marked as cut off; see `verify_results`);
- across the run, each result reaches at most one map step and each summary at most one
  later step; when a reduce with summaries succeeded, every result the synthesis shows
  (all completed tasks, or the team file's ``synthesis_from``) reached a map step, and every
  successful map step's summary reached a later step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from clearance._context.layout import item_kinds
from clearance._context.verify_results import accepted_results
from clearance._core.origins import Origin, Subject
from clearance._core.prompt import sha256_text
from clearance._core.vocabulary import OriginKind, PromptKind
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
) -> Iterator[Problem]:
    """Check a map step or reduce: its clearance, its items' kinds and provenance.

    Args:
        call: The call (subject ``synthesis_map:<n>`` or a ``synthesis`` with summaries).
        items: Its manifest's items, the instructions first.
        calls: Every call of the run, in the order recorded.
        goal: The run's recorded goal, or ``None``.
        provenance: The common check of ``task_result``, ``task_status`` and
            ``shared_memory`` items.
    """
    is_map = call.subject != PromptKind.SYNTHESIS
    allowed = _MAP_KINDS if is_map else _REDUCE_KINDS
    results: list[str] = []
    summaries: list[int] = []
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
            if not _is_summary(call, int(ref), item.get("sha256"), calls):
                yield (
                    origin,
                    f"the content is not the answer of an earlier {PromptKind.SYNTHESIS_MAP}:{ref}",
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


def _is_summary(call: CallRecord, step: int, digest: Any, calls: Sequence[CallRecord]) -> bool:
    """Whether ``digest`` is the kept answer of the last successful map call ``step`` before."""
    latest: CallRecord | None = None
    for other in calls:
        if other.call_id == call.call_id:
            break
        if (
            other.subject == f"{PromptKind.SYNTHESIS_MAP}:{step}"
            and other.error is None
            and not other.pending
        ):
            latest = other
    return latest is not None and digest in {sha256_text(t) for t in _kept_answers(latest)}


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
