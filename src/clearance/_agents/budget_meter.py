"""`BudgetMeter`: what a run has used of its `RunBudget`, checked before each model call.

Concurrent calls do not race past the budget: a call holds a *reservation* while it is in
flight, its estimate (the prompt's tokens plus the ``max_tokens`` it asks for, and their
cost). A call is sent only when the run has not used its budget and either no other call is
in flight or the usage so far, every reservation and its own fit in the budget; otherwise it
waits for a call in flight to settle. So the call that crosses the budget is one sent alone
(the budget's documented overshoot of at most one call), not every call that was checked
while the others were still out.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

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
        self._in_flight = 0
        self._reserved_tokens = 0
        self._reserved_cost_usd = 0.0
        self._waiting: list[asyncio.Future[None]] = []
        for model_id, usage in spent:
            self.charge(model_id, usage)

    @asynccontextmanager
    async def reserved(
        self, subject: str, model_id: str, *, prompt_tokens: int, max_tokens: int
    ) -> AsyncIterator[None]:
        """Hold a reservation for one call while it is in flight (see the module docstring).

        Args:
            subject: The call (``task:<id>``...), named in `BudgetExceeded`.
            model_id: The model called (its price prices the estimate).
            prompt_tokens: The prompt's tokens, as counted here.
            max_tokens: The most completion tokens the call asks for.

        Raises:
            BudgetExceeded: The run used its budget, before or while the call waited.
        """
        tokens = prompt_tokens + max_tokens
        cost = self.budget.cost_usd_of(model_id, prompt_tokens, max_tokens)
        while True:
            self.check(subject)
            if self._in_flight == 0 or self._fits(tokens, cost):
                break
            waiter = asyncio.get_running_loop().create_future()
            self._waiting.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiting:
                    self._waiting.remove(waiter)
        self._in_flight += 1
        self._reserved_tokens += tokens
        self._reserved_cost_usd += cost
        try:
            yield
        finally:
            self._in_flight -= 1
            self._reserved_tokens -= tokens
            self._reserved_cost_usd -= cost
            waiting, self._waiting = self._waiting, []
            for waiter in waiting:  # each checks again
                if not waiter.done():
                    waiter.set_result(None)

    def _fits(self, tokens: int, cost_usd: float) -> bool:
        """Whether the usage so far, every reservation and one more fit in the budget."""
        budget = self.budget
        if budget.tokens is not None and (
            self.tokens + self._reserved_tokens + tokens > budget.tokens
        ):
            return False
        return budget.cost_usd is None or (
            self.cost_usd + self._reserved_cost_usd + cost_usd <= budget.cost_usd
        )

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
