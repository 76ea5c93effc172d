"""The labels of prompt items: a task's own text, results, failures, summaries, children.

Written once here: ``<title>`` (`task_label`), ``<title> (by <assignee>)`` (`result_label`),
``<title> (by <assignee>): <status>`` (`status_label`), a summary's (`summary_label`) and a
spawned child's result (`child_result_label`). A label comes from the team file, the
coordinator's plan or a recorded spawn, never from the content it labels; it is collapsed
onto one line (`render.one_line`), so no title can open a section, a block or a fence, and
``clearance verify`` checks each label against the run's records. Earlier runs' forms are
kept (``legacy_*``) so their prompts still verify.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from clearance._context.render import one_line
from clearance._core.vocabulary import OriginKind

__all__ = [
    "SUMMARY_LABEL_TASKS",
    "child_result_label",
    "fixed_title",
    "legacy_child_label",
    "legacy_summary_label",
    "legacy_task_label",
    "result_label",
    "status_label",
    "summary_label",
    "task_label",
]


def result_label(title: str, assignee: str) -> str:
    """The heading of a task's result: ``<title> (by <assignee>)``, on one line."""
    return one_line(f"{title} (by {assignee})")


def task_label(title: str) -> str:
    """The label of a task's own text: its title, on one line."""
    return one_line(title)


def legacy_task_label(title: str, task_id: str) -> str:
    """`task_label` as layouts 1 and 2 recorded it: ``<title> (task <id>)``."""
    return one_line(f"{title} (task {task_id})")


def status_label(title: str, assignee: str, status: str) -> str:
    """The heading of a task that did not complete: ``<title> (by <assignee>): <status>``."""
    return one_line(f"{title} (by {assignee}): {status}")


SUMMARY_LABEL_TASKS = 8
"""Most tasks a summary's label names; the rest are counted (``and <n> more tasks``)."""


def summary_label(step: int, tasks: Sequence[tuple[str, str, str]], summaries: int = 0) -> str:
    """The heading of map step ``step``'s summary in a later synthesis prompt, on one line.

    ``Summary <step> of <n> tasks: [<id>] <title> (by <assignee>); ...; and <m> more tasks``
    (``of <k> summaries, <n> tasks`` for a summary of ``summaries`` earlier ones), naming
    the first `SUMMARY_LABEL_TASKS` of ``tasks``: ``(id, title, assignee)`` of every task
    it covers, in order.
    """
    count = f"{len(tasks):,} task{'' if len(tasks) == 1 else 's'}"
    head = f"{summaries} summaries, {count}" if summaries else count
    named = [f"[{tid}] {title} (by {assignee})" for tid, title, assignee in tasks]
    more = len(tasks) - SUMMARY_LABEL_TASKS
    rest = [f"and {more:,} more task{'' if more == 1 else 's'}"] if more > 0 else []
    named = named[:SUMMARY_LABEL_TASKS] + rest
    return one_line(f"Summary {step} of {head}: " + "; ".join(named))


def child_result_label(child_id: str, agent: str, goal: str) -> str:
    """The heading of a spawned child's result, on one line: who answered what.

    ``Result of <child id> (by <agent>): <goal>``, from the child's recorded spawn: a
    parent never sees its children's prompts, so without its goal and agent it could not
    tell which of its questions each result answers (runs recorded from ``prompt_format`` 4;
    earlier runs label it `legacy_child_label`).
    """
    return one_line(f"Result of {child_id} (by {agent}): {goal}")


def legacy_child_label(child_id: str) -> str:
    """`child_result_label` of runs recorded before ``prompt_format`` 4: ``Result of <id>``."""
    return one_line(f"Result of {child_id}")


def legacy_summary_label(step: int) -> str:
    """`summary_label` as runs recorded before summaries were labelled: ``Summary <step>``."""
    return f"Summary {step}"


_FIXED_TITLES: Mapping[str, str] = {
    OriginKind.GOAL: "Goal",
    OriginKind.PLAN_FEEDBACK: "What was wrong",
    OriginKind.SHARED_MEMORY: "Summary of all results",
    OriginKind.REPAIR: "Previous answer and validation error",
    OriginKind.DELEGATION: "Task",
    OriginKind.CHILD_GOAL: "Goal",
    OriginKind.QUESTION: "Question",
    OriginKind.HISTORY: "Your earlier steps",
    OriginKind.FILE: "{ref}",
    OriginKind.TOOL_SPEC: "{ref}",
    OriginKind.AGENT: "{ref}",
    OriginKind.CONSTRAINT: "Constraint {ref}",
    OriginKind.CLARIFICATION: "Clarification {ref}",
}
"""The titles the builders give items whose title their origin alone decides (every version)."""


def fixed_title(kind: str, ref: str) -> str | None:
    """The title of a ``kind:ref`` item, on one line, if its origin alone decides it.

    ``None`` for the kinds whose title comes from a record (a result's label, a message's
    sender, a tool call's name and arguments...): `verify_items` checks those against it,
    `verify_synthesis` a summary's label (`summary_label`) against the map steps' records, and
    `verify_subagents` a child's result's label against its recorded spawn.
    """
    form = _FIXED_TITLES.get(kind)
    return None if form is None else one_line(form.replace("{ref}", ref))
