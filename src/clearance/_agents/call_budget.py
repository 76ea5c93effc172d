"""`CallBudget` and the listeners of `ModelCaller`: what one task's calls share.

A task's budget counts every call the task causes (its tool loop, its delegates, its
clarification rounds, its reviews and its spawned children) and fixes, once, the task all
of them serve (`CallBudget.task_id`): the caller tells a `ServingListener` that task with
each call event, whatever the call's subject.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from clearance._core.errors import LimitExceeded
from clearance._core.vocabulary import PromptKind, RunEventKind

__all__ = ["CallBudget", "CallEventKind", "CallListener", "ServingListener", "task_of"]

CallEventKind = Literal[RunEventKind.MODEL_CALL, RunEventKind.TEXT, RunEventKind.TOOL_CALL]
"""What a `CallListener` hears: an attempt starting (detail: ``"attempt N"``), a piece of
the completion's text (detail: the piece, untrusted), a tool call asked for (detail: its
name, untrusted)."""

CallListener = Callable[[CallEventKind, str, str], None]
"""Hears ``(kind, subject, detail)`` as calls are made; must not block."""

_TASK_PREFIX = f"{PromptKind.TASK}:"


@dataclass(frozen=True, slots=True)
class ServingListener:
    """A listener that also hears the task each call serves; must not block.

    ``hear(kind, subject, task_id, detail)``: ``task_id`` is the task the call serves, from
    the call's budget (`CallBudget.task_id`: a delegate's or child's budget is within the
    task's), or from a ``task:<id>`` subject for a call without one; ``None`` for a call
    that serves no task (the plan, the synthesis, a conversation).
    """

    hear: Callable[[CallEventKind, str, str | None, str], None]


def task_of(subject: str) -> str | None:
    """``<id>`` of a ``task:<id>`` subject, else ``None``."""
    return subject[len(_TASK_PREFIX) :] if subject.startswith(_TASK_PREFIX) else None


class CallBudget:
    """Counts the model calls one task causes, against its agent's ``max_model_calls``.

    One budget is shared by a task's tool loop, its delegates, its clarification rounds and
    its spawned children. Retries of one call are not counted again.

    A delegate or a spawned child has a budget of its own (its agent's ``max_model_calls``)
    ``within`` the task's: each of its calls counts toward both, so it never makes more
    calls than its own agent, nor than the task it serves, may.

    The task a budget serves (``task_id``) is fixed here, once: a ``task:<id>`` budget's
    ``<id>``, else the task of the budget it is within (so a delegate of a delegate or of a
    child serves the task at the root); ``None`` for a budget of no task (``synthesis``,
    ``plan``, ``conversation:<agent>``). Every call charged to it serves that task.

    Args:
        maximum: Most calls; ``None`` for no cap.
        subject: What the budget belongs to (``task:<id>``, ``delegation:<call id>``,
            ``child:<id>``), named in the error.
        within: The budget of the task this one serves, charged each call too; ``None``
            for a task's own.
    """

    def __init__(
        self, maximum: int | None, *, subject: str, within: CallBudget | None = None
    ) -> None:
        self.maximum = maximum
        self.subject = subject
        self.within = within
        self.used = 0
        self.task_id: str | None = within.task_id if within is not None else task_of(subject)

    def take(self) -> None:
        """Count one more call (here and in every budget this one is within).

        Raises:
            LimitExceeded: ``limit="max_model_calls"``: the call would be one too many for
                this budget or one it is within (nothing is counted then).
        """
        if self.maximum is not None and self.used >= self.maximum:
            raise LimitExceeded(
                "max_model_calls", value=self.used + 1, maximum=self.maximum, subject=self.subject
            )
        if self.within is not None:
            self.within.take()
        self.used += 1
