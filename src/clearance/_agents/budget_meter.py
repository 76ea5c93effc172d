"""`BudgetMeter`: what a run has used of its `RunBudget`, checked before each model call."""

from __future__ import annotations

from collections.abc import Iterable

from clearance._core.budget import RunBudget
from clearance._core.errors import BudgetExceeded
from clearance.models._base import Usage

__all__ = ["BudgetMeter"]


class BudgetMeter:
    """Counts a run's tokens and cost against its budget (see `clearance._core.budget`).

    One meter serves every model call of one session of a run (`ModelCaller` checks it
    before a call and charges it after); a resumed run's meter starts from what its earlier
    sessions used.

    Args:
        budget: The run's budget.
        run_id: The run, named in `BudgetExceeded`.
        spent: ``(model id, usage)`` of every earlier call of the run.

    Attributes:
        tokens: Prompt plus completion tokens used so far.
        cost_usd: US dollars used so far.
        exceeded: The error of the first refused call, or ``None``.
    """

    def __init__(
        self, budget: RunBudget, *, run_id: str, spent: Iterable[tuple[str, Usage]] = ()
    ) -> None:
        self.budget = budget
        self.run_id = run_id
        self.tokens = 0
        self.cost_usd = 0.0
        self.exceeded: BudgetExceeded | None = None
        for model_id, usage in spent:
            self.charge(model_id, usage)

    def check(self, subject: str) -> None:
        """Refuse a call once the budget is used.

        Args:
            subject: The call about to be made (``task:<id>``...).

        Raises:
            BudgetExceeded: The run has used its tokens or its cost budget.
        """
        budget = self.budget
        error: BudgetExceeded | None = None
        if budget.tokens is not None and self.tokens >= budget.tokens:
            error = BudgetExceeded("tokens", used=self.tokens, maximum=budget.tokens,
                                   run_id=self.run_id, subject=subject)  # fmt: skip
        elif budget.cost_usd is not None and self.cost_usd >= budget.cost_usd:
            error = BudgetExceeded("cost_usd", used=self.cost_usd, maximum=budget.cost_usd,
                                   run_id=self.run_id, subject=subject)  # fmt: skip
        if error is not None:
            if self.exceeded is None:
                self.exceeded = error
            raise error

    def charge(self, model_id: str, usage: Usage) -> None:
        """Count one call's usage."""
        self.tokens += usage.prompt_tokens + usage.completion_tokens
        self.cost_usd += self.budget.cost_usd_of(
            model_id, usage.prompt_tokens, usage.completion_tokens
        )
