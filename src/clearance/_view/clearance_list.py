"""What a task's panel on the run page says of the other tasks: whose results it saw.

The page lists, for each task, the tasks whose results its clearance admitted, then the
others. Naming every other task on every task's panel made the page grow with the square of
the tasks (1.8 GB for 4,000 tasks), so past `HIDDEN_LISTED` the others are counted. A task
named on another's panel is named by its id and title cut to `MAX_LABEL_CHARS` (`short`):
a ledger edited to hold titles of 100,000 characters made a page of 366 MB from 60 tasks.
"""

from __future__ import annotations

from dataclasses import dataclass

from clearance._core.names import MAX_LABEL_CHARS
from clearance._view.model import RunView, TaskView

__all__ = ["HIDDEN_LISTED", "ClearanceList", "clearance_lists", "short"]

HIDDEN_LISTED = 100
"""Most not-cleared tasks a task's panel names one by one. Past it the panel gives their count
(the graph greys each of them when the task is selected): naming every other task on every
task's panel made the page grow with the square of the tasks."""


@dataclass(frozen=True, slots=True)
class ClearanceList:
    """What a task's panel says of the other tasks: whose results it was cleared to see.

    Attributes:
        cleared: The tasks whose results its clearance admitted, in task order.
        hidden: The other tasks, not cleared, in task order; empty when there are more than
            `HIDDEN_LISTED` of them.
        hidden_count: How many other tasks were not cleared.
    """

    cleared: list[TaskView]
    hidden: list[TaskView]
    hidden_count: int


def clearance_lists(view: RunView) -> dict[int, ClearanceList]:
    """Each task's `ClearanceList`, by task index.

    Time and size grow with the tasks and their clearances, not with their square: the
    not-cleared tasks are named only where there are at most `HIDDEN_LISTED` of them.
    """
    by_id = {t.task_id: t for t in view.tasks}
    lists: dict[int, ClearanceList] = {}
    for task in view.tasks:
        ids = {c for c in task.cleared if c != task.task_id and c in by_id}
        cleared = sorted((by_id[c] for c in ids), key=lambda t: t.index)
        hidden_count = len(view.tasks) - 1 - len(ids)
        hidden = []
        if hidden_count <= HIDDEN_LISTED:
            hidden = [o for o in view.tasks if o.index != task.index and o.task_id not in ids]
        lists[task.index] = ClearanceList(cleared, hidden, hidden_count)
    return lists


def short(text: object) -> str:
    """``text`` as a label naming a task (or a run) elsewhere than its own panel (or page).

    At most `MAX_LABEL_CHARS` characters: a longer text (a title no run records, or a goal
    on the list of runs) is cut to ``MAX_LABEL_CHARS - 1`` characters and ``…``. The task's
    own panel, and the run's own page, show it whole.
    """
    label = str(text)
    return label if len(label) <= MAX_LABEL_CHARS else label[: MAX_LABEL_CHARS - 1] + "…"
