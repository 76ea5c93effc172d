"""What a run returns: `RunResult`, its `TaskOutcome`s, and the progress `RunEvent`s."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from clearance._core.vocabulary import RunEventKind
from clearance._state.queue import TaskStatus
from clearance.models._base import Usage

__all__ = ["RunEvent", "RunEventKind", "RunResult", "TaskOutcome"]


@dataclass(frozen=True, kw_only=True, slots=True)
class RunEvent:
    """A progress event, delivered to the ``on_event`` callback of `Orchestrator`.

    Attributes:
        kind: What happened.
        run_id: The run.
        task_id: The task concerned, or ``None`` for run-level events. For ``model_call``,
            ``text`` and ``tool_call``: the task the call serves (a delegate's, a spawned
            child's, an isolated dispatch's, a clarification's or a review's call included);
            ``None`` for the plan's and the synthesis' calls.
        detail: A short human-readable detail (an error, a token count), or ``""``. For
            ``text``: a piece of a model's completion as it streams; for ``tool_call``: the
            tool's name; for ``model_call``: ``"attempt N"`` (a retried call streams again
            from its start); for ``awaiting_approval``: the approval's call id; for
            ``run_replayed`` (a resumed run): "replayed N model calls and M tool calls,
            sent K". Model
            output: untrusted text (sanitize it before showing it on a terminal).
        subject: For ``model_call``, ``text`` and ``tool_call``: the model call's subject
            (``task:<id>``, ``delegation:<id>``, ``synthesis``, ``plan``...); else ``None``.

    The ``model_call``, ``text`` and ``tool_call`` events come only from a streaming run
    (``Orchestrator(stream_text=True)`` or `Orchestrator.stream`).
    """

    kind: RunEventKind
    run_id: str
    task_id: str | None = None
    detail: str = ""
    subject: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskOutcome:
    """The final state of one task.

    Attributes:
        task_id: The task.
        assignee: The agent that ran it.
        status: ``completed``, ``failed`` or ``skipped``.
        result: The result text when completed, else ``None``.
        error: Why it failed or was skipped, else ``None``.
        prompt_tokens: Tokens of the prompt it was given (0 if it never ran).
        output: The validated result as a value when completed: an instance of the task's
            ``output_type`` (a pydantic model), the parsed JSON value for a task with an
            ``output_schema``; ``None`` for a free-text result. ``result`` keeps the text
            dependents received.
    """

    task_id: str
    assignee: str
    status: TaskStatus
    result: str | None = None
    error: str | None = None
    prompt_tokens: int = 0
    output: Any = None


@dataclass(frozen=True, kw_only=True, slots=True)
class RunResult:
    """What a run produced.

    Attributes:
        run_id: Id of the run in the ledger.
        status: ``completed`` when every task completed and the synthesis was written;
            ``awaiting_approval`` when the run paused for a person's approval (recorded
            ``interrupted``: decide, then resume it; ``error`` names the requests);
            ``failed`` otherwise (finished results are kept either way).
        synthesis: The coordinator's final answer, or ``None`` if synthesis failed.
        tasks: Outcome per task id, in graph order.
        usage: Tokens of every model call of the run.
        error: Why the run failed, or ``None``.
    """

    run_id: str
    status: Literal["completed", "failed", "awaiting_approval"]
    synthesis: str | None
    tasks: dict[str, TaskOutcome] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    error: str | None = None

    def result(self, task_id: str) -> str | None:
        """The result text of a task, ``None`` unless it completed.

        Raises:
            KeyError: If the run has no such task.
        """
        return self.tasks[task_id].result
