"""`ReviewLoop`: a task's bounded review loop in a run (see `clearance._core.review`).

Each round is a fresh call (or tool loop) of the assignee, whose prompt the `ContextBuilder`
makes from the task, its dependencies (and its ``fan_out`` children's results) and the
findings that sent the previous candidate back (``review:<task>/<round>``), never what an
earlier round's conversation produced (the children it spawned included); then each
reviewer in order gets a prompt of its own with the task's text and the candidate only
(``candidate:<task>/<round>``), and answers with `REVIEW_SCHEMA`. Every reviewer's verdict
is recorded (event ``review_round``); the cap on rounds is enforced here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from clearance._context.prompts_review import review_subject
from clearance._core.errors import LimitExceeded, OutputValidationError
from clearance._core.prompt import sha256_text
from clearance._core.review import REVIEW_SCHEMA
from clearance._core.vocabulary import EventKind, RunEventKind
from clearance._orchestration.run import Run, RunSettings, prompt_budget
from clearance._orchestration.structured import validated_json
from clearance._orchestration.task_context import TaskContext

__all__ = ["ReviewLoop"]


class ReviewLoop:
    """Runs one task's review loop.

    Args:
        settings: What the orchestrator fixes for the run.
        run: The run's state.
        ctx: The task's context (its ``findings`` are set between rounds).
    """

    def __init__(self, settings: RunSettings, run: Run, ctx: TaskContext) -> None:
        self.settings = settings
        self.run = run
        self.ctx = ctx

    async def run_rounds(self, implement: Callable[[], Awaitable[str]]) -> str:
        """Run rounds until every reviewer accepts a candidate; return that candidate.

        Args:
            implement: One fresh answer of the assignee for the task (its prompt built from
                the task context, with the current findings).

        Raises:
            LimitExceeded: ``review.rounds``: no candidate was accepted within the rounds.
            OutputValidationError: A reviewer's answer is not a valid review.
        """
        task = self.ctx.task
        review = task.review
        assert review is not None
        given = dict(self.ctx.child_results)  # a fan-out's, gathered before round 1
        for round_no in range(1, review.rounds + 1):
            if round_no > 1:  # a fresh implementer: no child an earlier round spawned
                self.ctx.child_results.clear()
                self.ctx.child_results.update(given)
            candidate = await implement()
            sent_back = await self._review(candidate, round_no)
            if sent_back is None:
                return candidate
            self.ctx.findings = (sent_back,)
        raise LimitExceeded(
            "review.rounds", value=review.rounds + 1, maximum=review.rounds,
            subject=f"task:{task.id}",
        )  # fmt: skip

    async def _review(self, candidate: str, round_no: int) -> tuple[int, str, str] | None:
        """Have each reviewer look at ``candidate``; the first sending it back, else ``None``."""
        task, run, settings = self.ctx.task, self.run, self.settings
        assert task.review is not None
        for stage, name in enumerate(task.review.by, 1):
            reviewer = settings.team.agent(name)
            model = settings.model_for(reviewer)
            prompt = run.builder(model).build_review_prompt(
                task, reviewer=reviewer, candidate=candidate, round_no=round_no, stage=stage,
                max_prompt_tokens=prompt_budget(reviewer, model),
            )  # fmt: skip
            subject = review_subject(task.id, round_no, stage)
            response = await run.caller.call(
                subject=subject, agent=reviewer, model=model, prompt=prompt,
                json_schema=REVIEW_SCHEMA, budget=self.ctx.budget,
            )  # fmt: skip
            try:
                answer = validated_json(response.text.strip(), REVIEW_SCHEMA)
            except ValueError as exc:
                raise OutputValidationError(task.id, f"reviewer {name}: {exc}") from exc
            accepted, findings = task.review.verdict(answer)
            settings.ledger.record_event(run.run_id, EventKind.REVIEW_ROUND, subject, {
                "task_id": task.id, "round": round_no, "stage": stage, "reviewer": name,
                "accepted": accepted, "findings": findings,
                "candidate_sha256": sha256_text(candidate),
            })  # fmt: skip
            verdict = "accepts" if accepted else "sends it back"
            settings.emit(RunEventKind.REVIEW_ROUND, run.run_id, task_id=task.id,
                          detail=f"round {round_no}: {name} {verdict}")  # fmt: skip
            if not accepted:
                return round_no, name, findings
        return None
