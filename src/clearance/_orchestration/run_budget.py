"""A run's budget in the orchestrator: one `BudgetMeter` per run, restored on resume.

The budget itself is part of the run's spec (``budget:`` and ``prices:``), recorded with it.
"""

from __future__ import annotations

from collections.abc import Iterable

from clearance._agents.budget_meter import BudgetMeter
from clearance._core.budget import RunBudget
from clearance._core.vocabulary import EventKind
from clearance._state.ledger import RunLedger
from clearance.models._base import ChatModel

__all__ = ["RunMeters"]


class RunMeters:
    """An orchestrator's budget meters, one per run (shared by its plan and its tasks)."""

    def __init__(self) -> None:
        self._by_run: dict[str, BudgetMeter] = {}

    def for_run(self, budget: RunBudget | None, run_id: str) -> BudgetMeter | None:
        """The run's meter, made on first use; ``None`` without a budget."""
        if budget is None:
            return None
        meter = self._by_run.get(run_id)
        if meter is None:
            meter = self._by_run[run_id] = BudgetMeter(budget, run_id=run_id)
        meter.budget = budget  # the orchestrator's budget may have been raised since
        return meter

    def resume(self, budget: RunBudget | None, run_id: str, ledger: RunLedger) -> None:
        """Start a resumed run's meter from what its recorded calls used.

        The budget this session runs under is recorded (event ``budget``): it may be larger
        than the one the run started with.
        """
        if budget is not None:
            spent = [(c.model_id, c.usage) for c in ledger.calls(run_id)]
            self._by_run[run_id] = BudgetMeter(budget, run_id=run_id, spent=spent)
            ledger.record_event(run_id, EventKind.BUDGET, "run", budget.to_dict())

    @staticmethod
    def check_prices(budget: RunBudget | None, models: Iterable[ChatModel]) -> None:
        """Refuse a cost budget without a price for each of ``models`` (see `RunBudget`).

        Raises:
            ConfigError: A model has no price.
        """
        if budget is not None:
            budget.check_prices({m.model_id for m in models})
