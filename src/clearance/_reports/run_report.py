"""The generic run report: the synthesis, then each task's result or why it has none."""

from __future__ import annotations

import re
from collections.abc import Sequence

from clearance._core.shown_text import escaped_count
from clearance._core.spec import Task
from clearance._orchestration.result import RunResult
from clearance._reports.base import Report, marks, one_line, plain
from clearance._state.queue import TaskStatus

__all__ = ["quoted", "run_report"]


def quoted(text: str) -> str:
    """``text`` in a fenced block that nothing in it can close: shown as written.

    A result or a synthesis is model output. As Markdown it could pose as the report's own
    sections (``## Edit (edit, by writer)``, a task it is not) or, rendered, fetch an image
    from a URL it chose; in a fence longer than its longest run of backticks, it is text.
    """
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def _escapes_note(what: str, text: str) -> list[str]:
    r"""A note that ``text`` held characters the report shows as escapes (`Report`), if any.

    ``\x1b`` in the report may be the model's own four characters: the note tells which it
    is. The answer as sent is in ``--json`` and ``clearance inspect``.
    """
    if not (count := escaped_count(text)):
        return []
    note = f"{what} held {count} control or bidirectional characters, shown as escapes"
    return ["", f"_Note: {note} (ESC as \\\\x1b)._"]


def run_report(
    result: RunResult, tasks: Sequence[Task], *, model_id: str, team_name: str = ""
) -> Report:
    """The report of any team: its synthesis and every task's result, labelled and quoted.

    Args:
        result: The run's result.
        tasks: The run's tasks, in the team file's order (a planned run's come from
            ``result``).
        model_id: The model that answered, named in the labels.
        team_name: The team file's name, in the first heading.

    Returns:
        The report; ``data`` holds ``run``, ``synthesis`` and ``tasks``.
    """
    lines = [
        "# Run report" + (f" ({team_name})" if team_name else ""),
        "",
        f"Run {result.run_id} ({result.status}); model {model_id}; {result.usage.requests} "
        f"model calls, {result.usage.prompt_tokens} prompt tokens.",
        "",
        f"## Synthesis (written by the coordinator, {model_id})",
        "",
    ]
    if result.synthesis:
        lines.append(quoted(result.synthesis.strip()))
        if found := marks(result.synthesis):
            lines += ["", f"_Note: the synthesis was {' and '.join(found)}._"]
        lines += _escapes_note("the synthesis", result.synthesis)
    else:
        reason = plain(one_line(result.error or "the synthesis did not complete"))
        lines.append(f"_No synthesis: {reason}._")
    titles = {t.id: t.title for t in tasks}
    order = [t.id for t in tasks] + [i for i in result.tasks if i not in titles]
    data_tasks = []
    for task_id in order:
        outcome = result.tasks.get(task_id)
        if outcome is None:
            continue
        heading = titles.get(task_id, task_id)
        # A planned run's titles are the model's: text, never a link or an image.
        lines += ["", f"## {plain(heading)} ({task_id}, by {outcome.assignee})", ""]
        if outcome.status is TaskStatus.COMPLETED and outcome.result is not None:
            text = outcome.result.strip()
            lines.append(quoted(text) if text else "_(empty result)_")
            if found := marks(outcome.result):
                lines += ["", f"_Note: this answer was {' and '.join(found)}._"]
            lines += _escapes_note("this answer", outcome.result)
        else:
            reason = plain(one_line(outcome.error or "no result"))  # may quote the answer
            lines.append(f"_{outcome.status}: {reason}_")
        data_tasks.append(
            {
                "task_id": task_id,
                "title": heading,
                "assignee": outcome.assignee,
                "status": str(outcome.status),
                "result": outcome.result,
                "error": outcome.error,
            }
        )
    data = {
        "run": {
            "run_id": result.run_id,
            "status": result.status,
            "model": model_id,
            "usage": result.usage.to_dict(),
        },
        "synthesis": result.synthesis,
        "tasks": data_tasks,
    }
    return Report(markdown="\n".join(lines).rstrip() + "\n", data=data)
