"""Prompts of a review loop (`Task.review`): a reviewer's, with the task and candidate only.

The implementer's prompt of a later round is the task prompt with the reviewer's findings
(`TaskPrompts.build_task_prompt`'s ``findings``); this module builds the reviewer's.
"""

from __future__ import annotations

from clearance._context import layout as L
from clearance._context.assemble import Part
from clearance._context.clearance import Clearance
from clearance._context.prompts_isolated import IsolatedPrompts
from clearance._core.origins import Origin, Subject
from clearance._core.prompt import Prompt
from clearance._core.spec import Agent, Task
from clearance._core.vocabulary import OriginKind, PromptKind

__all__ = ["ReviewPrompts", "review_subject"]


def review_subject(task_id: str, round_no: int, stage: int) -> str:
    """The call subject of a reviewer: ``review:<task>/<round>/<stage>`` (both from 1)."""
    return str(Subject(PromptKind.REVIEW, f"{task_id}/{round_no}/{stage}"))


class ReviewPrompts(IsolatedPrompts):
    """`ContextBuilder`'s reviewer prompts (layout kind ``review``)."""

    def build_review_prompt(
        self,
        task: Task,
        *,
        reviewer: Agent,
        candidate: str,
        round_no: int,
        stage: int,
        max_prompt_tokens: int | None = None,
    ) -> Prompt:
        """Build a reviewer's prompt: the task's text and the candidate result, nothing else.

        Args:
            task: The reviewed task (with a ``review``).
            reviewer: The reviewer (one of ``task.review.by``).
            candidate: The round's candidate result (origin ``candidate:<task>/<round>``).
            round_no: The round, from 1.
            stage: The reviewer's place in ``task.review.by``, from 1.
            max_prompt_tokens: Token budget of the prompt, ``None`` for no limit.

        Raises:
            ContextViolation: The round is outside the task's review loop.
            LimitExceeded: The prompt exceeds ``max_prompt_tokens``.
        """
        rounds = task.review.rounds if task.review is not None else 0
        clearance = Clearance.for_review(task.id, reviewer.name, rounds=rounds)
        task_part = Part(str(Origin("task", task.id)), L.task_label(task.title), task.description)
        candidate_part = Part(
            str(Origin(OriginKind.CANDIDATE, f"{task.id}/{round_no}")),
            f"Round {round_no}",
            candidate,
        )
        sections = {
            L.TASK: [self._admit(clearance, task_part)],
            L.CANDIDATE: [self._admit(clearance, candidate_part)],
        }
        return self._assemble(
            review_subject(task.id, round_no, stage), reviewer, PromptKind.REVIEW, sections,
            max_prompt_tokens=max_prompt_tokens, clearance=clearance,
        )  # fmt: skip
